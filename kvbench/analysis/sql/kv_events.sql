-- kv_events: the events of the requests whose KV transfers kv_transfers.sql pairs when request_events was merged
-- from the per-request parts: those with more than one KV_XFER_START or KV_XFER_END (the others: kv_singles.sql).
CREATE OR REPLACE TEMP VIEW kv_events AS
SELECT e.* FROM events e
SEMI JOIN (SELECT run, req_id FROM request_events WHERE kv_starts > 1 OR kv_ends > 1) m
    ON e.run = m.run AND e.req_id = m.req_id;
