-- request_events: one row per (run, req_id), pivoting the event log.
-- Times are the first occurrence of each kind, except last_ns (latest LAST_TOKEN).
-- status  = kind of the first terminal event (FINISH | ERROR | REJECT | CANCEL); NULL = still running at the end.
-- out_tokens = tokens of LAST_TOKEN, else of FINISH, else the sum over FIRST_TOKEN and CHUNK events.
-- cached_tokens = cached_tokens of FINISH (prompt tokens served from a prefix cache), else the largest reported.
CREATE OR REPLACE TEMP TABLE request_events AS
SELECT run, req_id,
    min(t_ns) FILTER (WHERE kind = 'ARRIVE') AS arrive_ns,
    max(tokens) FILTER (WHERE kind = 'ARRIVE') AS arrive_tokens,
    min(t_ns) FILTER (WHERE kind = 'SEND') AS send_ns,
    min(t_ns) FILTER (WHERE kind = 'ROUTE') AS route_ns,
    min(t_ns) FILTER (WHERE kind = 'PREFILL_START') AS prefill_start_ns,
    arg_min(instance, t_ns) FILTER (WHERE kind = 'PREFILL_START') AS prefill_instance,
    min(t_ns) FILTER (WHERE kind = 'DECODE_START') AS decode_start_ns,
    arg_min(instance, t_ns) FILTER (WHERE kind = 'DECODE_START') AS decode_instance,
    min(t_ns) FILTER (WHERE kind = 'FIRST_TOKEN') AS first_ns,
    arg_min(instance, t_ns) FILTER (WHERE kind = 'FIRST_TOKEN') AS first_instance,
    max(t_ns) FILTER (WHERE kind = 'LAST_TOKEN') AS last_ns,
    min(t_ns) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS end_ns,
    arg_min(kind, t_ns) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS status,
    arg_min(detail, t_ns) FILTER (WHERE kind IN ('FINISH', 'ERROR', 'REJECT', 'CANCEL')) AS detail,
    coalesce(max(tokens) FILTER (WHERE kind = 'LAST_TOKEN'), max(tokens) FILTER (WHERE kind = 'FINISH'),
             sum(tokens) FILTER (WHERE kind IN ('FIRST_TOKEN', 'CHUNK')), 0)::BIGINT AS out_tokens,
    count(*) FILTER (WHERE kind = 'CHUNK') AS n_chunks,
    coalesce(max(cached_tokens) FILTER (WHERE kind = 'FINISH'), max(cached_tokens)) AS cached_tokens,
    count(*) FILTER (WHERE kind = 'PREEMPT') AS preemptions,
    count(*) FILTER (WHERE kind = 'MIGRATE') AS migrations
FROM events
GROUP BY run, req_id;
