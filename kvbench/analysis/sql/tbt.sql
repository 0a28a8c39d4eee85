-- tbt: Mooncake's TBT per request = mean of its longest 10 % token gaps (FAST'25 §5).
-- With G = the request's number of gaps, k = ceil(G / 10) (at least 1 when G >= 1); the gaps are sorted longest
-- first and the first k are averaged. Gaps come as (gap_ns, n) pairs, so a pair contributes
-- min(n, k - gaps before it) copies of gap_ns. Evenly spaced requests (src 'even', one pair) have TBT = gap_ns.
-- Simulator requests: the same formula, computed by stepgaps.py over their step segments (table step_tbt).
CREATE OR REPLACE TEMP TABLE tbt AS
WITH ranked AS (
    SELECT run, req_id, gap_ns, n,
           sum(n) OVER (PARTITION BY run, req_id ORDER BY gap_ns DESC ROWS UNBOUNDED PRECEDING) - n AS before,
           ceil(sum(n) OVER (PARTITION BY run, req_id) / 10.0) AS k
    FROM event_gaps WHERE src <> 'even'
)
SELECT run, req_id, sum(gap_ns * greatest(0, least(n, k - before))) / any_value(k) AS tbt_ns
FROM ranked WHERE before < k
GROUP BY run, req_id
UNION ALL
SELECT run, req_id, gap_ns AS tbt_ns FROM event_gaps WHERE src = 'even'
UNION ALL
SELECT run, req_id, tbt_ns FROM step_tbt;
