-- step_instances: the (run, instance) pairs of the simulator's steps table, numbered `inst` 0, 1, ... in
-- (run, instance) order; stepgaps.py works on these numbers and names them back through this table.
CREATE OR REPLACE TEMP TABLE step_instances AS
SELECT run, instance, (row_number() OVER (ORDER BY run, instance) - 1)::INTEGER AS inst
FROM (SELECT DISTINCT run, instance FROM steps);
