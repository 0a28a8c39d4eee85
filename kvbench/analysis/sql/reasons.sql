-- reasons: requests that ended without finishing, by status and reason (class of the detail, text before ':';
-- 'unknown' when the detail names none).
SELECT run, status, coalesce(nullif(reason, ''), 'unknown') AS reason, count(*) AS requests
FROM per_request WHERE status NOT IN ('FINISH', 'RUNNING')
GROUP BY ALL ORDER BY run, status, requests DESC, reason;
