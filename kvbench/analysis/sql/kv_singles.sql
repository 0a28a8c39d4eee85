-- kv_singles: the rows of kv_transfers.sql for the requests with one KV transfer (one KV_XFER_START, at most one
-- KV_XFER_END), from request_events merged from the per-request parts (request_parts.sql) rather than paired from
-- the events; the same formulas as kv_transfers.sql (wire start, nbytes, in_ttft_ns; no END: NULL end and duration).
WITH arrivals AS (  -- requests.arrival_ns of the requests whose log has no ARRIVE (usually none)
    SELECT run, req_id, arrival_ns FROM requests
    WHERE (run, req_id) IN (SELECT (run, req_id) FROM request_events WHERE arrive_ns IS NULL)
)
SELECT p.run, p.req_id, p.kv_instance AS instance, p.kv_tier AS tier, coalesce(p.kv_end_nbytes, p.kv_nbytes) AS nbytes,
       p.kv_wire_ns AS start_ns, p.kv_end_ns AS end_ns, p.kv_end_ns - p.kv_wire_ns AS duration_ns,
       greatest(0, least(p.kv_end_ns, p.first_ns) - greatest(p.kv_start_ns, coalesce(p.arrive_ns, a.arrival_ns)))
           AS in_ttft_ns
FROM request_events p LEFT JOIN arrivals a ON a.run = p.run AND a.req_id = p.req_id
WHERE p.kv_starts = 1 AND p.kv_ends <= 1;
