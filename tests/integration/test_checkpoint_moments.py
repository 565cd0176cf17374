"""Answers at a past moment built from the in-memory timeline (`daemon.query.moment.Timeline`, kept by the web
view's series as it folds the log) equal those built from the file (the nearest stored snapshot and the tail, or a
plain fold): `queues`, each ClusterQueue's pending rows and `explain`, byte for byte, and the whole state.

Real: the simulator's driver writing the log and its snapshots as the daemon does, the SQLite event log, the fold
(`web.series.Series`), `partial_state_at`, `state_at`, `explain`. Faked: the cluster (virtual clock); scenarios drawn
by hypothesis (the partial-moments property's, queue objects observed again mid-run included), the timeline under
small memory budgets, so that it starts new spans (moments in the older span, in the newer, before both) or pauses
(a new span would not fit: the moments after its last span's end are the file's, the rows' seqs followed on), and its
sets copied whole every few changes (`BASE_EVERY_MIN`), so that moments fall on, just after and far after a copy.
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
from daemon.query import moment as moment_mod
from daemon.query.listing import pending_entries, pending_seqs, queues_json
from daemon.query.moment import Timeline, clock_of, partial_state_at, resolve, state_at
from daemon.sim.scenario import Scenario
from daemon.web.series import Series
from daemon.web.server import _explain_state
from tests.integration.test_partial_moments import _jobs, _simulate, scenarios_with_late_config


def _config_and_records(state: State) -> tuple[Any, ...]:
    s = state.to_snapshot()
    return (s.flavors, s.cluster_queues, s.cohorts, s.local_queues, s.namespaces, s.priority_classes, s.rejected,
            s.workloads, s.finished)  # fmt: skip


def test_answers_from_the_timeline_equal_the_files_at_random_moments(monkeypatch: Any) -> None:
    taken: Counter[str] = Counter()
    span_estimate = moment_mod._span_estimate

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        scenario=scenarios_with_late_config(),
        every=st.integers(2, 12),
        base_every=st.integers(1, 8),
        budget=st.sampled_from([10_000, 20_000, 40_000, 10**9]),
        estimated=st.booleans(),
        data=st.data(),
    )
    def check(
        scenario: Scenario, every: int, base_every: int, budget: int, estimated: bool, data: st.DataObject
    ) -> None:
        monkeypatch.setattr(moment_mod, "BASE_EVERY_MIN", base_every)
        # Not `estimated`: a new span is started whatever the live workloads take, so that on these small logs the
        # spans rotate (moments in the older span, in the newer, before both); else it may pause (none kept).
        monkeypatch.setattr(moment_mod, "_span_estimate", span_estimate if estimated else lambda *_: 0)
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "sim.db"
            _simulate(scenario, db, every)
            with LogReader(db) as reader:
                series = Series()
                series.timeline = timeline = Timeline(budget_bytes=budget, check_every=1)
                paused = resumed = False
                for _ in iter(lambda: series.follow(reader, limit=1), 0):
                    resumed = resumed or (paused and not timeline.paused)
                    paused = paused or timeline.paused
                assert timeline.start is not None
                taken["a later span"] += timeline.start > 1
                taken["paused"] += paused
                taken["resumed"] += resumed  # a span after a pause: the rows' seqs followed meanwhile
                clock = clock_of(reader)
                jobs = _jobs(reader)
                seqs = data.draw(
                    st.lists(st.integers(clock.first_seq, clock.last_seq), min_size=1, max_size=8, unique=True)
                )
                for seq in seqs:
                    m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
                    whole = state_at(reader, seq)
                    assert _config_and_records(state_at(reader, seq, timeline=timeline)) == _config_and_records(whole)
                    got = partial_state_at(reader, seq, timeline=timeline)
                    taken["queues"] += 1
                    taken["queues partial"] += got.partial
                    taken["from the timeline"] += timeline.covers(seq)
                    fast = codec.encode_json(queues_json(got.state, clock, m, got.pending_counts))
                    assert fast == codec.encode_json(queues_json(whole, clock, m)), seq
                    seqs_of = pending_seqs(reader, seq)
                    kept_seqs = timeline.row_seqs(seq)
                    if kept_seqs is None:
                        kept_seqs = seqs_of
                    else:
                        assert [kept_seqs(k) for k in jobs] == [seqs_of(k) for k in jobs], seq
                        taken["row seqs"] += 1
                    for cq in sorted(whole.cluster_queues):
                        one = partial_state_at(reader, seq, cluster_queues=(cq,), timeline=timeline).state
                        assert pending_entries(one, clock, cq, kept_seqs) == pending_entries(
                            whole, clock, cq, seqs_of
                        ), (seq, cq)
                        for first in (1, 3):  # the first rows alone (the web view's page of a deep queue)
                            few = partial_state_at(reader, seq, cluster_queues=(cq,), timeline=timeline, first=first)
                            assert pending_entries(few.state, clock, cq, kept_seqs, limit=first) == pending_entries(
                                whole, clock, cq, seqs_of, limit=first
                            ), (seq, cq, first)
                            fast = codec.encode_json(queues_json(few.state, clock, m, few.pending_counts))
                            assert fast == codec.encode_json(queues_json(whole, clock, m)), (seq, cq, first)
                    for key in data.draw(st.lists(st.sampled_from(jobs), min_size=1, max_size=3, unique=True)):
                        if not reader.events_of(f"job/{key}", seq):
                            continue
                        fast_x = explain_mod.explain(
                            reader, clock, key, m, state=_explain_state(reader, key, seq, timeline)
                        )
                        whole_x = explain_mod.explain(reader, clock, key, m, state=whole)
                        assert codec.encode_json(explain_mod.to_json(fast_x, clock)) == codec.encode_json(
                            explain_mod.to_json(whole_x, clock)
                        ), (seq, key)
                        taken["explain"] += 1

    check()
    assert taken["queues partial"] >= 0.4 * taken["queues"], taken
    assert taken["from the timeline"] >= 0.4 * taken["queues"], taken  # the rest: before its older span
    assert taken["explain"] > 20, taken
    assert taken["row seqs"] >= 0.4 * taken["queues"], taken
    assert taken["a later span"] > 0, taken
    assert taken["paused"] > 0, taken
