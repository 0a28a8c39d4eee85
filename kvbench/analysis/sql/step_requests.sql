-- step_requests: the requests of simulator runs that decode on an instance with steps: from DECODE_START (else
-- FIRST_TOKEN) on that event's instance to LAST_TOKEN; finished = the request's terminal event is FINISH.
SELECT i.inst, r.req_id, coalesce(r.decode_start_ns, r.first_ns) AS s_ns, r.last_ns AS e_ns,
       coalesce(r.status = 'FINISH', false) AS finished
FROM request_events r JOIN step_instances i
     ON r.run = i.run AND coalesce(r.decode_instance, r.first_instance) = i.instance
WHERE r.last_ns > coalesce(r.decode_start_ns, r.first_ns);
