"""The replay progress bar's live figures: TTFT and TPOT p50 from the events as they are logged."""

from __future__ import annotations

import io

from rich.console import Console

from kvbench.cli.progress import LiveLatency, describe, progress_bar
from kvbench.records import ARRIVE, FINISH, FIRST_TOKEN, LAST_TOKEN, SEND, Event
from kvbench.replayer import ReplayStats

MS = 1_000_000


def _request(live: LiveLatency, rid: int, arrive: int, first: int, last: int, tokens: int) -> None:
    for ev in (
        Event(arrive * MS, rid, ARRIVE),
        Event(arrive * MS, rid, SEND),
        Event(first * MS, rid, FIRST_TOKEN, tokens=1),
        Event(last * MS, rid, LAST_TOKEN, tokens=tokens),
        Event(last * MS, rid, FINISH, tokens=tokens),
    ):
        live.observe(ev)


def test_live_p50s_by_hand():
    live = LiveLatency()
    assert live.text() == "TTFT p50 – ms  TPOT p50 – ms"
    _request(live, 0, 0, 40, 140, 11)  # TTFT 40, TPOT (140 - 40) / 10 = 10
    _request(live, 1, 100, 160, 360, 5)  # TTFT 60, TPOT 200 / 4 = 50
    _request(live, 2, 200, 250, 250, 1)  # TTFT 50, one token: no TPOT
    assert live.text() == "TTFT p50 50 ms  TPOT p50 30.0 ms"
    assert not (live._arrive or live._first or live._last)  # ended requests leave nothing behind


def test_describe_and_the_bar_show_totals_and_eta():
    st = ReplayStats(submitted=10, finished=6, errors=1, in_flight=3, last_t_ns=2_500 * MS)
    text = describe(st, LiveLatency())
    assert text.startswith("in flight 3  failed 1  TTFT p50") and text.endswith("t=2.5s")
    out = io.StringIO()
    with progress_bar(Console(file=out, width=200, force_terminal=False)) as bar:
        task = bar.add_task("replay w → t", total=10, state=text)
        bar.update(task, completed=st.ended)
    shown = out.getvalue()
    assert "7/10" in shown and "70%" in shown and "ETA" in shown and "in flight 3" in shown
