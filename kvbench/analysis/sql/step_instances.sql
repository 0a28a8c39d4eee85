-- step_instances: the (run, instance) pairs of the simulator's steps table, numbered `inst` 0, 1, ... in
-- (run, instance) order, and their runs `run_no` 0, 1, ... in run order; stepgaps.py works on these numbers and names
-- them back through this table.
CREATE OR REPLACE TEMP TABLE step_instances AS
SELECT run, instance, (row_number() OVER (ORDER BY run, instance) - 1)::INTEGER AS inst,
       (dense_rank() OVER (ORDER BY run) - 1)::INTEGER AS run_no
FROM (SELECT DISTINCT run, instance FROM steps);
