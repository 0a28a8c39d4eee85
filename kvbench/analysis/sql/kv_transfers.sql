-- kv_transfers: one row per KV transfer, pairing a request's i-th KV_XFER_START with its i-th KV_XFER_END.
--   duration_ns = end - wire start;  nbytes = END's nbytes, else START's;  tier = START's tier (link or KV tier)
--   wire start  = START's t_ns, or for the simulator's layer-wise P->D streaming the `layerwise_from_ns=` in its
--                 detail: that START marks only the exposed tail after the prefill, the wire began during it
--   in_ttft_ns  = part of the START..END interval inside the request's [arrival, FIRST_TOKEN] window (0 if none):
--                 the transfer time TTFT pays (for layer-wise streaming only the exposed tail); arrival as in
--                 per_request: the ARRIVE time, else requests.arrival_ns
-- A START without an END (run killed mid-transfer) has NULL end_ns and duration_ns.
-- kv_events: the events whose transfers are paired here (tables.py): all of them, or where request_events was
-- merged from the per-request parts, those of the requests with several STARTs or ENDs (kv_events.sql; the rest
-- come from kv_singles.sql).
-- STARTs and ENDs are numbered by a window each (one over both, partitioned by kind, costs more); arrival and
-- FIRST_TOKEN come from request_events, so the transfers need not wait for per_request. The wire start is cut from
-- the detail with split_part when what follows `layerwise_from_ns=` up to a space is all digits (the simulator's
-- form; the same number the regular expression finds), else found by the regular expression (slower).
-- Rows come unordered (sorting a million transfers costs a summary a second); kv_transfers() orders them.
WITH s AS (
    SELECT run, req_id, t_ns, tier, nbytes, instance, detail,
           split_part(split_part(detail, 'layerwise_from_ns=', 2), ' ', 1) AS cut,
           row_number() OVER (PARTITION BY run, req_id ORDER BY t_ns) AS i
    FROM kv_events WHERE kind = 'KV_XFER_START'
), wired AS (
    SELECT * EXCLUDE (cut, detail),
           CASE WHEN cut <> '' AND ltrim(cut, '0123456789') = '' THEN coalesce(TRY_CAST(cut AS BIGINT), t_ns)
                ELSE coalesce(TRY_CAST(nullif(regexp_extract(detail, 'layerwise_from_ns=([0-9]+)', 1), '') AS BIGINT),
                              t_ns) END AS wire_ns
    FROM s
), e AS (
    SELECT run, req_id, t_ns, nbytes, row_number() OVER (PARTITION BY run, req_id ORDER BY t_ns) AS i
    FROM kv_events WHERE kind = 'KV_XFER_END'
), arrivals AS (  -- requests.arrival_ns of the requests whose log has no ARRIVE (usually none)
    SELECT run, req_id, arrival_ns FROM requests
    WHERE (run, req_id) IN (SELECT (run, req_id) FROM request_events WHERE arrive_ns IS NULL)
)
SELECT s.run, s.req_id, s.instance, s.tier, coalesce(e.nbytes, s.nbytes) AS nbytes, s.wire_ns AS start_ns,
       e.t_ns AS end_ns, e.t_ns - s.wire_ns AS duration_ns,
       greatest(0, least(e.t_ns, p.first_ns) - greatest(s.t_ns, coalesce(p.arrive_ns, a.arrival_ns))) AS in_ttft_ns
FROM wired s LEFT JOIN e ON e.run = s.run AND e.req_id = s.req_id AND e.i = s.i
JOIN request_events p ON p.run = s.run AND p.req_id = s.req_id
LEFT JOIN arrivals a ON a.run = s.run AND a.req_id = s.req_id;
