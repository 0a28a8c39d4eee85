-- request_parts: request_events (the same columns and values as request_events.sql) from the per-request parts
-- the event log writes beside its events parts (kvbench/requestparts.py): one row per request per part that
-- holds its events. Most requests lie in one part: their row is taken as it is; the others' rows are merged,
-- each column by the aggregate it was computed with (a count by sum). out_tokens: the largest LAST_TOKEN / FINISH
-- tokens, else the FIRST_TOKEN and CHUNK tokens summed. Also the KV transfer columns for kv_singles.sql: kv_starts
-- and kv_ends (how many START / END events) and the START's and END's fields, which are those of the request's only
-- transfer where kv_starts = 1 and kv_ends <= 1 (one part holds them, the others' are NULL).
CREATE OR REPLACE TEMP TABLE request_events AS
WITH multi AS MATERIALIZED (  -- the requests with rows in several parts (one in a hundred or two)
    SELECT run, req_id FROM request_parts GROUP BY run, req_id HAVING count(*) > 1
)
SELECT run, req_id, arrive_ns, arrive_tokens, send_ns, route_ns, prefill_start_ns, prefill_instance, decode_start_ns,
    decode_instance, first_ns, first_instance, last_ns, end_ns, status, detail,
    coalesce(out_max, out_sum, 0)::BIGINT AS out_tokens, n_chunks, cached_tokens, preemptions, migrations,
    last_event_ns, kv_starts, kv_start_ns, kv_wire_ns, kv_tier, kv_nbytes, kv_instance, kv_ends, kv_end_ns,
    kv_end_nbytes
FROM request_parts p ANTI JOIN multi m ON p.run = m.run AND p.req_id = m.req_id
UNION ALL BY NAME
SELECT run, req_id,
    min(arrive_ns) AS arrive_ns,
    max(arrive_tokens) AS arrive_tokens,
    min(send_ns) AS send_ns,
    min(route_ns) AS route_ns,
    min(prefill_start_ns) AS prefill_start_ns,
    min(prefill_instance) AS prefill_instance,
    min(decode_start_ns) AS decode_start_ns,
    min(decode_instance) AS decode_instance,
    min(first_ns) AS first_ns,
    min(first_instance) AS first_instance,
    max(last_ns) AS last_ns,
    min(end_ns) AS end_ns,
    max(status) AS status,
    max(detail) AS detail,
    coalesce(max(out_max), sum(out_sum), 0)::BIGINT AS out_tokens,
    sum(n_chunks)::BIGINT AS n_chunks,
    max(cached_tokens) AS cached_tokens,
    sum(preemptions)::BIGINT AS preemptions,
    sum(migrations)::BIGINT AS migrations,
    max(last_event_ns) AS last_event_ns,
    sum(kv_starts)::BIGINT AS kv_starts,
    max(kv_start_ns) AS kv_start_ns,
    max(kv_wire_ns) AS kv_wire_ns,
    max(kv_tier) AS kv_tier,
    max(kv_nbytes) AS kv_nbytes,
    max(kv_instance) AS kv_instance,
    sum(kv_ends)::BIGINT AS kv_ends,
    max(kv_end_ns) AS kv_end_ns,
    max(kv_end_nbytes) AS kv_end_nbytes
FROM request_parts p SEMI JOIN multi m ON p.run = m.run AND p.req_id = m.req_id
GROUP BY run, req_id;
