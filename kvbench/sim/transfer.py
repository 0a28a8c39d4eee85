"""KV transfer time over a link tier: message granularity, the alpha-beta model, layer-wise overlap, shared links.

    transfer_ns = per_request_ns + ceil(messages / outstanding) * alpha_ns + bytes / (bytes_per_s * efficiency)

The first two terms are the latency part (RTT-bound when they dominate), the last the bandwidth part.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from kvbench.sim.loop import Loop
from kvbench.sim.spec import LinkSpec, ModelSpec, link_from
from kvbench.sim.spec import link as catalog_link
from kvbench.units import NS_PER_S, amount_at_rate, ns_at_rate

Done = Callable[[int, Any], None]  # called as done(t_ns, arg) when a transfer lands (a loop callback)
SHARING = ("fifo", "fair")  # how concurrent transfers share a link's wire


class Granularity(enum.Enum):
    LAYER_BLOCK = "layer-block"  # one message per (layer, KV block): paged engines moving pages as they are
    LAYER = "layer"  # one message per layer: the pages of a layer coalesced
    REQUEST = "request"  # one message for the whole request


GRANULARITIES = tuple(g.value for g in Granularity)  # the profile's transfer.granularity values


def messages_for(model: ModelSpec, tokens: int, block_tokens: int, granularity: Granularity) -> tuple[int, int]:
    """(messages, bytes per message) for moving `tokens` tokens of KV; bytes per message is the mean, rounded up.

    K and V of one (layer, block) travel as one message (they are adjacent in a paged layer-major layout)."""
    if tokens <= 0:
        return 0, 0
    messages = message_count(model, tokens, block_tokens, granularity)
    return messages, -(-tokens * model.kv_bytes_per_token() // messages)


def message_count(model: ModelSpec, tokens: int, block_tokens: int, granularity: Granularity) -> int:
    """Messages for moving `tokens` tokens of KV (messages_for without the size: the simulator's hot path)."""
    if tokens <= 0:
        return 0
    if granularity is Granularity.LAYER_BLOCK:
        return model.n_layers * -(-tokens // block_tokens)
    if granularity is Granularity.LAYER:
        return model.n_layers
    return 1


def latency_ns(link: LinkSpec, messages: int) -> int:
    """The RTT part of a transfer: per-request overhead plus one alpha per round of `outstanding` messages."""
    return link.per_request_ns + -(-messages // link.outstanding) * link.alpha_ns


def wire_ns(link: LinkSpec, nbytes: int) -> int:
    """The bandwidth part of a transfer."""
    return int(nbytes * NS_PER_S / link.effective_bytes_per_s)  # ns_at_rate, inlined: once per transfer


def transfer_ns(link: LinkSpec, nbytes: int, messages: int) -> int:
    if nbytes <= 0 and messages <= 0:
        return 0
    # latency_ns + wire_ns, written out: once per transfer and per prefix load
    latency = link.per_request_ns + -(-messages // link.outstanding) * link.alpha_ns
    return latency + int(nbytes * NS_PER_S / link.effective_bytes_per_s)


def rtt_bound(link: LinkSpec, nbytes: int, messages: int) -> bool:
    """True when the latency part of the transfer exceeds its bandwidth part."""
    return latency_ns(link, messages) > wire_ns(link, nbytes)


def crossover_bytes(link: LinkSpec, messages: int = 1) -> int:
    """Message size at which a transfer of `messages` messages spends as long on latency as on the wire.

    For one message this is (per_request + alpha) * beta_eff — the classic alpha*beta half-bandwidth size; for
    many messages it tends to alpha/outstanding * beta_eff. Messages smaller than this are RTT-bound."""
    messages = max(1, messages)
    return int(amount_at_rate(latency_ns(link, messages) / messages, link.effective_bytes_per_s))


def exposed_ns(link: LinkSpec, nbytes: int, messages: int, prefill_ns: int, layers: int) -> int:
    """Transfer time left after a prefill that streams KV layer by layer (only this part delays TTFT)."""
    return transfer_ns(link, nbytes, messages) - stream_lead_ns(link, nbytes, messages, prefill_ns, layers)


def stream_lead_ns(link: LinkSpec, nbytes: int, messages: int, prefill_ns: int, layers: int) -> int:
    """How long before the end of a prefill of `prefill_ns` a transfer streaming its KV layer by layer began, on an
    idle link: its whole time (transfer_ns) less the part exposed after the prefill (exposed_ns).

    Layer j's KV is ready at (j+1)*P/L and its share x = latency(ceil(messages/L)) + wire(bytes/L) is sent after
    it, one layer after another on the link; the per-request overhead is paid once when layer 0 is ready. The
    last layer lands at max(P + x, P/L + per_request + L*x), so the exposed part is
        max(x, per_request + L*x - P*(L-1)/L)
    — only the last layer's transfer when the link keeps up with the prefill (Splitwise), more when it does not.
    """
    if messages <= 0 or layers <= 0:
        return transfer_ns(link, nbytes, messages)  # none of it exposed (exposed_ns = 0)
    per_request, alpha, out, bps = link.per_request_ns, link.alpha_ns, link.outstanding, link.effective_bytes_per_s
    full = per_request + -(-messages // out) * alpha + int(nbytes * NS_PER_S / bps)
    per_layer_msgs = -(-messages // layers)
    x = -(-per_layer_msgs // out) * alpha + int(nbytes // layers * NS_PER_S / bps)
    behind = per_request + layers * x - prefill_ns * (layers - 1) // layers
    return full - (x if x > behind else behind)


def overlapped_load_ns(load_ns: int, prefill_ns: int, layers: int) -> int:
    """How much of a prefix load of `load_ns` a prefill of `prefill_ns` hides when both go layer by layer: layer j
    computes once its KV has landed, so the prefill may start after the first layer's share and ends at
    max(load + P/L, load/L + P); the load hides min(P - P/L, load - load/L) of itself."""
    if layers <= 1 or load_ns <= 0:
        return 0
    return min(prefill_ns - prefill_ns // layers, load_ns - load_ns // layers)


class SharedLink:
    """One link shared by concurrent transfers, served FIFO on the wire (`sharing = "fifo"`, the default).

    start() returns the end time at once, so a transfer costs one event. Both FIFO and fair share (FairLink) finish
    a busy period at the same time (the wire is work-conserving either way); FIFO finishes early transfers earlier
    and late ones later. Only the bandwidth part queues: the latency part (per-request setup, RTTs) of one
    transfer overlaps with other transfers' bytes, so the wire starts at max(t + latency, wire free).
    """

    __slots__ = (
        "link", "loop", "free_ns", "busy_ns", "bytes_moved", "transfers", "_alpha", "_out", "_per_req", "_ns_per_byte"
    )  # fmt: skip

    def __init__(self, link: LinkSpec, loop: Loop | None = None) -> None:
        self.link = link
        self.loop = loop  # where send() schedules its callbacks (start() needs none)
        self.free_ns = 0  # when the wire is next idle
        self.busy_ns = 0  # total wire-busy time (utilisation = busy_ns / elapsed)
        self.bytes_moved = 0
        self.transfers = 0
        self._alpha, self._out, self._per_req = link.alpha_ns, link.outstanding, link.per_request_ns
        self._ns_per_byte = ns_at_rate(1, link.effective_bytes_per_s)

    def start(self, t_ns: int, nbytes: int, messages: int) -> int:
        """Begin a transfer at t_ns; returns when its last byte lands."""
        ready = t_ns + self._per_req + -(-messages // self._out) * self._alpha
        wire = int(nbytes * self._ns_per_byte)
        begin = ready if ready > self.free_ns else self.free_ns
        end = begin + wire
        self.free_ns = end
        self.busy_ns += wire
        self.bytes_moved += nbytes
        self.transfers += 1
        return end

    def projected_end(self, t_ns: int, nbytes: int, messages: int) -> int:
        """When a transfer begun at t_ns would land (FIFO: exactly; nothing is started)."""
        ready = t_ns + self._per_req + -(-messages // self._out) * self._alpha
        return (ready if ready > self.free_ns else self.free_ns) + int(nbytes * self._ns_per_byte)

    def send(self, t_ns: int, nbytes: int, messages: int, done: Done | None, arg: Any = None, advance: int = 0) -> None:
        """Begin a transfer; done(t, arg) runs `advance` ns before its last byte lands (never before t_ns)."""
        end = self.start(t_ns, nbytes, messages) - advance
        if done is not None:
            assert self.loop is not None, "send() needs the link built with a loop"
            self.loop.at(end if end > t_ns else t_ns, done, arg)


class _Flow:
    """One transfer on a FairLink: its finish tag (attained service at which it is done) and its callback."""

    __slots__ = ("tag", "done", "arg", "advance", "notified", "nbytes")

    def __init__(self, nbytes: int, done: Done | None, arg: Any, advance: int) -> None:
        self.tag = 0
        self.nbytes = nbytes
        self.done, self.arg, self.advance = done, arg, advance
        self.notified = done is None


class FairLink(SharedLink):
    """A link shared by processor sharing (`sharing = "fair"`): n transfers on the wire each move at bandwidth/n.

    Time is kept as attained service V (wire ns a transfer alone would have had): V grows by elapsed/n, and a
    transfer needing w ns of wire alone is done when V reaches its tag V_join + w. A start or an end changes n and
    so every other transfer's finish time: the link keeps one pending event for the earliest finish (or callback)
    and supersedes it with a version counter, as engines do with their step ends. The latency part of a transfer
    is not shared: it enters the wire after its own per-request setup and RTTs, as on a FIFO link.
    """

    __slots__ = ("_v", "_carry", "_t", "_flows", "_version", "_tick_cb")

    def __init__(self, link: LinkSpec, loop: Loop | None = None) -> None:
        super().__init__(link, loop)
        self._v = 0  # attained service per transfer on the wire, in ns of solo wire time
        self._carry = 0  # elapsed ns not yet turned into service (integer division remainder)
        self._t = 0  # when _v was last brought up to date
        self._flows: list[_Flow] = []  # on the wire now
        self._version = 0
        self._tick_cb = self._tick

    def start(self, t_ns: int, nbytes: int, messages: int) -> int:
        raise TypeError("a fair-share link has no end time at start: use send()")

    def projected_end(self, t_ns: int, nbytes: int, messages: int) -> int:
        """When a transfer begun at t_ns would land if no other transfer started meanwhile (nothing is started).

        Under processor sharing a transfer of w wire-ns that joins flows with r_i left ends after sum(min(r_i, w)) + w;
        the flows on the wire drain (shortest first, each at 1/k of the wire) until it joins."""
        ready = t_ns + self._per_req + -(-messages // self._out) * self._alpha
        work = int(nbytes * self._ns_per_byte)
        left = sorted(f.tag - self._v for f in self._flows)
        elapsed, served, i = ready - self._t, 0, 0
        while i < len(left) and elapsed > 0:
            k = len(left) - i
            if (left[i] - served) * k > elapsed:
                served += elapsed // k
                break
            elapsed -= (left[i] - served) * k
            served, i = left[i], i + 1
        return ready + sum(min(r - served, work) for r in left[i:] if r > served) + work

    def send(self, t_ns: int, nbytes: int, messages: int, done: Done | None, arg: Any = None, advance: int = 0) -> None:
        """Begin a transfer at t_ns; done(t, arg) runs `advance` ns before its last byte lands (never before now).
        t_ns may lie in the past: a layer-wise stream that began during its prefill."""
        assert self.loop is not None, "a fair-share link is built with the loop it schedules on"
        self.bytes_moved += nbytes
        self.transfers += 1
        flow = _Flow(nbytes, done, arg, advance)
        ready = t_ns + self._per_req + -(-messages // self._out) * self._alpha
        now = self.loop.now_ns
        work = int(nbytes * self._ns_per_byte)
        if ready > now:
            self.loop.at(ready, self._enter, (flow, work))
            return
        # Begun in the past (a layer-wise stream during its prefill): what it would have sent since `ready` beside the
        # transfers on the wire now is gone already (the link keeps no history of who was on it back then).
        self._enter(now, (flow, max(0, work - (now - ready) // (len(self._flows) + 1))))

    def _enter(self, t: int, flow_work: tuple[_Flow, int]) -> None:
        flow, work = flow_work
        self._advance(t)
        self._carry = 0  # under 1 ns of service at the old share: dropped, so the carry stays below n
        flow.tag = self._v + work
        self._flows.append(flow)
        self._reschedule(t)

    def _advance(self, t: int) -> None:
        n = len(self._flows)
        if n and t > self._t:
            self.busy_ns += t - self._t
            dv, self._carry = divmod(t - self._t + self._carry, n)
            self._v += dv
        elif not n:
            self._carry = 0
        self._t = t

    def _left_ns(self) -> int:
        """Wire time left for everything on the wire (the busy period's end, from _t)."""
        return sum(f.tag - self._v for f in self._flows)

    def _when(self, flow: _Flow, n: int) -> int:
        """When `flow` next needs attention at today's rates: its callback (advance ns early) or its end."""
        end = self._t + (flow.tag - self._v) * n - self._carry
        return end if flow.notified else end - flow.advance

    def _reschedule(self, t: int) -> None:
        self._version = v = self._version + 1
        flows = self._flows
        self.free_ns = self._t + self._left_ns()
        if flows:
            n = len(flows)
            nxt = min(self._when(f, n) for f in flows)
            assert self.loop is not None
            self.loop.at(nxt if nxt > t else t, self._tick_cb, v)

    def _tick(self, t: int, version: int) -> None:
        if version != self._version:
            return  # superseded: a start or an end moved the finish times
        self._advance(t)
        n, due = len(self._flows), []
        for f in self._flows:
            if not f.notified and (f.tag <= self._v or self._when(f, n) <= t):
                f.notified = True
                due.append(f)
        flows = [f for f in self._flows if f.tag > self._v]
        if len(flows) < n:
            self._flows, self._carry = flows, 0
        self._reschedule(t)
        for f in due:
            assert f.done is not None
            f.done(t, f.arg)


class Join:
    """Calls done(t, arg) once every one of `count` transfers has called back (loads over several links)."""

    __slots__ = ("left", "done", "arg")

    def __init__(self, count: int, done: Done, arg: Any) -> None:
        self.left, self.done, self.arg = count, done, arg

    def one(self, t: int, _: Any) -> None:
        self.left -= 1
        if not self.left:
            self.done(t, self.arg)


def send_all(
    loop: Loop,
    t: int,
    sends: Sequence[tuple[SharedLink, int, int]],
    done: Done,
    arg: Any,
    hidden: Callable[[int], int] | None = None,
    placed: int = 0,
) -> None:
    """Start transfers over several links at t; done(t, arg) runs when the last one lands, less hidden(duration)
    (the part a layer-wise prefill hides; on fair-share links priced on the duration projected at the start).
    `placed`: when a transfer already started elsewhere (a read of placed pool copies, FIFO only) lands.

    All FIFO: their ends are known at once, so one event at the latest (what the simulator always did)."""
    if all(type(link) is SharedLink for link, _, _ in sends):
        end = max(t, placed)
        for link, nbytes, messages in sends:
            end = max(end, link.start(t, nbytes, messages))
        if hidden is not None:
            end -= hidden(end - t)
        loop.at(end, done, arg)
        return
    assert placed <= t, "placed pool copies are read over FIFO links only (cluster config refuses fair sharing)"
    advance = 0
    if hidden is not None:
        advance = hidden(max(link.projected_end(t, nbytes, messages) for link, nbytes, messages in sends) - t)
    join = Join(len(sends), done, arg)
    for link, nbytes, messages in sends:
        link.send(t, nbytes, messages, join.one, None, advance)


# A link as a profile names it: a catalog name, or an inline table stored as sorted (key, value) items.
LinkRef = str | tuple[tuple[str, Any], ...]


class Links:
    """One SharedLink per (node, link name): concurrent transfers leaving one node queue on its NIC.

    A link named in `fair` (by catalog name or inline table) is a FairLink wherever it is used: sharing is a
    property of the physical link, not of the transfer."""

    __slots__ = ("specs", "shared", "loop", "fair")

    def __init__(self, loop: Loop | None = None, fair: frozenset[LinkRef] = frozenset()) -> None:
        self.specs: dict[str, LinkSpec] = {}
        self.shared: dict[tuple[int, str], SharedLink] = {}
        self.loop = loop
        self.fair = fair

    def spec(self, ref: LinkRef, where: str) -> LinkSpec:
        """LinkSpec for a catalog name or an inline table (as stored in the config: a tuple of items)."""
        key = ref if isinstance(ref, str) else repr(ref)
        if key not in self.specs:
            self.specs[key] = (
                catalog_link(ref, where) if isinstance(ref, str) else link_from(dict(ref), where, "inline")
            )
        return self.specs[key]

    def on(self, node: int, ref: LinkRef, where: str = "") -> SharedLink:
        """The shared link `ref` leaving `node` (-1: the cluster pool's own link)."""
        spec = self.spec(ref, where)
        key = (node, spec.name if isinstance(ref, str) else repr(ref))
        sl = self.shared.get(key)
        if sl is None:
            sl = self.shared[key] = (FairLink if ref in self.fair else SharedLink)(spec, self.loop)
        return sl


def describe(link: LinkSpec, model: ModelSpec, tokens: int, granularity: Granularity, block_tokens: int) -> dict:
    """One row of `kvbench kv-transfer`: sizes, time, its two parts, the regime and the crossover message size."""
    messages, per_message = messages_for(model, tokens, block_tokens, granularity)
    nbytes = tokens * model.kv_bytes_per_token()
    lat, wire = latency_ns(link, messages), wire_ns(link, nbytes)
    return {
        "link": link.name,
        "messages": messages,
        "bytes_per_message": per_message,
        "kv_bytes": nbytes,
        "transfer_ns": lat + wire,
        "latency_ns": lat,
        "wire_ns": wire,
        "regime": "rtt-bound" if lat > wire else "bandwidth-bound",
        "crossover_bytes": crossover_bytes(link, messages),
        "effective_bytes_per_s": link.effective_bytes_per_s,
        "note": link.note,
    }
