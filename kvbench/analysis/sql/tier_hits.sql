-- tier_hits: per request and KV tier, sum(cached_tokens) of its events carrying both a tier and cached_tokens (the
-- simulator reports each tier's share of a prefix hit that way; FINISH and the KV transfer events are left out):
-- what cache_tiers.sql reads instead of scanning the whole log again.
CREATE OR REPLACE TEMP TABLE tier_hits AS
SELECT run, req_id, tier, sum(cached_tokens)::BIGINT AS cached_tokens
FROM events
WHERE tier IS NOT NULL AND cached_tokens IS NOT NULL AND kind NOT IN ('FINISH', 'KV_XFER_START', 'KV_XFER_END')
GROUP BY run, req_id, tier;
