"""The usage windows and the ledger's pruning (daemon/views/usage.py `UsageWindows`, daemon/views/ledger.py) on a
hand-built history with known figures: a window's figures are those now less those kept at its start, minutes are
kept for the recent past and whole hours before it, nothing beyond the retention.

Real: the fold, the projections. Faked: nothing (events are built by hand, as in test_usage_accounting).
"""

from __future__ import annotations

from daemon.domain import events as ev
from daemon.views.ledger import Preemptions
from daemon.views.usage import UsageWindows, flatten, nest
from tests.unit.test_usage_accounting import GPU, HOUR, MILLI_HOUR, _Fed, _history

MINUTE = 60_000


class _Windowed(_Fed):
    """test_usage_accounting's history, fed to usage windows of 30 minutes (2 h of them, then hours, 6 h in all) and a
    ledger too."""

    def __init__(self, start: int = 0) -> None:
        super().__init__(start)
        self.windows = UsageWindows(
            self.state, start, bucket_ms=30 * MINUTE, recent_ms=2 * HOUR, coarse_ms=HOUR, retention_ms=6 * HOUR
        )
        self.ledger = Preemptions(self.state)

    def _feed(self, event: ev.Event) -> None:
        self.seq += 1
        self.windows.apply(event, self.seq)
        self.ledger.apply(event, self.seq)
        self.state.apply(event, self.seq)


def _windowed() -> _Windowed:
    w = _history(fed=_Windowed)
    assert isinstance(w, _Windowed)
    return w


def test_a_window_is_the_figures_now_less_those_kept_at_its_start() -> None:
    w = _windowed()  # x: 12 GPUs in a from 0 to 2h (4 borrowed from b); y: 8 GPUs in b from 2h to 3h
    got = w.windows.since(HOUR, 3 * HOUR)
    assert got is not None
    start, t = got
    assert start == HOUR
    assert t["used"]["clusterqueue"] == {"a": {GPU: 12 * MILLI_HOUR}, "b": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]
    assert t["pod_ms"]["namespace"] == {"a": 3 * HOUR, "b": 1 * HOUR}  # type: ignore[index]
    assert t["borrowed"] == {"a": {GPU: 4 * MILLI_HOUR}}
    assert t["lent"] == {"b": {GPU: 4 * MILLI_HOUR}}
    # The same as a Usage begun at 1h (what `admitd usage --since 1h` folds), once zeros are left out.
    again = _history(HOUR)
    assert nest(flatten(again.usage.totals(3 * HOUR))) == t
    # A start between kept moments: the one before it (every 30 minutes here), and it says so.
    got = w.windows.since(HOUR + 20 * MINUTE, 3 * HOUR)
    assert got is not None and got[0] == HOUR
    # From the origin: everything.
    got = w.windows.since(0, 3 * HOUR)
    assert got is not None
    assert got[1]["used"]["clusterqueue"] == {"a": {GPU: 24 * MILLI_HOUR}, "b": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]


def test_minutes_are_kept_for_the_recent_past_hours_before_it_nothing_past_the_retention() -> None:
    w = _windowed()
    w._feed(ev.JobFinished(job="nobody/nothing", at=10 * HOUR))  # an event ten hours in: the windows move on
    assert w.windows.oldest == 4 * HOUR  # 6 h of retention
    assert w.windows.since(3 * HOUR, 10 * HOUR) is None  # before the oldest kept moment
    old = w.windows.since(5 * HOUR + 40 * MINUTE, 10 * HOUR)
    recent = w.windows.since(8 * HOUR + 40 * MINUTE, 10 * HOUR)
    assert old is not None and old[0] == 5 * HOUR  # older than 2 h: whole hours only
    assert recent is not None and recent[0] == 8 * HOUR + 30 * MINUTE  # the last 2 h: every 30 minutes
    assert old[1]["used"] == {"clusterqueue": {}, "localqueue": {}, "namespace": {}}  # nothing held after 3h


def test_the_ledger_forgets_preemptions_before_a_moment_but_its_totals_keep_them() -> None:
    w = _windowed()
    assert [p.victim for p in w.ledger.entries] == ["a/x"]
    assert w.ledger.totals == {("a", "InCohortReclamation"): [1, 0, 0]}  # its pods never started: nothing lost
    w.ledger.prune(2 * HOUR)
    assert w.ledger.entries == [] and w.ledger._open == {}
    assert w.ledger.totals == {("a", "InCohortReclamation"): [1, 0, 0]}
