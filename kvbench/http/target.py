"""OpenAITarget: open-loop streaming client for /v1/completions and /v1/chat/completions that measures right.

Timing rules: a request is released at t0 + at_ns (absolute, so no drift accumulates; a coarse loop timer then
a short spin for the last `SPIN_NS`), ARRIVE is stamped with the intended time, SEND just before the request
bytes are written to a (pooled) connection, and token events with the time.monotonic_ns() taken at the top of
the connection's data_received (kvbench/http/conn.py). Silences longer than read_timeout_s are found by one
watchdog task rather than a timer re-armed per chunk.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import replace
from heapq import heappop, heappush

from kvbench.config import ConfigError
from kvbench.http.bodies import RequestBodies
from kvbench.http.conn import Connection
from kvbench.http.faults import StreamFault, classify, classify_status, one_line
from kvbench.http.followup import Tried, next_step
from kvbench.http.pool import Pool
from kvbench.http.probe import prepare
from kvbench.http.profile import EndpointProfile, load_profile
from kvbench.http.scrape import preload, scrape_loop
from kvbench.http.stopsignal import cancel_on_sigterm
from kvbench.http.stream import Response, terminal
from kvbench.http.watchdog import overdue
from kvbench.records import ARRIVE, CANCEL, LAST_TOKEN, Emit, Event, Request
from kvbench.redact import redact_text, scrub, secret_values
from kvbench.target import RunContext, TargetSpec
from kvbench.units import NS_PER_MS, ns_to_s, s_to_ns

SPIN_NS = NS_PER_MS  # loop timers have ~1 ms resolution: sleep until this close, then yield-poll the loop
# Before t0 the pool opens a connection for each request due in the run's first WARM_SPAN_NS (they will be in
# flight together), at most WARM_MAX: no more, since an idle connection can hold one of a server's HTTP threads.
WARM_SPAN_NS = 100 * NS_PER_MS
WARM_MAX = 256
# While the loop runs, a young-generation collection every this many net allocations instead of 700 (see run)
LOOP_GC_THRESHOLD = 100_000


LOOP_FACTORY: Callable[[], asyncio.AbstractEventLoop]
try:  # imported with the module (before the run's t0), not when the run starts
    import uvloop

    LOOP_FACTORY = uvloop.new_event_loop
except ImportError:
    LOOP_FACTORY = asyncio.new_event_loop


def prepared_spec(spec: TargetSpec) -> TargetSpec:
    """The registration's prepare step: the spec with `model` and `word_tokens` fixed by probing now, before the
    run's t0 (so set-up time is not counted as client lag, and workers inherit one calibration)."""
    try:
        prof = prepare(load_profile(spec.params, spec.source))
    except ConfigError as e:  # it names the URL: never with its password or a configured key
        raise ConfigError(redact_text(str(e), secret_values(spec.params))) from None
    preload(prof)
    return replace(spec, params={**spec.params, "model": prof.model, "word_tokens": prof.word_tokens})


class OpenAITarget:
    def __init__(self, spec: TargetSpec, ctx: RunContext):
        prof = load_profile(spec.params, spec.source)
        self.prof: EndpointProfile = prof if prof.model and prof.word_tokens > 0 else prepare(prof)
        self.ctx = ctx
        bodies = RequestBodies(self.prof, ctx)
        self.payload = bodies.payload
        self._secrets = secret_values(
            {**spec.params, "headers": bodies.headers}
        )  # scrubbed from details (a server may echo)
        self._heap: list[tuple[int, int, Request]] = []
        self._seq = 0
        self._inflight: dict[int, Request] = {}  # released, not ended: the terminal event pops it (exactly once)
        self._open = 0  # submitted, not ended
        self._tasks: set[asyncio.Task] = set()
        # the run's emit, loop and pool exist only inside run(): None outside it (typed as set, as they are in use)
        self._emit: Emit = None  # type: ignore[assignment]
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._pool: Pool = None  # type: ignore[assignment]
        self._wake: asyncio.Future | None = None
        self._stopping = False
        self._crash: BaseException | None = None
        self._watched: dict[asyncio.Task, Response] = {}  # attempts the read-timeout watchdog looks at
        # attempts written on a kept-alive connection, no task yet: (request, payload, (connection, future))
        self._direct: dict[Response, tuple[Request, bytes, tuple[Connection, asyncio.Future]]] = {}
        self._later: list[tuple[Request, bytes, Response]] = []  # refills to write after this iteration's reads
        self._ready: tuple[int, bytes | None] | None = None  # (heap seq, payload) of the next timed release
        self._shape: tuple[bytes, bytes, int, int] | None = None  # the plain chunk shape a response last learnt

    # -- scheduling -------------------------------------------------------------------------------------------

    def submit(self, req: Request, at_ns: int) -> None:
        self._open += 1
        if self._loop is not None and not self._stopping and at_ns <= time.monotonic_ns() - self.ctx.t0_ns:
            self._start(req, at_ns, False)  # due already (closed loop, session follow-up): skip the heap
            return
        heappush(self._heap, (at_ns, self._seq, req))
        self._seq += 1
        self._poke()

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def _start(self, req: Request, at_ns: int, write_now: bool = True, payload: bytes | None = None) -> None:
        """Release a request: ARRIVE and the payload now; the write too when `write_now` (timed releases leave
        at the instant). Refills released while responses are being read are written together right after this
        loop iteration's reads: written one by one from inside data_received, each woke the server separately,
        which halved throughput against a fast server (tests/bench)."""
        self._inflight[req.req_id] = req
        t0, rid = self.ctx.t0_ns, req.req_id
        # plain 9-tuples in Event's field order on the hot path, as stream.Response does: cheaper than Event(...)
        self._emit((at_ns, rid, ARRIVE, None, req.input_tokens, None, None, None, None))  # type: ignore[arg-type]
        try:
            payload = self.payload(req) if payload is None else payload
        except Exception as e:  # a bug in building the request must not end the run
            self._terminal(
                terminal(
                    self._response(req, 0),
                    req,
                    ("internal", one_line(f"{type(e).__name__}: {e}")),
                    [],
                    time.monotonic_ns() - t0,
                )
            )
            return
        resp = self._response(req, time.monotonic_ns() - t0)
        if write_now:
            self._launch(req, payload, resp)
            return
        if not self._later:
            self._loop.call_soon(self._launch_later)
        self._later.append((req, payload, resp))

    def _launch_later(self) -> None:
        """The refills of one loop iteration, written back to back once its reads are all handled."""
        later, self._later = self._later, []
        for req, payload, resp in later:
            self._launch(req, payload, resp)

    def _launch(self, req: Request, payload: bytes, resp: Response) -> None:
        """Write now on an idle connection if there is one: a clean end is then handled inside data_received
        (_completed) and needs no task, which saves ~10 us a request, nor a callback on its future; a task takes
        over only when something went wrong (see _direct_failed). Without an idle connection a task connects,
        writes and reads."""
        started = self._pool.start_idle(payload, resp, self._direct_failed)  # type: ignore[arg-type]
        if started is None:
            return self._spawn(req, payload, resp, None)
        self._direct[resp] = (req, payload, started)

    def _spawn(self, req: Request, payload: bytes, resp: Response, started) -> None:
        task = self._loop.create_task(self._request(req, payload, resp, started))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _direct_failed(self, resp: Response) -> None:
        """A task-less attempt ended other than in success (fault, stale connection, timeout, no [DONE], an
        HTTP error): a task classifies, retries or resends it exactly as for an attempt it made itself; its
        future already holds the outcome. Called by the connection, by _completed and by the watchdog."""
        entry = self._direct.pop(resp, None)
        if entry is None or resp.ended or self._stopping:
            return  # interrupted: _cancel_rest ends it
        try:
            self._spawn(entry[0], entry[1], resp, entry[2])
        except Exception as e:  # the loop must not swallow it: stop the run
            if self._crash is None:
                self._crash = e
                self._poke()

    def _response(self, req: Request, now: int, first: bool = True, notes: list[str] | None = None) -> Response:
        return Response(
            self._emit,
            req.req_id,
            self.ctx.t0_ns,
            self.prof.api == "chat",
            self.prof.max_event_bytes,
            now,
            first,
            self._completed,
            notes,
            self.ctx.log.emit_chunk,
            self._shape,
        )

    def _completed(self, resp: Response) -> None:
        """A clean end, still inside the connection's data_received: LAST_TOKEN and FINISH are stamped with the
        arrival of the last bytes, and whatever the replayer releases on FINISH is written right away."""
        req = self._inflight.get(resp.rid)
        if req is None or not resp.complete():
            self._direct_failed(resp)  # not a success: the request's task (made now if it had none) classifies it
            return
        self._direct.pop(resp, None)
        if resp.tpl is not None:
            self._shape = resp.tpl  # the next responses try it first (see stream.Response.hint)
        try:
            resp.ended = True
            if resp.tokens:
                self._emit((resp.last_ns, resp.rid, LAST_TOKEN, None, resp.tokens, None, None, None, None))  # type: ignore[arg-type]
            self._terminal(terminal(resp, req, None, resp.notes, resp.end_ns))
        except Exception as e:  # e.g. the event log cannot write: stop the run (the loop must not see it)
            if self._crash is None:
                self._crash = e
                self._poke()

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._crash is None:
            self._crash = task.exception()  # e.g. the event log cannot write: stop the run, don't hang
            self._poke()

    async def _sleep(self, ns: int | None) -> None:
        """Sleep `ns` (None: until poked); a submit() or a request's end pokes it early."""
        fut = self._wake = self._loop.create_future()
        handle = None if ns is None else self._loop.call_later(ns / 1e9, self._poke)
        try:
            await fut
        finally:
            self._wake = None
            if handle is not None:
                handle.cancel()

    async def _dispatch(self) -> None:
        heap, t0 = self._heap, self.ctx.t0_ns
        while heap or self._open:
            if self._crash is not None:
                raise self._crash
            if not heap:
                await self._sleep(None)
                continue
            wait = heap[0][0] - (time.monotonic_ns() - t0)
            if wait > 0 and (self._ready is None or self._ready[0] != heap[0][1]):
                self._ready = self._prebuild(heap[0][1], heap[0][2])
            elif wait > SPIN_NS:
                await self._sleep(wait - SPIN_NS)
            elif wait > 0:
                await asyncio.sleep(0)
            else:
                at_ns, seq, req = heappop(heap)
                ready, self._ready = self._ready, None
                self._start(req, at_ns, payload=ready[1] if ready is not None and ready[0] == seq else None)

    def _prebuild(self, seq: int, req: Request) -> tuple[int, bytes | None]:
        """Build the next release's payload while it is not yet due (a long prompt takes ~0.7 ms), so the
        release itself only stamps and writes; a failure is left for `_start` to meet and report."""
        try:
            return seq, self.payload(req)
        except Exception:
            return seq, None

    # -- run --------------------------------------------------------------------------------------------------

    def run(self, emit: Emit) -> None:
        self._emit = emit
        if not self._heap and not self._open:
            return
        # A request leaves ~10 small objects (log rows, events) alive until the log's next flush and is freed by
        # reference counting; a collection every 700 allocations only rescans those rows (~10 % of the client's
        # CPU) and pauses reads, which delays their time stamps. Cycles (a failed task's traceback) still go.
        threshold = gc.get_threshold()
        if 0 < threshold[0] < LOOP_GC_THRESHOLD:
            gc.set_threshold(LOOP_GC_THRESHOLD, *threshold[1:])
        try:
            with asyncio.Runner(loop_factory=LOOP_FACTORY) as runner:
                runner.run(self._main())
        except (KeyboardInterrupt, asyncio.CancelledError):
            self._cancel_rest("interrupted")
            raise KeyboardInterrupt from None
        finally:
            self._loop = None  # type: ignore[assignment]
            gc.set_threshold(*threshold)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_exception)
        p = self.prof
        self._pool = Pool(p.base_url, p.max_connections, p.connect_timeout_s)
        helpers = [self._loop.create_task(self._watchdog())]
        if p.scrape_interval_s > 0 and self.ctx.worker == 0:
            helpers.append(self._loop.create_task(scrape_loop(p, self.ctx)))
        try:
            with cancel_on_sigterm(self._loop, asyncio.current_task()):
                await self._warm()
                await self._dispatch()
        except asyncio.CancelledError:
            self._stopping = True
            for _, _, (conn, _) in self._direct.values():
                conn.abandon()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            raise
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            self._pool.close()

    async def _warm(self) -> None:
        """Open the first requests' connections in the time left before t0 (the runner leaves a margin), so
        connect time is not in their TTFT; a connection opened after t0 is still recorded on its SEND."""
        due = sum(1 for at_ns, _, _ in self._heap if at_ns < WARM_SPAN_NS)
        await self._pool.warm(min(due, WARM_MAX), ns_to_s(self.ctx.t0_ns - time.monotonic_ns()))

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """Ctrl-C (or SIGTERM) raised by the signal handler inside a protocol callback such as data_received:
        uvloop reports it here and carries on, which would lose it; the dispatcher raises it instead."""
        exc = context.get("exception")
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            return loop.default_exception_handler(context)
        self._stopping = True  # no task is spawned for the attempt its connection's close just failed
        if self._crash is None:
            self._crash = exc
        self._poke()

    def _cancel_rest(self, why: str) -> None:
        """After the loop stopped: CANCEL, now, every request still open (also ones submitted while cancelling)."""
        self._stopping = True
        now = time.monotonic_ns() - self.ctx.t0_ns
        for rid in list(self._inflight):
            self._terminal(Event(now, rid, CANCEL, detail=why))
        while self._heap:  # not yet released: it never arrived (no ARRIVE), and the run ends when it was stopped
            req = heappop(self._heap)[2]
            self._inflight[req.req_id] = req
            self._terminal(Event(now, req.req_id, CANCEL, detail=why))

    def _terminal(self, ev: Event) -> None:
        if self._inflight.pop(ev.req_id, None) is None:
            return  # already ended: never a second terminal event
        clean = scrub(ev.detail, self._secrets)  # server text (an error body) may echo the key
        self._emit(ev if clean is ev.detail else ev._replace(detail=clean))
        self._open -= 1
        if not self._open:
            self._poke()

    # -- one request ------------------------------------------------------------------------------------------

    async def _request(self, req: Request, payload: bytes, resp: Response, started) -> None:
        emit, rid, t0 = self._emit, req.req_id, self.ctx.t0_ns
        url, tried = self.prof.endpoint_url, Tried(0, self.prof.retries, 0, self.prof.read_timeout_s)
        try:
            while True:
                fault = await self._attempt(payload, resp, started)
                if fault is None or resp.tokens:
                    break
                step, fault = next_step(fault, resp.status, resp.reply_headers, url, payload, tried)
                if step is None:
                    break
                tried = tried._replace(retries=tried.retries + (not step.hop), hops=tried.hops + step.hop)
                url, payload = step.url, step.payload
                if step.wait_s:
                    await asyncio.sleep(step.wait_s)
                resp, started = self._response(req, time.monotonic_ns() - t0, False, resp.notes + [step.note]), None
        except asyncio.CancelledError:
            self._terminal(Event(time.monotonic_ns() - t0, rid, CANCEL, detail="interrupted"))
            return
        if resp.ended:
            return  # FINISH was emitted when the last bytes arrived (_completed)
        if resp.tokens:
            emit(Event(resp.last_ns, rid, LAST_TOKEN, None, resp.tokens))
        self._terminal(terminal(resp, req, fault, resp.notes, time.monotonic_ns() - t0))

    async def _attempt(self, payload: bytes, resp: Response, started=None) -> tuple[str, str] | None:
        """Send once (unless `started` already did) and read the response into `resp`; None on success, else
        (class, message)."""
        task = asyncio.current_task()
        assert task is not None  # an attempt always runs in its request's task
        self._watched[task] = resp
        try:
            await self._pool.request(payload, resp, started)
        except asyncio.CancelledError:
            if resp.timed_out is None:
                raise  # an interrupt, not the watchdog
            task.uncancel()
            return None if resp.done else resp.timed_out
        except Exception as e:
            return None if resp.done else classify(e)  # after [DONE] only the connection's tail went wrong
        finally:
            self._watched.pop(task, None)
        if resp.status != 200:
            return classify_status(resp.status, resp.err_body, resp.reply_headers)
        if not resp.done and resp.finish_reason is None:
            return "protocol", f"stream ended without [DONE] after {resp.tokens} tokens"
        return None

    async def _watchdog(self) -> None:
        """Every ~1/8 of the read timeout: end attempts overdue (see watchdog.overdue): a task is cancelled, a
        task-less attempt's connection abandoned and its response failed with the fault. A wake-up later than
        due means the loop was blocked; that lateness is not held against the server (`grace`)."""
        period_ns = s_to_ns(min(max(self.prof.read_timeout_s / 8, 0.005), 1.0))
        last = time.monotonic_ns()
        while True:
            await asyncio.sleep(ns_to_s(period_ns))
            self.ctx.log.tick()  # CHUNK events reach the log without the replayer: a long lone stream still flushes
            mono = time.monotonic_ns()
            grace, last = max(0, mono - last - period_ns), mono
            now = mono - self.ctx.t0_ns
            for task, resp in list(self._watched.items()):
                if self._overdue(resp, now, grace):
                    task.cancel()
            for resp, (_, _, (conn, _)) in list(self._direct.items()):
                fut = conn.fut
                if conn.sink is resp and fut is not None and self._overdue(resp, now, grace) and resp.timed_out:
                    conn.abandon()
                    fut.set_exception(StreamFault(*resp.timed_out))
                    self._direct_failed(resp)

    def _overdue(self, resp: Response, now: int, grace: int) -> bool:
        req = self._inflight.get(resp.rid)
        return overdue(resp, now, grace, self.prof, req.output_tokens if req is not None else 1)
