-- input_len: achieved vs intended prompt length per run, over finished requests that have both per_request's
-- prompt_tokens (the server's usage.prompt_tokens, from the FINISH detail) and input_tokens (the intended length).
--   count = such requests (0 when the target reports none: simulated and fixed runs)
--   ratio = sum(prompt_tokens) / sum(input_tokens)            (token-weighted: 1.02 = prompts 2 % longer than asked)
--   delta = prompt_tokens - input_tokens per request (tokens): p50 by quantile_cont (linear interpolation, as
--           latency.sql), min and max (the worst short and long prompt). A constant delta is a chat template or
--           BOS the tokenizer adds; a ratio away from 1 with a small delta is a tokenizer mismatch.
WITH paired AS (
    SELECT run, prompt_tokens, input_tokens, prompt_tokens - input_tokens AS delta FROM per_request
    WHERE status = 'FINISH' AND prompt_tokens IS NOT NULL AND input_tokens IS NOT NULL
)
SELECT run, count(*) AS count, sum(prompt_tokens) / nullif(sum(input_tokens), 0) AS ratio,
       quantile_cont(delta, 0.5) AS delta_p50, min(delta) AS delta_min, max(delta) AS delta_max
FROM paired GROUP BY run ORDER BY run;
