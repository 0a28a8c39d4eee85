"""KV transfer time over a link tier: message granularity, the alpha-beta model, layer-wise overlap, shared links.

    transfer_ns = per_request_ns + ceil(messages / outstanding) * alpha_ns + bytes / (bytes_per_s * efficiency)

The first two terms are the latency part (RTT-bound when they dominate), the last the bandwidth part.
"""

from __future__ import annotations

import enum
from typing import Any

from kvbench.sim.spec import LinkSpec, ModelSpec, link_from
from kvbench.sim.spec import link as catalog_link
from kvbench.units import NS_PER_S, amount_at_rate, ns_at_rate


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
    return latency_ns(link, messages) + wire_ns(link, nbytes)


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
    """Transfer time left after a prefill that streams KV layer by layer (only this part delays TTFT).

    Layer j's KV is ready at (j+1)*P/L and its share x = latency(ceil(messages/L)) + wire(bytes/L) is sent after
    it, one layer after another on the link; the per-request overhead is paid once when layer 0 is ready. The
    last layer lands at max(P + x, P/L + per_request + L*x), so the exposed part is
        max(x, per_request + L*x - P*(L-1)/L)
    — only the last layer's transfer when the link keeps up with the prefill (Splitwise), more when it does not.
    """
    if messages <= 0 or layers <= 0:
        return 0
    per_layer_msgs = -(-messages // layers)
    x = -(-per_layer_msgs // link.outstanding) * link.alpha_ns + wire_ns(link, nbytes // layers)
    behind = link.per_request_ns + layers * x - prefill_ns * (layers - 1) // layers
    return x if x > behind else behind


def overlapped_load_ns(load_ns: int, prefill_ns: int, layers: int) -> int:
    """How much of a prefix load of `load_ns` a prefill of `prefill_ns` hides when both go layer by layer: layer j
    computes once its KV has landed, so the prefill may start after the first layer's share and ends at
    max(load + P/L, load/L + P); the load hides min(P - P/L, load - load/L) of itself."""
    if layers <= 1 or load_ns <= 0:
        return 0
    return min(prefill_ns - prefill_ns // layers, load_ns - load_ns // layers)


class SharedLink:
    """One link shared by concurrent transfers, served FIFO on the wire.

    FIFO, not fair share: start() must return the end time at once so the engine can schedule one event per
    transfer; under fair share every new transfer would move the end of all transfers in flight. Both disciplines
    finish a busy period at the same time (the wire is work-conserving either way); FIFO finishes early transfers
    earlier and late ones later. Only the bandwidth part queues: the latency part (per-request setup, RTTs) of
    one transfer overlaps with other transfers' bytes, so the wire starts at max(t + latency, wire free).
    """

    __slots__ = ("link", "free_ns", "busy_ns", "bytes_moved", "transfers", "_alpha", "_out", "_per_req", "_ns_per_byte")

    def __init__(self, link: LinkSpec) -> None:
        self.link = link
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


# A link as a profile names it: a catalog name, or an inline table stored as sorted (key, value) items.
LinkRef = str | tuple[tuple[str, Any], ...]


class Links:
    """One SharedLink per (node, link name): concurrent transfers leaving one node queue on its NIC."""

    __slots__ = ("specs", "shared")

    def __init__(self) -> None:
        self.specs: dict[str, LinkSpec] = {}
        self.shared: dict[tuple[int, str], SharedLink] = {}

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
            sl = self.shared[key] = SharedLink(spec)
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
