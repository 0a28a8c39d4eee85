-- kv_events: the KV_XFER_START and KV_XFER_END events kv_transfers.sql pairs when request_events was merged from the
-- per-request parts: those of the requests with more than one START or END (the others: kv_singles.sql). A table:
-- kv_transfers.sql reads it twice, and each read of a view would scan every event again. The req_id IN list
-- beside the semi-join lets the scan drop most rows before it reads their other columns.
CREATE OR REPLACE TEMP TABLE kv_events AS
WITH m AS MATERIALIZED (SELECT run, req_id FROM request_events WHERE kv_starts > 1 OR kv_ends > 1)
SELECT e.* FROM events e SEMI JOIN m ON e.run = m.run AND e.req_id = m.req_id
WHERE e.kind IN ('KV_XFER_START', 'KV_XFER_END') AND e.req_id IN (SELECT req_id FROM m);
