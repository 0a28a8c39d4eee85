-- slo_parts: the attainment of each SLO on its own, per run (slo_attainment in run_totals.sql needs all at once).
--   finished_ratio  = finished requests / requests: what any SLO needs first (not an error, rejection,
--                     cancellation, or still running at the end)
--   ttft_attainment = finished requests meeting the TTFT SLO / requests; tpot_, e2el_ and tbt_attainment alike
--                     (per_request.sql's *_met columns); NULL when that SLO is not given
-- requests: as slo_attainment's denominator, every request but those an interruption cancelled before sending
SELECT run,
    count(*) FILTER (WHERE status = 'FINISH') / count(*) AS finished_ratio,
    CASE WHEN count(ttft_met) > 0 THEN count(*) FILTER (WHERE status = 'FINISH' AND ttft_met) / count(*) END
        AS ttft_attainment,
    CASE WHEN count(tpot_met) > 0 THEN count(*) FILTER (WHERE status = 'FINISH' AND tpot_met) / count(*) END
        AS tpot_attainment,
    CASE WHEN count(e2el_met) > 0 THEN count(*) FILTER (WHERE status = 'FINISH' AND e2el_met) / count(*) END
        AS e2el_attainment,
    CASE WHEN count(tbt_met) > 0 THEN count(*) FILTER (WHERE status = 'FINISH' AND tbt_met) / count(*) END
        AS tbt_attainment
FROM per_request WHERE NOT interrupted_unsent GROUP BY run ORDER BY run;
