"""The replayer: releases requests to a target on time, holds a session's next turn until the previous one ends.

It knows nothing about which target it drives. Open loop (default): each request is released at its arrival
time. Capped (`concurrency=C`): at most C requests in flight, a request due while all are taken released when a
slot frees. Closed loop (`closed=True`, C users): arrival times are ignored; C requests go at t = 0 (the opening)
and each later one `think_ns` after a request ends, as C users who each wait for their answer.
The stream is pulled lazily (at most `window` submitted but not ended), so memory follows what is in flight.
A request that would exceed the window waits for a slot: its SEND then trails its ARRIVE, and the delay shows
as client lag (only a target with more than WINDOW requests in flight at once is affected).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kvbench.eventlog import EventLog
from kvbench.records import ARRIVE, CANCEL, ERROR, FINISH, REJECT, SEND, TERMINAL, Event, Request
from kvbench.target import Target
from kvbench.workload.reuse import SeenBlocks

DUE_NS = 100_000_000  # real-time runs look at flushing and progress every 0.1 s of event time
WINDOW = 32_768  # requests submitted but not ended at most: ~1 KB each in a simulator (request, job, block ids)


@dataclass(slots=True)
class ReplayStats:
    submitted: int = 0
    finished: int = 0
    errors: int = 0
    rejected: int = 0
    cancelled: int = 0
    events: int = 0  # events logged (counted when the run ends)
    last_t_ns: int = 0  # time of the latest terminal event
    status: str = "running"
    in_flight: int = 0  # requests sent (SEND logged) and not yet ended
    send_lags_ns: list[int] = field(default_factory=list)  # real time: SEND - ARRIVE per sent request (client lag)
    opening_lags_ns: list[int] = field(default_factory=list)  # closed loop: the same for the opening requests

    @property
    def ended(self) -> int:
        return self.finished + self.errors + self.rejected + self.cancelled

    @property
    def outstanding(self) -> int:
        """Submitted to the target and not ended: sent, or scheduled for a later arrival."""
        return self.submitted - self.ended


class _Session:
    __slots__ = ("open", "queue", "last_end_ns", "failed")

    def __init__(self) -> None:
        self.open = False  # a turn of it is submitted and not yet ended
        self.queue: deque[Request] = deque()  # later turns pulled from the stream, waiting their turn
        self.last_end_ns: int | None = None
        self.failed = False


class Replayer:
    def __init__(
        self,
        target: Target,
        log: EventLog,
        concurrency: int | None = None,
        window: int = WINDOW,
        progress: Callable[[ReplayStats], None] | None = None,
        stats: ReplayStats | None = None,
        closed: bool = False,
        think_ns: int = 0,
        watch: Callable[[Event], None] | None = None,
    ):
        """`stats`: the counts to update as the run goes (a caller that keeps them has what was measured even
        if run() raises); a fresh ReplayStats by default. `closed`: closed loop of `concurrency` users with
        `think_ns` between an answer and the user's next request. `watch`: also called with every event."""
        if closed and not concurrency:
            raise ValueError("a closed loop needs a number of users (concurrency)")
        self.target, self.log = target, log
        self.concurrency, self.closed, self.think_ns, self.watch = concurrency, closed, think_ns, watch
        self._opening: set[int] | None = set() if closed else None  # closed loop: requests sent before any end
        self._sent: set[int] = set()  # requests sent and not ended
        self.window = min(window, concurrency) if concurrency else window
        self.progress = progress
        self.stats = ReplayStats() if stats is None else stats
        self._sessions: dict[int, _Session] = {}
        self._session_of: dict[int, int] = {}  # req_id -> session_id, for submitted session turns
        self._ready: deque[Request] = deque()  # released session turns waiting for a closed-loop slot
        self.seen = SeenBlocks()  # block ids of earlier requests, for trace-implied reuse
        self._unwritten: list[tuple[Request, bool]] = []  # (request, whether it is ours to log), see _write_requests
        self._stream: Iterator[Request] = iter(())
        self._exhausted = False
        self._stopping = False  # set by an interrupt: release nothing more
        self._next_progress = 0.0
        self._due_ns = DUE_NS  # real time: the next event time to check the log's flush and the progress at
        self._arrived: dict[int, int] = {}  # real time: ARRIVE time of requests not yet sent
        self._append, self._check = log.emit, log.check  # bound once: called per event / per terminal event

    def run(self, requests: Iterator[Request]) -> ReplayStats:
        self._stream = iter(requests)
        self.stats.status = "running"
        on_event: Callable[[Event], None] = self._on_event if self.log.realtime else self._on_virtual_event
        if self.watch is not None:
            on_event = self._watched(on_event, self.watch)
        try:
            self._top_up(0)  # inside: a workload that fails while it is read fails the run, it is not left running
            self.target.run(on_event)
            self.stats.status = "complete"
        except KeyboardInterrupt:
            self._stopping = True
            self.stats.status = "interrupted"
        except BaseException:
            self.stats.status = "failed"
            raise
        finally:
            self._write_requests()
            self.stats.events = self.log.events_logged()
            self._report(force=True)
        return self.stats

    @staticmethod
    def _watched(on_event: Callable[[Event], None], watch: Callable[[Event], None]) -> Callable[[Event], None]:
        def both(ev: Event) -> None:
            on_event(ev)
            watch(ev)

        return both

    def _on_event(self, ev: Event) -> None:
        """Real-time targets stamp events with the run's clock, so the event's own time says when the buffers
        may be a second old (flush) or progress is due: one comparison per event, no clock read."""
        self._append(ev)
        kind = ev[2]
        if kind in TERMINAL:
            self._arrived.pop(ev[1], None)
            self._on_terminal(ev)
        elif kind == ARRIVE:
            self._arrived[ev[1]] = ev[0]
        elif kind == SEND:  # client lag, taken here rather than by a query over the log after the run
            self._sent.add(ev[1])
            self.stats.in_flight = len(self._sent)
            at_ns = self._arrived.pop(ev[1], None)
            if at_ns is not None:
                opening = self._opening is not None and ev[1] in self._opening
                (self.stats.opening_lags_ns if opening else self.stats.send_lags_ns).append(ev[0] - at_ns)
        if ev[0] >= self._due_ns:
            self._due_ns = ev[0] + DUE_NS
            self.log.tick()
            self._report()

    def _on_virtual_event(self, ev: Event) -> None:
        """Simulated time: ~10 events a request, so only a list append and a set lookup for most of them."""
        self._append(ev)
        kind = ev[2]
        if kind in TERMINAL:
            self._check()
            self._on_terminal(ev)
        elif kind == SEND:
            self._sent.add(ev[1])

    def _on_terminal(self, ev: Event) -> None:
        # Indexes, not attribute names: hot-path targets may emit plain 9-tuples in Event's field order.
        st, kind, t_ns = self.stats, ev[2], ev[0]
        if t_ns > st.last_t_ns:
            st.last_t_ns = t_ns
        if kind == CANCEL and ev[8] == "interrupted":
            self._stopping = True
        self._count_end(kind)
        self._sent.discard(ev[1])
        st.in_flight = len(self._sent)
        sid = self._session_of.pop(ev[1], None)
        if sid is not None:
            self._end_turn(sid, kind, t_ns)
        self._top_up(t_ns)
        if st.ended & 15 == 0:
            self._report()

    def _count_end(self, kind: str) -> None:
        st = self.stats
        if kind == FINISH:
            st.finished += 1
        elif kind == ERROR:
            st.errors += 1
        elif kind == REJECT:
            st.rejected += 1
        else:
            st.cancelled += 1

    def _end_turn(self, sid: int, kind: str, t_ns: int) -> None:
        s = self._sessions[sid]
        s.open, s.last_end_ns = False, t_ns
        s.failed = s.failed or kind != FINISH
        if s.queue:
            self._release_turn(sid, s.queue.popleft(), t_ns)

    def _release_turn(self, sid: int, req: Request, now_ns: int) -> None:
        """A later turn becomes due: think time after the previous turn ended, or cancelled if a turn failed."""
        s = self._sessions[sid]
        if s.failed:
            self._cancel_unsent(req, now_ns, "session: an earlier turn did not finish")
            if s.queue:
                self._release_turn(sid, s.queue.popleft(), now_ns)
            return
        s.open = True
        assert s.last_end_ns is not None  # a session's first request seen is admitted directly
        self._ready.append(req._replace(arrival_ns=max(s.last_end_ns + req.think_ns, now_ns)))

    def _cancel_unsent(self, req: Request, now_ns: int, why: str) -> None:
        self._write_request(req._replace(arrival_ns=now_ns))
        self.stats.submitted += 1
        self.log.emit(Event(now_ns, req.req_id, CANCEL, detail=why))
        self.stats.cancelled += 1

    def _top_up(self, now_ns: int) -> None:
        """Release what the window and the sessions allow; then log the requests released (or cancelled)."""
        self._release(now_ns)
        if self._unwritten:
            self._write_requests()

    def _release(self, now_ns: int) -> None:
        while self.stats.outstanding < self.window and not self._stopping:
            if self._ready:
                self._submit(self._ready.popleft(), now_ns)
            elif not self._exhausted:
                req = next(self._stream, None)
                if req is None:
                    self._exhausted = True
                elif self._admit(req, now_ns):
                    self._submit(self._user_turn(req, now_ns) if self.closed else req, now_ns)
            else:
                return

    def _user_turn(self, req: Request, now_ns: int) -> Request:
        """Closed loop: a user's next request is due when a slot frees (its previous answer ended), after the
        think time; the opening requests (before any end) at once."""
        if not self.stats.ended:
            if self._opening is not None:
                self._opening.add(req.req_id)
            return req._replace(arrival_ns=now_ns)
        return req._replace(arrival_ns=now_ns + self.think_ns)

    def _admit(self, req: Request, now_ns: int) -> bool:
        """Route a pulled request: a session's first request seen goes now (usually turn 0; a later turn when the
        stream starts mid-session); later turns wait for their session's previous turn."""
        if req.session_id < 0:
            return True
        s = self._sessions.get(req.session_id)
        if s is None:
            s = self._sessions[req.session_id] = _Session()
        if s.last_end_ns is None and not s.open and not s.queue:
            s.open = True  # the first turn seen starts the session, also when a cut dropped the earlier ones
            return True
        if s.open or s.queue:
            s.queue.append(req)
        else:
            self._release_turn(req.session_id, req, now_ns)
        return False

    def _submit(self, req: Request, now_ns: int) -> None:
        if self.concurrency and req.arrival_ns < now_ns:
            req = req._replace(arrival_ns=now_ns)  # closed loop: intended release is when the slot freed
        if req.session_id >= 0:
            self._session_of[req.req_id] = req.session_id
        self._write_request(req)
        self.stats.submitted += 1
        self.target.submit(req, max(req.arrival_ns, now_ns))

    def _write_request(self, req: Request) -> None:
        self._unwritten.append((req, True))

    def pass_over(self, req: Request) -> None:
        """A request of the workload that this replayer does not release (another worker's shard): its prefix
        blocks still count as seen for the trace-implied reuse of later requests."""
        self._unwritten.append((req, False))

    def _write_requests(self) -> None:
        """Log the requests released since the last call, in order, each with its trace-implied reuse: tokens of
        the prompt an infinite prefix cache would hold, from blocks seen in earlier requests (None once tracking
        has stopped). One batch per top-up (the whole window at the start of a run) costs far less than one
        request at a time; the rows stay in release order."""
        batch, self._unwritten = self._unwritten, []
        hits = self.seen.observe_many([req.hash_ids for req, _ in batch], [ours for _, ours in batch])
        ours = [(req, hit) for (req, mine), hit in zip(batch, hits) if mine]
        reuse = (None if hit is None else min(hit * req.block_tokens, req.input_tokens) for req, hit in ours)
        self.log.write_requests([req for req, _ in ours], reuse)

    def _report(self, force: bool = False) -> None:
        if self.progress is None or (self._stopping and not force):  # while stopping, the final report only
            return
        now = time.monotonic()
        if force or now >= self._next_progress:
            self._next_progress = now + 0.1
            self.log.tick()
            self.progress(self.stats)
