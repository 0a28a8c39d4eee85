-- step_rows: the simulator's steps rows that hold steps, in (inst, t_ns) order, with the 1 % log bin of their
-- step length: bin = floor(ln((end_ns - t_ns) / n_steps) / ln(1.01)). stepgaps.py merges back-to-back rows of an
-- instance that share a bin into one segment (see token_gaps.sql).
SELECT i.inst, s.t_ns, s.end_ns, s.n_steps::BIGINT AS n_steps,
       floor(ln((s.end_ns - s.t_ns) / s.n_steps) / ln(1.01))::BIGINT AS bin
FROM steps s JOIN step_instances i ON s.run = i.run AND s.instance = i.instance
WHERE s.n_steps > 0 AND s.end_ns > s.t_ns
ORDER BY i.inst, s.t_ns;
