"""Keep-alive connections to one origin (kvbench/http/conn.py's Connection): opened on demand or warmed before
t0, capped or not, a stale reused one replaced once."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from kvbench.config import ConfigError
from kvbench.http.conn import Connection, Sink, StaleConnection
from kvbench.http.faults import StreamFault


class Pool:
    """Keep-alive connections to one origin; `limit` > 0 caps how many exist at once (0 = no cap)."""

    def __init__(self, url: str, limit: int, connect_timeout_s: float):
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigError(f"base_url {url!r}: expected http(s)://HOST[:PORT]/PATH")
        self.host, self.tls = u.hostname, u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[Connection] = []
        self.limit = limit
        self.sem = asyncio.Semaphore(limit) if limit else None
        self.ssl = ssl.create_default_context() if self.tls else None

    def authority(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    Connection, self.host, self.port, ssl=self.ssl, server_hostname=self.host if self.tls else None
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise StreamFault(
                "connect", f"{self.authority()}: no connection within {self.connect_timeout_s:g} s"
            ) from None
        except OSError as e:
            raise StreamFault("connect", f"{self.authority()}: {e.strerror or e}") from None
        conn.idle = self.idle
        return conn

    async def warm(self, n: int, timeout_s: float) -> int:
        """Open up to `n` connections at once (fewer under a cap), waiting at most `timeout_s`, and keep those
        opened as idle: the first requests then find a connection ready. A connection that failed or was not
        ready in time is left to the request that needs it (its SEND then records connect_ns). Returns how many
        are idle."""
        n = min(n, self.limit) if self.limit else n
        if n <= 0 or timeout_s <= 0:
            return 0
        tasks = [asyncio.ensure_future(self._connect()) for _ in range(n)]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        opened = [t.result() for t in done if not t.cancelled() and t.exception() is None]
        self.idle.extend(opened)
        return len(opened)

    def start_idle(
        self, payload: bytes, sink: Sink, failed: Callable[[Sink], None] | None = None
    ) -> tuple[Connection, asyncio.Future] | None:
        """Write the request now on an idle keep-alive connection, without waiting for the loop (the caller may
        then await `request(..., started=...)`; `failed`: see Connection.start); None when there is none to use
        (or the pool is capped)."""
        if self.sem is not None:
            return None
        conn = self._pop_idle()
        if conn is None:
            return None
        fut = asyncio.get_running_loop().create_future()
        conn.start(payload, sink, fut, failed)
        return conn, fut

    async def request(
        self, payload: bytes, sink: Sink, started: tuple[Connection, asyncio.Future] | None = None
    ) -> None:
        """Send `payload` (a complete HTTP request) and feed the response to `sink`; raises on failure.
        A stale reused connection (see StaleConnection) is replaced once, and the sink told."""
        try:
            if started is not None:
                return await self._finish(*started)
            if self.sem is None:
                return await self._request(payload, sink)
            async with self.sem:
                return await self._request(payload, sink)
        except StaleConnection as e:
            sink.on_reconnect(str(e))
        if self.sem is None:
            return await self._request(payload, sink, fresh=True)
        async with self.sem:
            return await self._request(payload, sink, fresh=True)

    def _pop_idle(self) -> Connection | None:
        while self.idle:
            c = self.idle.pop()
            if not c.closed and not c.transport.is_closing():
                return c
        return None

    async def _request(self, payload: bytes, sink: Sink, fresh: bool = False) -> None:
        conn = None if fresh else self._pop_idle()
        if conn is None:
            began = time.monotonic_ns()
            conn = await self._connect()
            sink.on_connect(time.monotonic_ns() - began)
        fut = asyncio.get_running_loop().create_future()
        conn.start(payload, sink, fut)
        await self._finish(conn, fut)

    async def _finish(self, conn: Connection, fut: asyncio.Future) -> None:
        """Wait for the response; the connection returns itself to the pool when it ends cleanly."""
        try:
            await fut
        except BaseException:
            if conn.fut is fut:  # still this request's (cancelled mid-response): the connection is unusable
                conn.abandon()
            raise

    def close(self) -> None:
        for c in self.idle:
            c.transport.close()
        self.idle.clear()
