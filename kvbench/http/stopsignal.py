"""SIGTERM inside the HTTP target's event loop: it cancels the run's main task, the same path as Ctrl-C.

A Python-level handler that raises KeyboardInterrupt would fire inside whatever callback the loop is running, and
uvloop logs an exception from a protocol callback and carries on, so the run would go on to its end; a loop-level
handler runs between callbacks instead. SIGINT needs nothing here: asyncio.Runner cancels the main task on it,
unless the shell started us with SIGINT ignored (a background job), which is respected.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def cancel_on_sigterm(loop: asyncio.AbstractEventLoop, task: asyncio.Task | None) -> Iterator[None]:
    if task is None or threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    previous = signal.getsignal(signal.SIGTERM)
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
