-- cache_tiers: prefix hits per KV tier = sum(cached_tokens) of events carrying both a tier and cached_tokens
-- (the simulator reports each tier's share of a hit that way; per request in tier_hits.sql), over the prompt tokens
-- of finished requests.
WITH prompt AS (SELECT run, sum(input_tokens) AS tokens FROM per_request WHERE status = 'FINISH' GROUP BY run)
SELECT e.run, e.tier, sum(e.cached_tokens)::BIGINT AS cached_tokens,
       sum(e.cached_tokens) / nullif(any_value(p.tokens), 0) AS hit_ratio
FROM tier_hits e JOIN per_request r ON e.run = r.run AND e.req_id = r.req_id AND r.status = 'FINISH'
     LEFT JOIN prompt p ON e.run = p.run
GROUP BY e.run, e.tier ORDER BY e.run, e.tier;
