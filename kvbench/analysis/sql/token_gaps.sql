-- token_gaps (a view: expanded only when queried; the summary gets ITL and TBT of simulator runs in closed form
-- from stepgaps.py): the gaps between consecutive token arrivals of each request, as (gap_ns, n) pairs: n gaps of
-- gap_ns; src says where a row came from: 'chunk' and 'even' from event_gaps.sql, and
--  3. simulator runs (a steps table), src 'steps': a request decoding on instance I from DECODE_START (or
--     FIRST_TOKEN) to LAST_TOKEN experiences every step of I that starts and ends inside that interval (it joins
--     the batch at the next step boundary). A steps row holds n_steps steps of equal length d = (end_ns - t_ns) /
--     n_steps, the k-th spanning [t_ns + (k-1) d, t_ns + k d): per row, n = (steps ended by e) - (steps started
--     before s). Approximation: the wait between FIRST_TOKEN and DECODE_START (KV transfer) is not a gap here (it
--     is in TPOT), and a request migrated to another instance is followed on its DECODE_START instance only.
--     Approximation bounding the work: back-to-back rows of an instance whose step lengths fall in the same 1 %
--     log bin (floor(ln(gap) / ln(1.01))) are merged into one segment of sum(n_steps) steps of their mean length,
--     so a gap may be off by < 1 % and a request's step count at a segment's edge by one step.
--     step_segments numbers the segments (row_no) in (run, instance, time) order; step_spans holds the first (lo)
--     and last (hi) segment each decoding request overlaps (stepgaps.py): a request gets every step of the
--     segments strictly between, and the formula above at lo and hi.
CREATE OR REPLACE TEMP VIEW token_gaps AS
WITH spans AS (
    SELECT run, req_id, s_ns, e_ns, unnest(range(lo, hi + 1)) AS row_no FROM step_spans
),
step_gaps AS (
    SELECT r.run, r.req_id, (st.end_ns - st.t_ns)::DOUBLE / st.n_steps AS gap_ns,
           (least(greatest(r.e_ns - st.t_ns, 0), st.end_ns - st.t_ns) * st.n_steps) // (st.end_ns - st.t_ns)
         - (least(greatest(r.s_ns - st.t_ns, 0), st.end_ns - st.t_ns) * st.n_steps + st.end_ns - st.t_ns - 1)
           // (st.end_ns - st.t_ns) AS n,
           'steps' AS src
    FROM spans r JOIN step_segments st ON st.row_no = r.row_no
)
SELECT run, req_id, gap_ns, n, src FROM event_gaps
UNION ALL SELECT * FROM step_gaps WHERE n > 0;
