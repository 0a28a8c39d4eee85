-- itl: the pooled inter-token gaps of successful requests, grouped by value: n gaps of gap_ns each.
-- ITL statistics are weighted over these (each gap counts once), see token_gaps.sql for where gaps come from.
SELECT g.run, g.gap_ns, sum(g.n)::BIGINT AS n
FROM token_gaps g JOIN per_request p ON g.run = p.run AND g.req_id = p.req_id
WHERE p.status = 'FINISH'
GROUP BY g.run, g.gap_ns ORDER BY g.run, g.gap_ns;
