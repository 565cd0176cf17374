"""When will it start: the engine run forward from a state on a virtual clock, runtimes from the recorded runs. Pure.

`estimate(state, now, durations, q)` copies the state and repeats, until every pending workload has started or
nothing more can happen: an admission cycle at the current instant (the engine the daemon runs, with its config),
its decisions folded in (a preemption's victim stops at once), each admitted workload's end scheduled, the clock
moved to the next end. Arrivals are not assumed: only the workloads pending now are estimated.

Runtimes: a running workload that has run `elapsed` ends after the q-quantile of what the recorded runs of its class
that lasted longer than `elapsed` still took (`remaining`); a pending one, when admitted, after the q-quantile of
its class's runs. A Job's `activeDeadlineSeconds` bounds either (Kubernetes fails the Job then), and gives an end to
a run of which nothing else is known. A class with no recorded run borrows its ClusterQueue's; with none at all, the
workload's end is unknown: it runs forever in the forward run, and what waits for its quota gets no estimate (None).
`estimates(..., (0.5, 0.9))` runs once per quantile (a quantile that draws the very runtimes an earlier one drew
reuses its run): the p50 estimate is the start time when every run takes its class's median, the p90 when every run
takes its 90th percentile. That is not the distribution of the start time (runs are not all slow together), but
start times only grow as runtimes do, so p50 <= p90 and the two bracket the likely start. How good they are is for a
back-test to say: the daemon records its estimates (`workload.estimated`, `daemon.stages.estimate`) and `admitd
eta-report` scores them against the actual starts.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from daemon.domain import events as ev
from daemon.domain.config import EngineConfig
from daemon.domain.model import Admission, Millis, PendingReason, PendingReasonKind, Workload
from daemon.domain.state import Phase, State, WorkloadRecord

Shape = tuple[tuple[str, int, tuple[tuple[str, int], ...]], ...]
Class = tuple[str, Shape, int]  # (cluster queue, shape, priority)
Durations = Callable[[Class], Sequence[Millis]]
"""The recorded runs of a class, sorted (`daemon.views.runtimes.Runtimes.durations`)."""


def shape_of(wl: Workload) -> Shape:
    """A workload's pod sets as (name, count, requests per pod): jobs of one shape are usually one program."""
    return tuple((ps.name, ps.count, tuple(sorted(ps.requests.items()))) for ps in wl.pod_sets)


def remaining(durations: Sequence[Millis], elapsed: Millis, q: float) -> Millis | None:
    """The q-quantile (nearest rank) of how much longer a run that has lasted `elapsed` takes, from the runs that
    lasted longer than that; None when no recorded run did (nothing says when it ends)."""
    i = bisect.bisect_right(durations, elapsed)
    longer = durations[i:]
    if not longer:
        return None
    k = min(len(longer) - 1, max(0, math.ceil(q * len(longer)) - 1))
    return longer[k] - elapsed


MAX_CYCLES = 100_000  # a forward run that has not settled by then gives up on what is still pending


def _class(state: State, key: str) -> Class | None:
    rec = state.workloads.get(key)
    if rec is None or rec.admission is None:
        return None
    return (rec.admission.cluster_queue, shape_of(rec.workload), rec.priority)


def _routable(state: State, rec: WorkloadRecord) -> bool:
    """Whether a LocalQueue routes the workload to a ClusterQueue: if not, with no observation to come, it cannot
    start in the forward run."""
    lq = state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
    return lq is not None and lq.cluster_queue in state.cluster_queues


def estimate(
    state: State,
    now: Millis,
    durations: Durations,
    q: float,
    *,
    config: EngineConfig | None = None,
) -> dict[str, Millis | None]:
    """The estimated start time of every workload pending in `state` at `now`; None: not within the forward run."""
    return _forward(state, now, lambda cls, elapsed: remaining(durations(cls), elapsed, q), config)[0]


Drawn = Callable[[Class, Millis], Millis | None]
"""How much longer a run of a class that has lasted `elapsed` takes in the forward run (None: no known end)."""


def _forward(
    state: State,
    now: Millis,
    drawn: Drawn,
    config: EngineConfig | None,
    *,
    observe: Workload | None = None,
    wanted: str | None = None,
) -> tuple[dict[str, Millis | None], dict[tuple[Class, Millis], Millis | None]]:
    """The forward run, and every runtime it drew (so that another quantile that draws the same ones is known to
    give the same run without running it: the run is deterministic and reads the runtimes only through `drawn`).

    It stops once every workload that can start has (one without a ClusterQueue to route it to cannot, with no
    observation to come), and runs cycles at an instant as the admit stage does (`AdmissionEngine.follow_up`).
    `tests/unit/test_eta_fast.py` compares it with the plain loop on random states. (Not done: playing each quota
    tree on its own, or no longer playing a tree whose waiting workloads have all started. Trees are not quite
    independent in the forward run: a cycle that preempts in one tree ends the call for all, and the next instant's
    retry moves the others' admissions by a millisecond, which later ends can carry further; on bench_eta's speed
    log 5 of 9,630 p50 estimates moved by up to 0.18 s when each tree ran alone, and neither saved time there.)"""
    world = State.from_snapshot(state.to_snapshot())
    if observe is not None:
        world.apply(ev.JobObserved(workload=observe))
    from daemon.domain.admission import AdmissionEngine  # noqa: PLC0415 (the runtimes' shapes are read without it)

    engine = AdmissionEngine(config or EngineConfig())
    started: dict[str, Millis | None] = {}
    left = 0  # the workloads waiting now (or only `wanted`) that can start and have not yet
    for k, r in world.workloads.items():
        if r.phase is Phase.PENDING:
            started[k] = None
            if wanted is None or k == wanted:
                left += _routable(world, r)
    ends: list[tuple[Millis, str, int]] = []  # (time, workload, admission generation)
    generation: dict[str, int] = {}
    draws: dict[tuple[Class, Millis], Millis | None] = {}

    def schedule(key: str, at: Millis, elapsed: Millis) -> None:
        cls = _class(world, key)
        if cls is None:
            return
        probe = (cls, elapsed)
        if probe in draws:
            rest = draws[probe]
        else:
            rest = draws[probe] = drawn(cls, elapsed)
        deadline = world.workloads[key].workload.active_deadline_ms
        if deadline is not None:  # the Job is failed then, whatever its class's runs took
            rest = max(0, deadline - elapsed) if rest is None else min(rest, max(0, deadline - elapsed))
        if rest is not None:
            generation[key] = generation.get(key, 0) + 1
            heapq.heappush(ends, (at + max(1, rest), key, generation[key]))

    for key, rec in world.workloads.items():
        if rec.phase is Phase.ADMITTED and not rec.evicting and rec.admitted_at is not None:
            schedule(key, now, max(0, now - rec.admitted_at))
    t = now
    for _ in range(MAX_CYCLES):
        if left == 0:
            break
        decisions = engine.decide(world.view(), t)
        for d in decisions:
            world.apply(d)
            if isinstance(d, ev.WorkloadAdmitted):
                key = d.workload
                if key in started and started[key] is None:
                    started[key] = t
                    left -= wanted is None or key == wanted
                schedule(key, t, 0)
            elif isinstance(d, ev.WorkloadPreempted):
                generation[d.workload] = generation.get(d.workload, 0) + 1  # its scheduled end is void
                world.apply(ev.WorkloadEvicted(workload=d.workload, at=t, reason="Preempted"))
        if left == 0:
            break
        if engine.follow_up:
            continue  # the next cycle at the same instant sees what this one did
        if engine.retry_at is not None:
            t = max(t, engine.retry_at)
            continue
        while ends and ends[0][2] != generation.get(ends[0][1]):
            heapq.heappop(ends)
        if not ends:
            break
        t, key, _ = heapq.heappop(ends)
        world.apply(ev.JobFinished(job=key, at=t))
        while ends and ends[0][0] == t:  # everything ending at this instant ends before the next cycle
            _, other, gen = heapq.heappop(ends)
            if gen == generation.get(other):
                world.apply(ev.JobFinished(job=other, at=t))
    return started, draws


def estimates(
    state: State,
    now: Millis,
    durations: Durations,
    quantiles: Iterable[float] = (0.5, 0.9),
    *,
    config: EngineConfig | None = None,
) -> Mapping[float, dict[str, Millis | None]]:
    """Every pending workload's estimated start per quantile: one forward run per quantile (`_per_quantile`)."""

    def run(drawn: Drawn) -> tuple[dict[str, Millis | None], dict[tuple[Class, Millis], Millis | None]]:
        return _forward(state, now, drawn, config)

    return {q: dict(result) for q, result in _per_quantile(durations, quantiles, run).items()}


_T = TypeVar("_T")


def _per_quantile(
    durations: Durations,
    quantiles: Iterable[float],
    run: Callable[[Drawn], tuple[_T, dict[tuple[Class, Millis], Millis | None]]],
) -> dict[float, _T]:
    """`run` once per quantile, except where a quantile would draw every runtime an earlier run drew the same (a
    class whose recorded runs are all alike, or one run): that run is deterministic and reads the runtimes only
    through its draw, so it is the same, and its result is reused."""
    found: dict[float, _T] = {}
    runs: list[tuple[_T, dict[tuple[Class, Millis], Millis | None]]] = []
    for q in quantiles:

        def drawn(cls: Class, elapsed: Millis, q: float = q) -> Millis | None:
            return remaining(durations(cls), elapsed, q)

        same = [r for r, d in runs if all(drawn(c, e) == v for (c, e), v in d.items())][:1]  # a result may be None
        if not same:
            result, draws = run(drawn)
            runs.append((result, draws))
            same = [result]
        found[q] = same[0]
    return found


NEVER = (PendingReasonKind.EXCEEDS_MAX_QUOTA, PendingReasonKind.NO_MATCHING_FLAVOR)
"""Reasons that no amount of waiting changes (as `explain`'s verdict never-fits)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DryRun:
    """What would happen to a workload submitted at `now` (nothing is written anywhere)."""

    workload: str
    admitted_now: Admission | None  # admitted by the cycles at `now`
    would_preempt: tuple[str, ...]  # the victims it would preempt at `now` (for its admission now or later)
    reason: PendingReason | None  # why it would wait, after the cycles at `now`
    never: bool  # its reason is one waiting does not change
    starts: Mapping[float, Millis | None]  # per quantile; None: not within the forward run


def dry_run(
    state: State,
    now: Millis,
    durations: Durations,
    workload: Workload,
    quantiles: Iterable[float] = (0.5, 0.9),
    *,
    config: EngineConfig | None = None,
) -> DryRun:
    """`workload` observed at `now` in a copy of `state`: the cycles at `now` (what they admit or preempt for it,
    or its reason), then its estimated start per quantile."""
    world = State.from_snapshot(state.to_snapshot())
    world.apply(ev.JobObserved(workload=workload))
    key = workload.key
    from daemon.domain.admission import AdmissionEngine  # noqa: PLC0415 (the runtimes' shapes are read without it)

    engine = AdmissionEngine(config or EngineConfig())
    admitted: Admission | None = None
    victims: list[str] = []
    for _ in range(MAX_CYCLES):
        decisions = engine.decide(world.view(), now)
        for d in decisions:
            world.apply(d)
            if isinstance(d, ev.WorkloadAdmitted) and d.workload == key:
                admitted = d.admission
            elif isinstance(d, ev.WorkloadPreempted) and d.preemptor == key:
                victims.append(d.workload)
        if not any(isinstance(d, ev.WorkloadAdmitted | ev.WorkloadPreempted) for d in decisions):
            break
    rec = world.workloads.get(key)
    reason = rec.last_reason if rec is not None and admitted is None else None
    starts = _starts_of(state, now, durations, workload, quantiles, config)
    return DryRun(
        workload=key,
        admitted_now=admitted,
        would_preempt=tuple(victims),
        reason=reason,
        never=reason is not None and reason.kind in NEVER,
        starts=starts,
    )


def _starts_of(
    state: State,
    now: Millis,
    durations: Durations,
    workload: Workload,
    quantiles: Iterable[float],
    config: EngineConfig | None,
) -> dict[float, Millis | None]:
    """`workload`'s estimated start per quantile: each quantile's forward run with it observed at `now`, as
    `estimate` runs it for every workload, but only until it has started (what comes after does not change when it
    did), a quantile's run reused where it would draw the same (`_per_quantile`)."""
    key = workload.key

    def run(drawn: Drawn) -> tuple[Millis | None, dict[tuple[Class, Millis], Millis | None]]:
        found, draws = _forward(state, now, drawn, config, observe=workload, wanted=key)
        return found.get(key), draws

    return _per_quantile(durations, quantiles, run)
