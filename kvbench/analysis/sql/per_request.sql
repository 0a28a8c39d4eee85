-- per_request: one row per request (every request in the requests table or the event log). A SELECT: analysis/tables.py
-- makes it a temp table or writes it straight to the run's cache. per_request_base.sql computes all but tbt_ns and
-- the SLO columns.
--   arrival_ns = ARRIVE time (the intended release time), else requests.arrival_ns (requests cancelled unsent)
--   arrived    = the log holds its ARRIVE event
--   status     = FINISH | ERROR | REJECT | CANCEL, or RUNNING when the log holds no terminal event (killed run)
--   reason     = class of an ERROR/REJECT/CANCEL detail (text before the first ':')
--   interrupted_unsent = cancelled by an interruption (reason 'interrupted') before its SEND: the run was stopped
--                before this request left the client; not part of the measured load (see run_totals)
--   input_tokens = requests.input_tokens, else the ARRIVE event's tokens (a foreign or partial log without a
--                requests table still has prompt lengths, hence hit ratios and total token throughput)
--   prompt_tokens = the achieved prompt length: N of `prompt_tokens=N` in the FINISH event's detail (a real
--                endpoint's usage.prompt_tokens; detail parts are separated by "; "); NULL when the detail has none
--                (simulated and fixed runs, servers without usage) or the request did not finish. input_tokens is
--                the intended length.
--   ttft_ns    = FIRST_TOKEN - arrival_ns             (from the intended arrival: includes client lag and queueing)
--   tpot_ns    = (LAST_TOKEN - FIRST_TOKEN) / (output tokens - 1), only for >= 2 output tokens
--   e2e_ns     = LAST_TOKEN - arrival_ns
--   lag_ns     = SEND - arrival_ns                     (client lag; vLLM's client_queue_time)
--   queue_ns   = PREFILL_START - coalesce(ROUTE, SEND) (simulator only)
--   tbt_ns     = Mooncake TBT (mean of the request's longest 10 % token gaps, see tbt.sql)
--   ttft_met, tpot_met, e2el_met, tbt_met = that SLO is met: ttft_ns <= $ttft_ns, tpot_ns <= $tpot_ns,
--                e2e_ns <= $e2el_ns, tbt_ns <= $tbt_ns; NULL when its threshold is not given (a one-token
--                request has no TPOT/TBT and meets those; a missing TTFT or E2E does not meet its SLO)
--   good       = status FINISH and every given SLO met
WITH timed AS (
    SELECT b.*, t.tbt_ns FROM per_request_base b LEFT JOIN tbt t ON b.run = t.run AND b.req_id = t.req_id
),
met AS (
    SELECT *,
        CASE WHEN $ttft_ns IS NOT NULL THEN coalesce(ttft_ns <= $ttft_ns, false) END AS ttft_met,
        CASE WHEN $tpot_ns IS NOT NULL THEN coalesce(tpot_ns <= $tpot_ns, true) END AS tpot_met,
        CASE WHEN $e2el_ns IS NOT NULL THEN coalesce(e2e_ns <= $e2el_ns, false) END AS e2el_met,
        CASE WHEN $tbt_ns IS NOT NULL THEN coalesce(tbt_ns <= $tbt_ns, true) END AS tbt_met
    FROM timed
)
SELECT *,
    coalesce(status = 'CANCEL' AND reason = 'interrupted' AND send_ns IS NULL, false) AS interrupted_unsent,
    status = 'FINISH' AND coalesce(ttft_met, true) AND coalesce(tpot_met, true) AND coalesce(e2el_met, true)
    AND coalesce(tbt_met, true) AS good
FROM met;
