"""`queues` and `explain` at a past moment from a partial state (only the workloads the answer reads) give the same
JSON, byte for byte, as from the whole state; and they fall back to the whole state when they must.

Real: the simulator's driver writing snapshots as the daemon does, the SQLite event log, the fold, `queues_at`,
`explain`. Faked: the cluster (virtual clock); scenarios drawn by hypothesis (the reproduce property's strategy, plus
queue objects observed again mid-run, which must make the partial path step aside).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain import events as ev
from daemon.domain.model import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from daemon.domain.state import STATE_VERSION, State, StateSnapshot
from daemon.eventlog import EventStore, LogReader, codec, replay
from daemon.eventlog.replay import UnreadSnapshot, compress_snapshot, save_snapshot
from daemon.query import explain as explain_mod
from daemon.query.listing import queues_at, queues_json
from daemon.query.moment import Clock, Moment, PartialState, clock_of, partial_state_at, resolve, state_at
from daemon.sim import run as sim_run
from daemon.sim.scenario import Scenario, SimJob
from daemon.stages import recorder as stages_recorder
from tests.integration.test_reproduce_property import scenarios


def _queues_both(reader: LogReader, clock: Clock, m: Moment) -> tuple[bytes, bytes, bool]:
    """queues' JSON via `queues_at` (partial when it can) and via the whole state, and whether it was partial."""
    state, counts = queues_at(reader, m.seq)
    fast = codec.encode_json(queues_json(state, clock, m, counts))
    whole = codec.encode_json(queues_json(state_at(reader, m.seq), clock, m))
    return fast, whole, counts is not None


def _explain_both(reader: LogReader, clock: Clock, key: str, m: Moment) -> tuple[bytes, bytes, bool]:
    """explain's JSON as `explain` gives it (partial when it can) and from the whole state, and whether it was
    partial (its state was a partial one)."""
    built: list[PartialState] = []

    def spy(*args: Any, **kwargs: Any) -> PartialState:
        built.append(partial_state_at(*args, **kwargs))
        return built[-1]

    def whole_state(r: LogReader, seq: int, **_: Any) -> PartialState:
        return PartialState(state_at(r, seq))

    with (
        mock.patch.object(explain_mod, "partial_state_at", side_effect=spy),
        mock.patch.object(explain_mod, "state_at", wraps=state_at) as fell_back,
    ):
        fast = codec.encode_json(explain_mod.to_json(explain_mod.explain(reader, clock, key, m), clock))
    with mock.patch.object(explain_mod, "partial_state_at", side_effect=whole_state):
        whole = codec.encode_json(explain_mod.to_json(explain_mod.explain(reader, clock, key, m), clock))
    assert len(built) == 1
    return fast, whole, built[0].partial and not fell_back.called


@st.composite
def scenarios_with_late_config(draw: st.DrawFn) -> Scenario:
    """The reproduce property's scenarios, some with queue objects observed again (changed or not) mid-run."""
    scenario = draw(scenarios())
    late: list[tuple[int, ev.Event]] = []
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(1, 40)) * 1000
        which = draw(st.sampled_from(["lq", "cq", "pc"]))
        if which == "lq":
            team, target = draw(st.sampled_from(["team-a", "team-b"])), draw(st.sampled_from(["team-a", "team-b"]))
            event: ev.Event = ev.LocalQueueObserved(
                local_queue=LocalQueue(namespace=team, name="main", cluster_queue=target)
            )
        elif which == "cq":
            cqs = [e for e in scenario.config if isinstance(e, ev.ClusterQueueObserved)]
            event = draw(st.sampled_from(cqs))
        else:
            event = ev.PriorityClassObserved(priority_class=PriorityClass(name="mid", value=50))
        late.append((at, event))
    late.sort(key=lambda t: t[0])
    return dataclasses.replace(scenario, timed_config=tuple(late))


def _simulate(scenario: Scenario, db: Path, every: int) -> None:
    with (
        mock.patch.object(sim_run, "SNAPSHOT_EVERY", every),
        mock.patch.object(stages_recorder, "_CATCH_UP_EVERY", 1),
    ):
        asyncio.run(sim_run.run_simulation(scenario, db_path=db, until=600_000))


def _jobs(reader: LogReader) -> list[str]:
    return sorted({e.subject.removeprefix("job/") for e in reader.iter_events() if e.subject.startswith("job/")})


def test_partial_answers_equal_the_whole_states_at_random_moments() -> None:
    taken: Counter[str] = Counter()

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenario=scenarios_with_late_config(), every=st.integers(2, 12), data=st.data())
    def check(scenario: Scenario, every: int, data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "sim.db"
            _simulate(scenario, db, every)
            with LogReader(db) as reader:
                clock = clock_of(reader)
                jobs = _jobs(reader)
                seqs = data.draw(
                    st.lists(st.integers(clock.first_seq, clock.last_seq), min_size=1, max_size=10, unique=True)
                )
                for seq in seqs:
                    m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
                    fast, whole, partial = _queues_both(reader, clock, m)
                    assert fast == whole, seq
                    taken["queues"] += 1
                    taken["queues partial"] += partial
                    for key in data.draw(st.lists(st.sampled_from(jobs), min_size=1, max_size=3, unique=True)):
                        if not reader.events_of(f"job/{key}", seq):
                            continue
                        fast, whole, partial = _explain_both(reader, clock, key, m)
                        assert fast == whole, (seq, key)
                        status = json.loads(whole)["status"]
                        taken["explain"] += 1
                        taken["explain partial"] += partial
                        taken[f"explain {status}"] += 1

    check()
    # The partial path must carry a good share of the cases, or the equality above proves little.
    assert taken["queues partial"] >= 0.4 * taken["queues"], taken
    assert taken["explain partial"] >= 0.4 * taken["explain"], taken
    # And it must fall back sometimes too (before the first snapshot, configuration in the tail).
    assert taken["queues partial"] < taken["queues"], taken


# --- the fallbacks, and a preemption in the tail ---------------------------------------------------------------

GPU = "nvidia.com/gpu"


def _preempting_scenario() -> Scenario:
    """One ClusterQueue of 4 GPUs: a low job takes them all, a high one preempts it; more low ones wait."""
    config: list[ev.Event] = [
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="h100")),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="low", value=10)),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=100)),
        ev.ClusterQueueObserved(
            cluster_queue=ClusterQueue(
                name="cq",
                namespace_selector=LabelSelector(),
                resource_groups=(
                    ResourceGroup(
                        covered_resources=(GPU,),
                        flavors=(FlavorQuotas(name="h100", resources=(ResourceQuota(name=GPU, nominal=4000),)),),
                    ),
                ),
                preemption=Preemption(within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY),
            )
        ),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="main", cluster_queue="cq")),
    ]

    def job(i: int, at: int, prio: str, gpus: int) -> SimJob:
        wl = Workload(
            namespace="ns",
            name=f"job-{i}",
            uid=f"u{i}",
            created_at=at,
            queue_name="main",
            priority_class=prio,
            pod_sets=(PodSet(name="main", count=1, requests={GPU: gpus * 1000}),),
        )
        return SimJob(workload=wl, submit_at=at, runtime=None)

    jobs = [job(0, 0, "low", 4), *(job(i, 1000 + i, "low", 2) for i in range(1, 5)), job(9, 5000, "high", 4)]
    return Scenario(source="test", config=tuple(config), jobs=tuple(jobs))


def _events(db: Path) -> list[ev.Event]:
    with LogReader(db) as reader:
        return [codec.decode(e.type, e.version, e.payload, seq=e.seq) for e in reader.iter_events()]


async def _copy_with_snapshot(events: list[ev.Event], db: Path, at: int, *, indexed: bool = True) -> None:
    """A log of `events` with one snapshot after event `at` (with or without its index, as a build before it)."""
    async with await EventStore.open(db) as store:
        await store.append(events[:at])
        with LogReader(db) as reader:
            state = replay(reader)
        if indexed:
            await save_snapshot(store, state)
        else:
            body = compress_snapshot(codec.encode_json(state.to_snapshot()))
            await store.write_snapshot(at, STATE_VERSION, body)
        await store.append(events[at:])


@pytest.fixture(scope="module")
def preempted() -> Iterator[tuple[list[ev.Event], int]]:
    """The preempting scenario's events (no snapshots) and the seq of its preemption."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "sim.db"
        _simulate(_preempting_scenario(), db, 10**9)
        events = _events(db)
    seq = next(i + 1 for i, e in enumerate(events) if isinstance(e, ev.WorkloadPreempted))
    yield events, seq


def _same_answers(db: Path, seq: int) -> dict[str, Any]:
    """Check queues and explain of every job at `seq` against the whole state; say which were partial."""
    out: dict[str, Any] = {}
    with LogReader(db) as reader:
        clock = clock_of(reader)
        m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
        fast, whole, out["queues"] = _queues_both(reader, clock, m)
        assert fast == whole
        for key in _jobs(reader):
            if reader.events_of(f"job/{key}", seq):
                fast, whole, out[key] = _explain_both(reader, clock, key, m)
                assert fast == whole, key
    return out


def test_a_preemption_in_the_tail_needs_no_record_but_its_victims(
    preempted: tuple[list[ev.Event], int], tmp_path: Path
) -> None:
    events, seq = preempted
    event = events[seq - 1]
    assert isinstance(event, ev.WorkloadPreempted) and event.preemptor == "ns/job-9"
    db = tmp_path / "log.db"
    asyncio.run(_copy_with_snapshot(events, db, seq - 1))  # the tail is the preemption alone
    with LogReader(db) as reader:
        partial = partial_state_at(reader, seq)
        assert partial.partial
        # The preemptor waits, untouched by the tail: not loaded, yet counted.
        assert "ns/job-9" not in partial.state.workloads
        assert partial.state.workloads["ns/job-0"].evicting
        assert partial.pending_counts == {"cq": 5}
    answers = _same_answers(db, seq)
    assert all(answers.values()), answers  # every answer here came from the partial state


def test_a_configuration_event_in_the_tail_takes_the_whole_state(
    preempted: tuple[list[ev.Event], int], tmp_path: Path
) -> None:
    events, seq = preempted
    moved = ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="main", cluster_queue="nowhere"))
    db = tmp_path / "log.db"
    asyncio.run(_copy_with_snapshot([*events[:seq], moved, *events[seq:]], db, seq))
    with LogReader(db) as reader:
        assert partial_state_at(reader, seq).partial
        assert not partial_state_at(reader, seq + 1).partial
    answers = _same_answers(db, seq + 1)
    assert not any(answers.values()), answers
    assert _same_answers(db, seq)["queues"]


def test_a_snapshot_written_before_the_index_takes_the_whole_state(
    preempted: tuple[list[ev.Event], int], tmp_path: Path
) -> None:
    events, seq = preempted
    db = tmp_path / "log.db"
    asyncio.run(_copy_with_snapshot(events, db, seq - 1, indexed=False))
    with LogReader(db) as reader:
        assert reader.snapshot_at_or_before(STATE_VERSION, seq) is not None  # read as before by the whole path
        assert not partial_state_at(reader, seq).partial
    answers = _same_answers(db, seq)
    assert not any(answers.values()), answers


def test_a_snapshot_body_holds_its_index_and_decodes_as_before(preempted: tuple[list[ev.Event], int]) -> None:
    events, seq = preempted
    state = replay_of(events[:seq])
    snap = state.to_snapshot(index=True)
    assert snap.index is not None
    assert snap.index.keys == tuple(r.workload.key for r in snap.workloads)
    assert [snap.workloads[i].workload.key for i in snap.index.admitted] == ["ns/job-0"]
    assert dict(snap.index.pending) == {"cq": tuple(range(1, 6))}  # job-1..4 and job-9, in key order
    # The whole state ignores it: the same state as without.
    assert dataclasses.replace(snap, index=None) == state.to_snapshot()


def test_the_unread_snapshot_mirrors_the_snapshot_shape() -> None:
    mirror = [(f.name, f.default) for f in dataclasses.fields(UnreadSnapshot)]
    assert mirror == [(f.name, f.default) for f in dataclasses.fields(StateSnapshot)]


def replay_of(events: list[ev.Event]) -> State:
    state = State()
    for i, e in enumerate(events, 1):
        state.apply(e, i)
    return state
