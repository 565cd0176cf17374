"""The fast paths that load a snapshot's pending workloads: `shape_of` and `coarse` written out for the common case,
`queue_ordered` and `keyed_members` (a SortedKeyList filled from, and read as, presorted keys), `new_pending_workload`
(a PendingWorkload without the frozen dataclass's __init__), the shape interning in `PendingIndex.build_keyed`, and
the pending indexes that `State.from_snapshot` leaves to be built when first read.

Real: the view module, the fold, the snapshot codec and sortedcontainers. Each fast path is compared with its plain
definition, written here; the indexes built on demand with those the fold keeps event by event from the start.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedKeyList

from daemon.domain import events as ev
from daemon.domain.model import (
    ClusterQueue,
    LabelSelector,
    LocalQueue,
    PendingReason,
    PendingReasonKind,
    PodSet,
    Shortage,
    Toleration,
    Workload,
)
from daemon.domain.state import STATE_VERSION, State
from daemon.domain.view import (
    PendingIndex,
    PendingWorkload,
    coarse,
    keyed_members,
    new_pending_workload,
    plain_shape_of,
    queue_key,
    queue_ordered,
    shape_of,
)
from daemon.eventlog import EventStore, LogReader, replay, save_snapshot
from daemon.eventlog.replay import decode_snapshot, encode_snapshot
from tests.samples import workload
from tests.unit.test_fold import _config_events, _job_events, _reason_events, _shaped_job_events


def _plain_coarse(reason: PendingReason) -> tuple[object, ...]:
    return (reason.kind, reason.blocked_by, tuple((s.flavor, s.resource, s.requested) for s in reason.shortages))


_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "zone", "a", "b"])
_pod_sets = st.builds(
    PodSet,
    name=st.sampled_from(["main", "worker", "launcher"]),
    count=st.integers(1, 4),
    requests=st.dictionaries(_names, st.integers(0, 8000), max_size=4),
    node_selector=st.dictionaries(_names, st.sampled_from(["x", "y"]), max_size=3),
    tolerations=st.lists(st.builds(Toleration, key=_names), max_size=2).map(tuple),
    min_count=st.none() | st.integers(1, 2),
)


def _wl(name: str, pod_sets: tuple[PodSet, ...], created_at: int = 0) -> Workload:
    return Workload(namespace="ns", name=name, uid=name, created_at=created_at, queue_name="q", pod_sets=pod_sets)


def _pending(wl: Workload, priority: int = 0, reason: PendingReason | None = None) -> PendingWorkload:
    return PendingWorkload(
        workload=wl, priority=priority, local_queue="ns/q", queue_order_at=wl.created_at, last_reason=reason
    )


@settings(max_examples=300, deadline=None)
@given(pod_sets=st.lists(_pod_sets, min_size=1, max_size=3).map(tuple))
def test_shape_of_equals_its_plain_definition(pod_sets: tuple[PodSet, ...]) -> None:
    wl = _wl("a", pod_sets)
    assert shape_of(wl) == plain_shape_of(wl)
    # the same mappings built in the reverse order give the same shape
    reversed_sets = tuple(
        dataclasses.replace(
            ps,
            requests=dict(reversed(list(ps.requests.items()))),
            node_selector=dict(reversed(list(ps.node_selector.items()))),
        )
        for ps in pod_sets
    )
    assert shape_of(_wl("b", reversed_sets)) == shape_of(wl)


@settings(max_examples=100, deadline=None)
@given(
    shortages=st.lists(
        st.builds(Shortage, flavor=_names, resource=_names, requested=st.integers(0, 9), available=st.integers(0, 9)),
        max_size=3,
    ).map(tuple),
    blocked_by=st.none() | st.just("ns/x"),
)
def test_coarse_equals_its_plain_definition(shortages: tuple[Shortage, ...], blocked_by: str | None) -> None:
    reason = PendingReason(
        kind=PendingReasonKind.WAITING_FOR_QUOTA, message="m", shortages=shortages, blocked_by=blocked_by
    )
    assert coarse(reason) == _plain_coarse(reason)


def test_equal_requests_with_different_node_selectors_or_tolerations_are_different_shapes() -> None:
    """Interned shapes must never merge workloads that differ in anything flavor assignment reads."""
    base = PodSet(name="main", count=1, requests={"cpu": 1000})
    variants = [
        base,
        dataclasses.replace(base, node_selector={"zone": "a"}),
        dataclasses.replace(base, node_selector={"zone": "b"}),
        dataclasses.replace(base, tolerations=(Toleration(key="gpu", operator="Exists"),)),
        dataclasses.replace(base, min_count=1),
        dataclasses.replace(base, count=2),
        dataclasses.replace(base, name="worker"),
    ]
    members = [_pending(_wl(f"w{i}-{j}", (ps,), created_at=j)) for i, ps in enumerate(variants) for j in range(2)]
    index = PendingIndex.build(members)
    assert len(index.groups) == len(variants)
    for pw in members:
        assert index.shape(pw) == plain_shape_of(pw.workload)
    # equal shapes are one group: each group holds exactly the two workloads of one variant
    for group, runs in index.groups.items():
        keys = sorted(p.key for run in runs.values() for p in run)
        assert len(keys) == 2 and keys[0].split("-")[0] == keys[1].split("-")[0], (group, keys)


def test_build_refuses_a_key_given_twice() -> None:
    wl = _wl("a", (PodSet(name="main", count=1, requests={"cpu": 1}),))
    with pytest.raises(ValueError, match="ns/a is already indexed"):
        PendingIndex.build([_pending(wl), _pending(wl, priority=3)])


def _skl_state(skl: SortedKeyList) -> tuple[object, ...]:
    return (skl._lists, skl._keys, skl._maxes, skl._len, list(skl), [skl.key(v) for v in skl])


@pytest.mark.parametrize("size", [0, 1, 7, 999, 1000, 1001, 2500])
def test_queue_ordered_equals_the_ordinary_sorted_key_list_and_takes_adds_and_removes(size: int) -> None:
    """Sizes around the library's chunk size (1000), with ties in priority and time broken by key."""
    members = [
        _pending(_wl(f"j{(i * 7919) % (size or 1):05d}", (), created_at=i % 13), priority=i % 3) for i in range(size)
    ]
    fast = queue_ordered([(queue_key(p), p) for p in members])
    plain = SortedKeyList(members, key=queue_key)
    fast._check()
    assert _skl_state(fast) == _skl_state(plain)
    extra = [_pending(_wl(f"x{i}", (), created_at=i % 5), priority=i % 4) for i in range(300)]
    for pw in extra:
        fast.add(pw)
        plain.add(pw)
    for pw in members[::3] + extra[::2]:
        fast.remove(pw)
        plain.remove(pw)
    fast._check()
    assert _skl_state(fast) == _skl_state(plain)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.sampled_from([f"j{i}" for i in range(12)]), st.integers(0, 3), st.integers(0, 3)),
        max_size=40,
    ),
    initial=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(0, 3)), max_size=30),
)
def test_queue_ordered_then_random_adds_and_removes(
    initial: list[tuple[int, int, int]], ops: list[tuple[bool, str, int, int]]
) -> None:
    seen: dict[str, PendingWorkload] = {}
    for n, prio, at in initial:
        seen.setdefault(f"i{n}", _pending(_wl(f"i{n}", (), created_at=at), priority=prio))
    fast = queue_ordered([(queue_key(p), p) for p in reversed(list(seen.values()))])
    plain = SortedKeyList(seen.values(), key=queue_key)
    for add, name, prio, at in ops:
        if add and name not in seen:
            seen[name] = pw = _pending(_wl(name, (), created_at=at), priority=prio)
            fast.add(pw)
            plain.add(pw)
        elif not add and name in seen:
            pw = seen.pop(name)
            fast.remove(pw)
            plain.remove(pw)
        fast._check()
        assert _skl_state(fast) == _skl_state(plain)
        assert keyed_members(fast) == [(queue_key(p), p) for p in plain]
        assert [p.key for p in fast.irange_key(min_key=(-2, 0, ""))] == [
            p.key for p in plain.irange_key(min_key=(-2, 0, ""))
        ]


def test_new_pending_workload_equals_the_dataclass_and_stays_frozen() -> None:
    reason = PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message="m")
    wl = _wl("a", (PodSet(name="main", count=1, requests={"cpu": 1}),), created_at=5)
    fields = {
        "workload": wl,
        "priority": 3,
        "local_queue": "ns/q",
        "queue_order_at": 7,
        "last_reason": reason,
        "held": PendingReason(kind=PendingReasonKind.PRIORITY_CLASS_NOT_FOUND, message="h"),
        "evicted_at": 6,
    }
    fast = new_pending_workload(**fields)  # type: ignore[arg-type]
    plain = PendingWorkload(**fields)  # type: ignore[arg-type]
    assert type(fast) is PendingWorkload
    assert fast == plain and repr(fast) == repr(plain)
    assert {f.name: getattr(fast, f.name) for f in dataclasses.fields(PendingWorkload)} == fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.priority = 4  # type: ignore[misc]


_events = st.lists(st.one_of(_config_events(), _job_events(), _reason_events(), _shaped_job_events()), max_size=60)


def _indexes_of(state: State) -> dict[str, tuple[object, ...]]:
    view = state.view()
    assert view.pending_index is not None
    assert set(view.pending_index) == set(view.pending_by_cq) and len(view.pending_index) == len(view.pending_by_cq)
    for cq, seq in view.pending_by_cq.items():
        index = view.pending_index.get(cq)
        assert index is not None and len(index) == len(seq)
        assert all(index.shape(p) == shape_of(p.workload) for p in seq)
        assert index.canonical() == PendingIndex.build(seq).canonical()
    return {cq: index.canonical() for cq, index in view.pending_index.items()}


@settings(max_examples=300, deadline=None)
@given(events=_events, data=st.data())
def test_indexes_left_unbuilt_by_a_snapshot_load_equal_those_the_fold_keeps(
    events: list[ev.Event], data: st.DataObject
) -> None:
    """A state loaded from a snapshot folds a tail with its pending indexes not built, builds them when they are
    first read, and keeps them up to date from then on: at every point they equal the indexes of a fold from the
    first event."""
    cut = data.draw(st.integers(0, len(events)), label="snapshot after")
    read = data.draw(st.integers(cut, len(events)), label="indexes first read after")
    full = State()
    lazy = State(pending_indexes=False)  # the same from the first event: a query or the metrics fold without snapshot
    restored: State | None = None
    for i, e in enumerate(events, start=1):
        if i - 1 == cut:
            restored = decode_snapshot(encode_snapshot(full))
            assert restored._indexes is None  # left for later: what this test is about
        full.apply(e, i)
        lazy.apply(e, i)
        if i < read:
            assert lazy._indexes is None
        else:
            assert _indexes_of(lazy) == _indexes_of(full)
        if restored is not None:
            restored.apply(e, i)
            if i >= read:
                assert _indexes_of(restored) == _indexes_of(full)
    if restored is None:
        restored = decode_snapshot(encode_snapshot(full))
    assert _indexes_of(restored) == _indexes_of(full)
    assert _indexes_of(lazy) == _indexes_of(full)
    assert restored.to_snapshot() == full.to_snapshot() == lazy.to_snapshot()


async def test_replay_builds_the_pending_indexes_a_snapshot_load_left_for_later(tmp_path: Path) -> None:
    """The daemon runs the cycle on `replay`'s state: its indexes are built inside replay, with the collector
    paused, not later on the first read."""
    setup: list[ev.Event] = [
        ev.ClusterQueueObserved(cluster_queue=ClusterQueue(name="cq-a", namespace_selector=LabelSelector())),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="q1", cluster_queue="cq-a")),
        *(ev.JobObserved(workload=workload(f"j{i}", ns="ns", queue="q1", created_at=i)) for i in range(4)),
    ]
    path = tmp_path / "log.db"
    async with await EventStore.open(path) as store:
        await store.append(setup)
        with LogReader(path) as reader:
            await save_snapshot(store, replay(reader))
        await store.append([ev.JobObserved(workload=workload("late", ns="ns", queue="q1", created_at=9))])
    with LogReader(path) as reader:
        found = reader.snapshot_at_or_before(STATE_VERSION, 10**9)
        assert found is not None and found[0] == len(setup)  # replay below starts from this snapshot
        assert decode_snapshot(found[1])._indexes is None
        state = replay(reader)
        full = replay(reader, use_snapshots=False)
    assert state._indexes is not None
    assert _indexes_of(state) == _indexes_of(full) and len(state._indexes["cq-a"]) == 5
