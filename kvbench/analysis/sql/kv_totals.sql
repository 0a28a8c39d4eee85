-- kv_totals: KV transfer totals per run (from the kv_transfers rows):
--   transfers, bytes = sum(nbytes), time = sum(duration_ns), mean duration;
--   ttft_share = sum(in_ttft_ns) / sum(ttft_ns) over finished requests (the part of TTFT spent moving KV).
WITH t AS (
    SELECT run, count(*) AS transfers, sum(nbytes)::BIGINT AS nbytes, sum(duration_ns)::BIGINT AS duration_ns,
           avg(duration_ns) AS mean_ns, sum(in_ttft_ns)::BIGINT AS in_ttft_ns
    FROM kv_transfers GROUP BY run
), f AS (SELECT run, sum(ttft_ns) AS ttft_ns FROM per_request WHERE status = 'FINISH' GROUP BY run)
SELECT t.*, t.in_ttft_ns / nullif(f.ttft_ns, 0) AS ttft_share FROM t LEFT JOIN f ON t.run = f.run ORDER BY t.run;
