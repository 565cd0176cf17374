"""The timeline's sets over the log (`daemon.query.moment._Members`): the set at every seq, rebuilt from its last whole
copy and the changes after it, is the set a plain replay of the changes gives; and the copies are taken only once as
many changes as members have passed (what is kept grows with the changes, not with the members times the moments).
The answers built on the timeline are compared with the file's in tests/integration/test_checkpoint_moments.py and
tests/unit/test_web.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.domain.state import State
from daemon.query import moment as moment_mod
from daemon.query.moment import Timeline, _Members

KEYS = [f"ns/job-{i}" for i in range(12)]


@settings(max_examples=200, deadline=None)
@given(
    changes=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(KEYS), st.booleans()), min_size=0, max_size=120),
    base_every=st.integers(1, 6),
)
def test_the_members_at_each_seq_are_the_replayed_set(changes: list[tuple[int, str, bool]], base_every: int) -> None:
    old = moment_mod.BASE_EVERY_MIN
    moment_mod.BASE_EVERY_MIN = base_every
    try:
        members = _Members(0)
        expected: dict[int, set[str]] = {0: set()}
        now: set[str] = set()
        seq = 0
        for step, key, add in changes:
            seq += step  # several changes at one seq (a configuration event re-routes many)
            if add:
                members.add(key, seq)
                now.add(key)
            else:
                members.discard(key, seq)
                now.discard(key)
            expected[seq] = set(now)
        last: set[str] = set()
        for s in range(seq + 1):
            last = expected.get(s, last)
            assert members.at(s) == last, s
            assert members.size_at(s) == len(last), s
        assert members.now == now
    finally:
        moment_mod.BASE_EVERY_MIN = old


def test_copies_are_kept_in_proportion_to_the_changes() -> None:
    members = _Members(0)
    for i in range(10_000):
        members.add(f"k{i}", i)
    for i in range(10_000, 30_000):  # a steady queue: one in, one out
        members.add(f"k{i}", i)
        members.discard(f"k{i - 10_000}", i)
    assert len(members.now) == 10_000
    changes = 10_000 + 2 * 20_000
    assert members.cells <= 3 * changes  # each copy of n members comes after at least n changes
    assert members.at(15_000) == {f"k{i}" for i in range(5_001, 15_001)}


def test_a_timeline_covers_only_what_it_saw_and_starts_a_new_span_past_half_its_budget() -> None:
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import Namespace  # noqa: PLC0415

    state = State()
    timeline = Timeline(budget_bytes=2 * 2_000, check_every=1)
    assert timeline.start is None and not timeline.covers(1)
    for seq in range(1, 401):
        e = ev.NamespaceObserved(namespace=Namespace(name=f"ns{seq}"))
        state.apply(e, seq)
        timeline.observe(e, seq, state)
    assert timeline.seq == 400 and timeline.covers(400) and not timeline.covers(401)
    start = timeline.start
    assert start is not None and start > 1 and not timeline.covers(start - 1)  # the oldest span was forgotten
    got = timeline.whole(start)
    assert got is not None and len(got.namespaces) == start
    got = timeline.whole(400)
    assert got is not None and sorted(got.namespaces) == sorted(state.namespaces)


def test_a_timeline_pauses_while_a_new_span_would_not_fit_and_follows_the_rows_seqs_meanwhile() -> None:
    """A new span costs O(live workloads) on the fold's thread: with more live than a quarter of the budget holds,
    the timeline pauses (no span started every few events), covers nothing from there, and starts again once they
    fit, with each job's row seqs as a timeline that never paused has them."""
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import PodSet, Workload  # noqa: PLC0415

    def job(i: int) -> ev.JobObserved:
        pod_sets = (PodSet(name="main", count=1, requests={"cpu": 1000}),)
        wl = Workload(namespace="ns", name=f"j-{i}", uid=f"u{i}", created_at=i, queue_name="lq", pod_sets=pod_sets)
        return ev.JobObserved(workload=wl)

    events: list[ev.Event] = [job(i) for i in range(9)]  # nine live: more than a new span may take
    events += [job(9), ev.JobDeleted(job="ns/j-0", at=9), job(0)]  # while paused: a new job's row, one back
    events += [ev.JobDeleted(job=f"ns/j-{i}", at=10 + i) for i in range(9)]  # one left: fits again
    events += [job(2), job(10), job(11), job(9)]  # one back after its deletion, two new, one observed again
    state, reference = State(), Timeline(budget_bytes=10**9, check_every=1)
    timeline = Timeline(budget_bytes=16_000, check_every=1)
    paused_at: list[int] = []
    for seq, e in enumerate(events, start=1):
        state.apply(e, seq)
        timeline.observe(e, seq, state)
        reference.observe(e, seq, state)
        if timeline.paused:
            paused_at.append(seq)
    assert paused_at and paused_at[-1] < len(events) and not timeline.paused, paused_at
    assert all(not timeline.covers(s) for s in paused_at)
    resumed = paused_at[-1] + 1
    assert timeline.covers(resumed) and timeline.covers(len(events))
    keys = sorted({e.workload.key for e in events if isinstance(e, ev.JobObserved)})
    for seq in range(resumed, len(events) + 1):
        got, want = timeline.row_seqs(seq), reference.row_seqs(seq)
        assert got is not None and want is not None
        assert [got(k) for k in keys] == [want(k) for k in keys], seq
        assert [timeline.record_at(k, seq) for k in keys] == [reference.record_at(k, seq) for k in keys], seq


def test_the_daemon_says_when_its_timeline_pauses_and_when_it_keeps_again(tmp_path: Any, monkeypatch: Any) -> None:
    """`admitd run --ui`: a paused timeline makes the pages at later moments read the file (seconds each on a large
    log), which an operator must be able to see: one warning when it pauses, one line when it keeps again. (The
    daemon's logger is replaced by a recorder: the level another test configured must not hide the info line.)"""
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import PodSet, Workload  # noqa: PLC0415
    from daemon.kube import run as kube_run  # noqa: PLC0415

    daemon = kube_run.Daemon(kube_run.RunOptions(db=tmp_path / "a.db", ui=True))
    timeline = daemon._timeline = Timeline(budget_bytes=16_000, check_every=1)
    state = State()
    pod_sets = (PodSet(name="main", count=1, requests={"cpu": 1000}),)
    jobs: list[ev.Event] = [
        ev.JobObserved(
            workload=Workload(
                namespace="ns", name=f"j-{i}", uid=f"u{i}", created_at=i, queue_name="lq", pod_sets=pod_sets
            )
        )
        for i in range(10)
    ]
    events = [*jobs, *(ev.JobDeleted(job=f"ns/j-{i}", at=20 + i) for i in range(9))]
    lines: list[tuple[str, str]] = []

    class Recorded:
        def warning(self, event: str, **_: object) -> None:
            lines.append(("warning", event))

        def info(self, event: str, **_: object) -> None:
            lines.append(("info", event))

    monkeypatch.setattr(kube_run, "log", Recorded())
    paused, said = False, []
    for seq, e in enumerate(events, start=1):
        state.apply(e, seq)
        timeline.observe(e, seq, state)
        paused = daemon._timeline_paused(paused)
        said.append(paused)
    assert True in said and said[-1] is False, said  # it paused, then kept again
    assert [level for level, _ in lines] == ["warning", "info"], lines
    assert "pages at later moments read the file" in lines[0][1] and "kept again" in lines[1][1]


def test_a_configuration_event_after_a_hand_over_keeps_no_version_of_the_workloads_it_did_not_change() -> None:
    """The daemon's timeline follows the catch-up's state, then the live one (equal records, other objects): the
    first configuration event after that (which records every workload again) keeps no second copy of each."""
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import Namespace, PodSet, Workload  # noqa: PLC0415

    pod_sets = (PodSet(name="main", count=1, requests={"cpu": 1000}),)
    events: list[ev.Event] = [
        ev.JobObserved(
            workload=Workload(
                namespace="ns", name=f"j-{i}", uid=f"u{i}", created_at=i, queue_name="lq", pod_sets=pod_sets
            )
        )
        for i in range(50)
    ]
    catch_up, live = State(), State()
    timeline = Timeline(budget_bytes=10**9, check_every=1)
    for seq, e in enumerate(events, start=1):
        catch_up.apply(e, seq)
        live.apply(e, seq)
        timeline.observe(e, seq, catch_up)
    versions = timeline._spans[-1].versions
    assert live.workloads["ns/j-0"] == catch_up.workloads["ns/j-0"]
    assert live.workloads["ns/j-0"] is not catch_up.workloads["ns/j-0"]
    config = ev.NamespaceObserved(namespace=Namespace(name="ns"))
    live.apply(config, 51)
    timeline.observe(config, 51, live)  # handed over: the live state from here
    assert timeline._spans[-1].versions == versions
    got = timeline.whole(51)
    assert got is not None and got.workloads == live.workloads
