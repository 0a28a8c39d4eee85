"""The rows the simulator writes, as plain tuples: event rows (Event's nine fields, in order) and steps-table rows."""

from __future__ import annotations

from collections.abc import Callable

# t_ns, req_id, kind, instance, tokens, cached_tokens, tier, nbytes, detail (kvbench.records.Event's fields): the
# event log and the replayer read them by position, and a tuple is cheaper to build than the NamedTuple.
Row = tuple[int, int, str, str | None, int | None, int | None, str | None, int | None, str | None]
EmitRow = Callable[[Row], None]

# instance, t_ns, end_ns, n_steps, batch, prefill_tokens, decode_tokens, kv_blocks_used, kv_blocks_total
# (kvbench.eventlog.STEPS)
StepRow = tuple[str, int, int, int, int, int, int, int, int]
AppendStep = Callable[[StepRow], None]
