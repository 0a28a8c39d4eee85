-- kv_transfers: one row per KV transfer, pairing a request's i-th KV_XFER_START with its i-th KV_XFER_END.
--   duration_ns = end - wire start;  nbytes = END's nbytes, else START's;  tier = START's tier (link or KV tier)
--   wire start  = START's t_ns, or for the simulator's layer-wise P->D streaming the `layerwise_from_ns=` in its
--                 detail: that START marks only the exposed tail after the prefill, the wire began during it
--   in_ttft_ns  = part of the START..END interval inside the request's [arrival, FIRST_TOKEN] window (0 if none):
--                 the transfer time TTFT pays (for layer-wise streaming only the exposed tail)
-- A START without an END (run killed mid-transfer) has NULL end_ns and duration_ns.
-- Rows come unordered (sorting a million transfers costs a summary a second); kv_transfers() orders them.
WITH x AS (
    SELECT run, req_id, kind, t_ns, tier, nbytes, instance,
           coalesce(TRY_CAST(nullif(regexp_extract(detail, 'layerwise_from_ns=([0-9]+)', 1), '') AS BIGINT), t_ns)
               AS wire_ns,
           row_number() OVER (PARTITION BY run, req_id, kind ORDER BY t_ns) AS i
    FROM events WHERE kind IN ('KV_XFER_START', 'KV_XFER_END')
)
SELECT s.run, s.req_id, s.instance, s.tier, coalesce(e.nbytes, s.nbytes) AS nbytes, s.wire_ns AS start_ns,
       e.t_ns AS end_ns, e.t_ns - s.wire_ns AS duration_ns,
       greatest(0, least(e.t_ns, p.first_ns) - greatest(s.t_ns, p.arrival_ns)) AS in_ttft_ns
FROM x s LEFT JOIN x e ON e.run = s.run AND e.req_id = s.req_id AND e.i = s.i AND e.kind = 'KV_XFER_END'
LEFT JOIN per_request p ON p.run = s.run AND p.req_id = s.req_id
WHERE s.kind = 'KV_XFER_START';
