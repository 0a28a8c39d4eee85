-- event_gaps: the token gaps that come from the event log itself, as (gap_ns, n) pairs: n gaps of gap_ns; src
-- says which source ('chunk', 'even'). The simulator's gaps (src 'steps') come from its steps table instead, see
-- token_gaps.sql.
--  1. real endpoints: gaps between consecutive FIRST_TOKEN and CHUNK events (one gap per streamed chunk, as vLLM's
--     itl; LAST_TOKEN repeats the last chunk's time and is not a token arrival);
--  2. runs without CHUNK events and without a steps table (e.g. the fixed target): the request's tokens are taken
--     as evenly spaced, n = out_tokens - 1 gaps of (last_ns - first_ns) / (out_tokens - 1).
-- finished = the request's terminal event is FINISH (itl.sql pools finished requests' gaps without a join).
CREATE OR REPLACE TEMP TABLE event_gaps AS
WITH chunk_gaps AS (
    SELECT run, req_id, (t_ns - lag(t_ns) OVER (PARTITION BY run, req_id ORDER BY t_ns))::DOUBLE AS gap_ns,
           1::BIGINT AS n, 'chunk' AS src, finished
    FROM events e JOIN (SELECT run, req_id, coalesce(status = 'FINISH', false) AS finished FROM request_events
                        WHERE n_chunks > 0) c USING (run, req_id)
    WHERE kind IN ('FIRST_TOKEN', 'CHUNK')
),
even_gaps AS (
    SELECT run, req_id, (last_ns - first_ns)::DOUBLE / (out_tokens - 1) AS gap_ns, out_tokens - 1 AS n,
           'even' AS src, coalesce(status = 'FINISH', false) AS finished
    FROM request_events
    WHERE n_chunks = 0 AND out_tokens >= 2 AND last_ns >= first_ns AND run NOT IN (SELECT DISTINCT run FROM steps)
)
SELECT * FROM chunk_gaps WHERE gap_ns IS NOT NULL
UNION ALL SELECT * FROM even_gaps;
