-- itl: the pooled inter-token gaps of successful requests, grouped by value: n gaps of gap_ns each.
-- ITL statistics are weighted over these (each gap counts once), see token_gaps.sql for where gaps come from;
-- the simulator's gaps come already pooled per run and gap length from stepgaps.py (table step_itl).
WITH g AS (
    SELECT run, gap_ns, n FROM event_gaps WHERE finished
    UNION ALL
    SELECT run, gap_ns, n FROM step_itl
)
SELECT run, gap_ns, sum(n)::BIGINT AS n FROM g GROUP BY run, gap_ns ORDER BY run, gap_ns;
