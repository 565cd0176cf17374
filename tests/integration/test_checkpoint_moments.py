"""Answers at a past moment built from in-memory checkpoints (`daemon.query.moment.Checkpoints`, kept by the web
view's series as it folds the log) equal those built from the file (the nearest stored snapshot and the tail, or a
plain fold): `queues`, each ClusterQueue's pending rows and `explain`, byte for byte, and the whole state.

Real: the simulator's driver writing the log and its snapshots as the daemon does, the SQLite event log, the fold
(`web.series.Series`), `partial_state_at`, `state_at`, `explain`. Faked: the cluster (virtual clock); scenarios drawn
by hypothesis (the partial-moments property's, queue objects observed again mid-run included), checkpoints every few
events and under a small memory budget, so that moments fall on, just after and far after a checkpoint, and thinned
ones.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.query import explain as explain_mod
from daemon.query.listing import pending_entries, pending_seqs, queues_json
from daemon.query.moment import Checkpoints, clock_of, partial_state_at, resolve, state_at
from daemon.sim.scenario import Scenario
from daemon.web.series import Series
from daemon.web.server import _explain_state
from tests.integration.test_partial_moments import _jobs, _simulate, scenarios_with_late_config


def _config_and_records(state: State) -> tuple[Any, ...]:
    s = state.to_snapshot()
    return (s.flavors, s.cluster_queues, s.cohorts, s.local_queues, s.namespaces, s.priority_classes, s.rejected,
            s.workloads, s.finished)  # fmt: skip


def test_answers_from_checkpoints_equal_the_files_at_random_moments() -> None:
    taken: Counter[str] = Counter()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        scenario=scenarios_with_late_config(),
        every=st.integers(2, 12),
        kept_every=st.integers(1, 30),
        budget=st.sampled_from([2_000, 10**9]),
        data=st.data(),
    )
    def check(scenario: Scenario, every: int, kept_every: int, budget: int, data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "sim.db"
            _simulate(scenario, db, every)
            with LogReader(db) as reader:
                series = Series()
                series.checkpoints = cps = Checkpoints(every=kept_every, budget_bytes=budget)
                series.follow(reader)
                assert len(cps) > 0
                taken["thinned"] += cps.every > kept_every
                clock = clock_of(reader)
                jobs = _jobs(reader)
                seqs = data.draw(
                    st.lists(st.integers(clock.first_seq, clock.last_seq), min_size=1, max_size=8, unique=True)
                )
                for seq in seqs:
                    m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
                    whole = state_at(reader, seq)
                    assert _config_and_records(state_at(reader, seq, checkpoints=cps)) == _config_and_records(whole)
                    got = partial_state_at(reader, seq, checkpoints=cps)
                    taken["queues"] += 1
                    taken["queues partial"] += got.partial
                    taken["from a checkpoint"] += cps.at_or_before(seq) is not None
                    fast = codec.encode_json(queues_json(got.state, clock, m, got.pending_counts))
                    assert fast == codec.encode_json(queues_json(whole, clock, m)), seq
                    seqs_of = pending_seqs(reader, seq)
                    for cq in sorted(whole.cluster_queues):
                        one = partial_state_at(reader, seq, cluster_queues=(cq,), checkpoints=cps).state
                        assert pending_entries(one, clock, cq, seqs_of, limit=3) == pending_entries(
                            whole, clock, cq, seqs_of, limit=3
                        ), (seq, cq)
                    for key in data.draw(st.lists(st.sampled_from(jobs), min_size=1, max_size=3, unique=True)):
                        if not reader.events_of(f"job/{key}", seq):
                            continue
                        fast_x = explain_mod.explain(reader, clock, key, m, state=_explain_state(reader, key, seq, cps))
                        whole_x = explain_mod.explain(reader, clock, key, m, state=whole)
                        assert codec.encode_json(explain_mod.to_json(fast_x, clock)) == codec.encode_json(
                            explain_mod.to_json(whole_x, clock)
                        ), (seq, key)
                        taken["explain"] += 1

    check()
    assert taken["queues partial"] >= 0.4 * taken["queues"], taken
    assert taken["from a checkpoint"] >= 0.4 * taken["queues"], taken  # the rest: before the first one
    assert taken["explain"] > 20, taken
    assert taken["thinned"] > 0, taken


def test_the_budget_thins_the_checkpoints_and_doubles_the_interval() -> None:
    state = State()
    cps = Checkpoints(every=1, budget_bytes=3 * 512)  # room for three empty checkpoints
    for seq in range(1, 41):
        state.seq = seq
        cps.capture(state)
    assert len(cps) <= 3
    assert cps.every >= 8
    assert cps.seqs[-1] == 40  # the latest is always kept
    assert cps.nbytes <= 3 * 512
    got = cps.at_or_before(39)
    assert got is not None and got.seq <= 39 and cps.at_or_before(0) is None


def test_a_checkpoint_is_taken_after_a_run_of_configuration_events() -> None:
    """So that the tail after it has none (a configuration event in a tail needs the whole state)."""
    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.model import Namespace  # noqa: PLC0415

    state = State()
    cps = Checkpoints(every=1000)
    events: list[ev.Event] = [ev.NamespaceObserved(namespace=Namespace(name=f"ns{i}")) for i in range(3)]
    events.append(ev.ObjectWarned(kind="ClusterQueue", name="x", warnings=("w",)))
    for seq, e in enumerate(events, start=1):
        state.apply(e, seq)
        cps.observe(e, seq, state)
    assert cps.seqs == [4]
    kept = cps.at_or_before(4)
    assert kept is not None and [n.name for n in kept.namespaces] == ["ns0", "ns1", "ns2"]
