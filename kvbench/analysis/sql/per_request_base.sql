-- per_request_base: the columns of per_request (per_request.sql, where each is defined) that need neither the
-- requests' TBT nor the SLO: built while stepgaps.py computes the TBT (analysis/tables.py), so that per_request
-- itself is only this table joined with tbt and the SLO columns.
CREATE OR REPLACE TEMP TABLE per_request_base AS
WITH joined AS (
    SELECT coalesce(e.run, r.run) AS run, coalesce(e.req_id, r.req_id) AS req_id,
           coalesce(e.arrive_ns, r.arrival_ns) AS arrival_ns, e.send_ns, e.first_ns, e.last_ns, e.end_ns,
           e.arrive_ns IS NOT NULL AS arrived, coalesce(e.status, 'RUNNING') AS status,
           CASE WHEN e.status IN ('ERROR', 'REJECT', 'CANCEL')
                THEN trim(split_part(coalesce(e.detail, 'unknown'), ':', 1)) END AS reason,
           coalesce(r.input_tokens, e.arrive_tokens) AS input_tokens,
           CASE WHEN e.status = 'FINISH' THEN TRY_CAST(nullif(regexp_extract(
               e.detail, '(?:^|;)\s*prompt_tokens=([0-9]+)', 1), '') AS BIGINT) END AS prompt_tokens,
           coalesce(e.out_tokens, 0) AS output_tokens,
           e.cached_tokens, r.trace_reuse_tokens, e.route_ns, e.prefill_start_ns, e.last_event_ns,
           coalesce(e.prefill_instance, e.first_instance) AS instance,
           coalesce(e.preemptions, 0) AS preemptions, coalesce(e.migrations, 0) AS migrations
    FROM request_events e FULL OUTER JOIN requests r ON e.run = r.run AND e.req_id = r.req_id
),
timed AS (
    SELECT j.*, first_ns - arrival_ns AS ttft_ns,
           CASE WHEN output_tokens >= 2 THEN (last_ns - first_ns)::DOUBLE / (output_tokens - 1) END AS tpot_ns,
           last_ns - arrival_ns AS e2e_ns, send_ns - arrival_ns AS lag_ns,
           prefill_start_ns - coalesce(route_ns, send_ns) AS queue_ns
    FROM joined j
)
SELECT * EXCLUDE (route_ns, prefill_start_ns) FROM timed;
