-- request_events: one row per (run, req_id), pivoting the event log (one hash aggregation over all events).
-- Times are the first occurrence of each kind, except last_ns (latest LAST_TOKEN) and last_event_ns (latest event).
-- status  = the terminal event's kind (FINISH | ERROR | REJECT | CANCEL; a request has exactly one); NULL = still
--           running at the end of the log; detail = the terminal event's detail (ERROR/REJECT/CANCEL: the reason;
--           a real endpoint's FINISH: e.g. "short_output: got 3 of 4 tokens; prompt_tokens=1031").
-- out_tokens = tokens of LAST_TOKEN / FINISH (output tokens received), else the sum over FIRST_TOKEN and CHUNK
--           events (what a request still running or failed had received).
-- arrive_tokens = the ARRIVE event's tokens (the prompt length; per_request falls back to it without a requests row).
-- cached_tokens = the largest cached_tokens reported for the request (FINISH carries the final count).
-- *_instance = the instance of that kind's event (the smallest name if there are several).
-- Aggregates are min/max with FILTER rather than arg_min: this query is most of `kvbench summary`'s time.
CREATE OR REPLACE TEMP TABLE request_events AS
SELECT run, req_id,
    min(t_ns) FILTER (WHERE kind = 'ARRIVE') AS arrive_ns,
    max(tokens) FILTER (WHERE kind = 'ARRIVE') AS arrive_tokens,
    min(t_ns) FILTER (WHERE kind = 'SEND') AS send_ns,
    min(t_ns) FILTER (WHERE kind = 'ROUTE') AS route_ns,
    min(t_ns) FILTER (WHERE kind = 'PREFILL_START') AS prefill_start_ns,
    min(instance) FILTER (WHERE kind = 'PREFILL_START') AS prefill_instance,
    min(t_ns) FILTER (WHERE kind = 'DECODE_START') AS decode_start_ns,
    min(instance) FILTER (WHERE kind = 'DECODE_START') AS decode_instance,
    min(t_ns) FILTER (WHERE kind = 'FIRST_TOKEN') AS first_ns,
    min(instance) FILTER (WHERE kind = 'FIRST_TOKEN') AS first_instance,
    max(t_ns) FILTER (WHERE kind = 'LAST_TOKEN') AS last_ns,
    min(t_ns) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS end_ns,
    max(kind) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS status,
    max(detail) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS detail,
    coalesce(max(tokens) FILTER (WHERE kind IN ('LAST_TOKEN', 'FINISH')),
             sum(tokens) FILTER (WHERE kind IN ('FIRST_TOKEN', 'CHUNK')), 0)::BIGINT AS out_tokens,
    count(*) FILTER (WHERE kind = 'CHUNK') AS n_chunks,
    max(cached_tokens) AS cached_tokens,
    count(*) FILTER (WHERE kind = 'PREEMPT') AS preemptions,
    count(*) FILTER (WHERE kind = 'MIGRATE') AS migrations,
    max(t_ns) AS last_event_ns
FROM events
GROUP BY run, req_id;
