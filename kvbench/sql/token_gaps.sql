-- token_gaps: the gaps between consecutive token arrivals of each request, as (gap_ns, n) pairs: n gaps of gap_ns;
-- src says which of the sources below a row came from ('chunk', 'even', 'steps').
-- Three sources, by what the run recorded:
--  1. real endpoints: gaps between consecutive FIRST_TOKEN and CHUNK events (one gap per streamed chunk, as vLLM's
--     itl; LAST_TOKEN repeats the last chunk's time and is not a token arrival);
--  2. runs without CHUNK events and without a steps table (e.g. the fixed target): the request's tokens are taken
--     as evenly spaced, n = out_tokens - 1 gaps of (last_ns - first_ns) / (out_tokens - 1);
--  3. simulator runs (a steps table): a request decoding on instance I from DECODE_START (or FIRST_TOKEN) to
--     LAST_TOKEN experiences every step of I that starts and ends inside that interval (it joins the batch at
--     the next step boundary). A steps row holds n_steps steps of equal length d = (end_ns - t_ns) / n_steps, the
--     k-th spanning [t_ns + (k-1) d, t_ns + k d): per row, n = (steps ended by e) - (steps started before s).
--     Approximation: the wait between FIRST_TOKEN and DECODE_START (KV transfer) is not a gap here (it is in
--     TPOT), and a request migrated to another instance is followed on its DECODE_START instance only.
--     Approximation bounding the work: back-to-back rows of an instance whose step lengths fall in the same 1 %
--     log bin (floor(ln(gap) / ln(1.01))) are merged into one segment of sum(n_steps) steps of their mean length,
--     so a gap may be off by < 1 % and a request's step count at a segment's edge by one step.
--     Segments are numbered in (run, instance, time) order; two ASOF joins find the first and last segment a
--     request overlaps, and the request is expanded to exactly those numbers (range(lo, hi + 1)) and
--     equi-joined to them: work grows with the segments each request overlaps, never with instances x requests.
CREATE OR REPLACE TEMP TABLE token_gaps AS
WITH sim_runs AS (SELECT DISTINCT run FROM steps),
chunk_gaps AS (
    SELECT run, req_id, (t_ns - lag(t_ns) OVER (PARTITION BY run, req_id ORDER BY t_ns))::DOUBLE AS gap_ns,
           1::BIGINT AS n, 'chunk' AS src
    FROM events e SEMI JOIN (SELECT run, req_id FROM request_events WHERE n_chunks > 0) c USING (run, req_id)
    WHERE kind IN ('FIRST_TOKEN', 'CHUNK')
),
even_gaps AS (
    SELECT run, req_id, (last_ns - first_ns)::DOUBLE / (out_tokens - 1) AS gap_ns, out_tokens - 1 AS n,
           'even' AS src
    FROM request_events
    WHERE n_chunks = 0 AND out_tokens >= 2 AND last_ns >= first_ns AND run NOT IN (SELECT run FROM sim_runs)
),
binned AS (
    SELECT run, instance, t_ns, end_ns, n_steps, floor(ln((end_ns - t_ns) / n_steps) / ln(1.01)) AS bin
    FROM steps WHERE n_steps > 0 AND end_ns > t_ns
),
flagged AS (
    SELECT *, CASE WHEN bin = lag(bin) OVER w AND t_ns = lag(end_ns) OVER w THEN 0 ELSE 1 END AS new_segment
    FROM binned WINDOW w AS (PARTITION BY run, instance ORDER BY t_ns)
),
numbered AS (
    SELECT *, sum(new_segment) OVER (ORDER BY run, instance, t_ns ROWS UNBOUNDED PRECEDING)::BIGINT AS row_no
    FROM flagged
),
st AS (
    SELECT run, instance, min(t_ns) AS t_ns, max(end_ns) AS end_ns, sum(n_steps)::BIGINT AS n_steps, row_no
    FROM numbered GROUP BY run, instance, row_no
),
decoding AS (
    SELECT run, req_id, coalesce(decode_instance, first_instance) AS instance,
           coalesce(decode_start_ns, first_ns) AS s_ns, last_ns AS e_ns
    FROM request_events
    WHERE run IN (SELECT run FROM sim_runs) AND last_ns > coalesce(decode_start_ns, first_ns)
),
first_row AS (
    SELECT d.*, st.row_no AS lo FROM decoding d
    ASOF JOIN st ON d.run = st.run AND d.instance = st.instance AND d.s_ns < st.end_ns
),
row_range AS (
    SELECT f.*, st.row_no AS hi FROM first_row f
    ASOF JOIN st ON f.run = st.run AND f.instance = st.instance AND f.e_ns > st.t_ns
),
spans AS (
    SELECT run, req_id, s_ns, e_ns, unnest(range(lo, hi + 1)) AS row_no FROM row_range WHERE hi >= lo
),
sim_gaps AS (
    SELECT r.run, r.req_id, (st.end_ns - st.t_ns)::DOUBLE / st.n_steps AS gap_ns,
           (least(greatest(r.e_ns - st.t_ns, 0), st.end_ns - st.t_ns) * st.n_steps) // (st.end_ns - st.t_ns)
         - (least(greatest(r.s_ns - st.t_ns, 0), st.end_ns - st.t_ns) * st.n_steps + st.end_ns - st.t_ns - 1)
           // (st.end_ns - st.t_ns) AS n,
           'steps' AS src
    FROM spans r JOIN st ON st.row_no = r.row_no
)
SELECT * FROM chunk_gaps WHERE gap_ns IS NOT NULL
UNION ALL SELECT * FROM even_gaps
UNION ALL SELECT * FROM sim_gaps WHERE n > 0;
