-- arrivals: the arrival rate a run achieved and the rate its schedule offered, per run.
--   arrivals         = requests with an ARRIVE event (released to the target)
--   arrival_rate     = (arrivals - 1) / (last ARRIVE - first ARRIVE): the achieved rate, gaps over the span (the
--                      goodput search measures a trace's own rate the same way)
--   starts           = arrived requests that start a session (its earliest ARRIVE) or belong to none
--   scheduled_rate   = (starts - 1) / (last start - first start) * arrivals / starts: the rate of session starts
--                      times requests per start. Without sessions it equals arrival_rate. A later turn waits for
--                      the previous turn's answer and its think time, so on session workloads the achieved rate
--                      falls short of it as answers slow down, and in the tail after the last start.
WITH arrived AS (
    SELECT p.run, p.arrival_ns, coalesce(r.session_id, -1) AS session_id
    FROM per_request p LEFT JOIN requests r ON p.run = r.run AND p.req_id = r.req_id
    WHERE p.arrived
),
starts AS (  -- a session's earliest arrival, or a request in no session: grouping, not a window over every row
    SELECT run, arrival_ns FROM arrived WHERE session_id < 0
    UNION ALL
    SELECT run, min(arrival_ns) FROM arrived WHERE session_id >= 0 GROUP BY run, session_id
),
per_run AS (
    SELECT a.run, a.arrivals, a.span_ns, s.starts, s.start_span_ns
    FROM (SELECT run, count(*) AS arrivals, max(arrival_ns) - min(arrival_ns) AS span_ns FROM arrived GROUP BY run) a
    LEFT JOIN (SELECT run, count(*) AS starts, max(arrival_ns) - min(arrival_ns) AS start_span_ns
               FROM starts GROUP BY run) s ON a.run = s.run
),
runs AS (SELECT DISTINCT run FROM per_request)
SELECT r.run, coalesce(a.arrivals, 0) AS arrivals, coalesce(a.starts, 0) AS starts,
    (a.arrivals - 1) / nullif(a.span_ns, 0) AS arrived_per_ns,
    (a.starts - 1) / nullif(a.start_span_ns, 0) * a.arrivals / a.starts AS scheduled_per_ns
FROM runs r LEFT JOIN per_run a ON r.run = a.run ORDER BY r.run;
