"""The forward run's shortcuts change nothing: `daemon.domain.eta.estimates` against the plain loop (until every
pending workload started or nothing more happens, a cycle after every cycle that changed something, one run per
quantile) on random states.

Real: the fold, the admission engine. The random states: up to three Cohorts of ClusterQueues (some without a
Cohort), preemption within the queue and reclaim, running and pending workloads of a few shapes and priorities, some
Jobs with activeDeadlineSeconds, recorded runtimes per class that are sometimes all alike (so quantiles coincide)
and sometimes spread.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from daemon.domain import events as ev
from daemon.domain.admission import AdmissionEngine
from daemon.domain.config import EngineConfig
from daemon.domain.eta import Class, _class, dry_run, estimates, remaining
from daemon.domain.model import Millis
from daemon.domain.state import Phase, State
from tests.unit.builders import World, cq, flavor, job, lq, running

MIN = 60_000


CAP = 3_000


def plain(
    state: State, now: Millis, durations: Callable[[Class], Sequence[Millis]], q: float, *, cap: int = CAP
) -> dict[str, Millis | None] | None:
    """The forward run as first written (before the shortcuts): the reference. None when it has not settled within
    CAP cycles (a preemption going round in the forward run: then both give up at different points)."""
    world = State.from_snapshot(state.to_snapshot())
    engine = AdmissionEngine(EngineConfig())
    waiting = {k for k, r in world.workloads.items() if r.phase is Phase.PENDING}
    started: dict[str, Millis | None] = dict.fromkeys(waiting)
    ends: list[tuple[Millis, str, int]] = []
    generation: dict[str, int] = {}

    def schedule(key: str, at: Millis, elapsed: Millis) -> None:
        cls = _class(world, key)
        if cls is None:
            return
        rest = remaining(durations(cls), elapsed, q)
        deadline = world.workloads[key].workload.active_deadline_ms
        if deadline is not None:
            rest = max(0, deadline - elapsed) if rest is None else min(rest, max(0, deadline - elapsed))
        if rest is not None:
            generation[key] = generation.get(key, 0) + 1
            heapq.heappush(ends, (at + max(1, rest), key, generation[key]))

    for key, rec in world.workloads.items():
        if rec.phase is Phase.ADMITTED and not rec.evicting and rec.admitted_at is not None:
            schedule(key, now, max(0, now - rec.admitted_at))
    t = now
    for _ in range(cap):
        decisions = engine.decide(world.view(), t)
        for d in decisions:
            world.apply(d)
            if isinstance(d, ev.WorkloadAdmitted):
                if d.workload in waiting and started.get(d.workload) is None:
                    started[d.workload] = t
                schedule(d.workload, t, 0)
            elif isinstance(d, ev.WorkloadPreempted):
                generation[d.workload] = generation.get(d.workload, 0) + 1
                world.apply(ev.WorkloadEvicted(workload=d.workload, at=t, reason="Preempted"))
        if all(started[k] is not None for k in waiting):
            break
        if any(isinstance(d, ev.WorkloadAdmitted | ev.WorkloadPreempted) for d in decisions):
            continue
        if engine.retry_at is not None:
            t = max(t, engine.retry_at)
            continue
        while ends and ends[0][2] != generation.get(ends[0][1]):
            heapq.heappop(ends)
        if not ends:
            break
        t, key, _ = heapq.heappop(ends)
        world.apply(ev.JobFinished(job=key, at=t))
        while ends and ends[0][0] == t:
            _, other, gen = heapq.heappop(ends)
            if gen == generation.get(other):
                world.apply(ev.JobFinished(job=other, at=t))
    else:
        return None
    return started


def random_case(seed: int) -> tuple[State, Millis, Callable[[Class], list[Millis]]]:
    rng = random.Random(seed)
    w = World()
    w.add(flavor("f"))
    queues: list[str] = []
    for c in range(rng.randint(1, 3)):
        for i in range(rng.randint(1, 3)):
            name = f"c{c}q{i}"
            b = cq(name).flavor("f", cpu=rng.choice((4, 6, 8))).preempt(within="LowerPriority", reclaim="Any")
            if c > 0:  # the first group's queues have no Cohort: each is its own tree
                b = b.cohort(f"co{c}")
            w.add(b, lq("ns", name, name))
            queues.append(name)
    n = 0
    for name in queues:
        used = 0
        for _ in range(rng.randint(0, 3)):
            cpus = rng.choice((1, 2, 4))
            if used + cpus > 4:
                break
            used += cpus
            n += 1
            jb = job(f"r{n}").ns("ns").queue(name).cpus(cpus).priority(rng.choice((0, 100))).at(0)
            w.add(running(jb, name, "f", at=rng.randrange(0, 5 * MIN)))
    for _ in range(rng.randint(1, 25)):
        n += 1
        jb = job(f"p{n}").ns("ns").queue(rng.choice(queues)).cpus(rng.choice((1, 2, 4, 8))).at(5 * MIN + n)
        w.submit(jb.priority(rng.choice((0, 100, 200))))
        if rng.random() < 0.2:  # a Job with activeDeadlineSeconds
            wl = w.state.workloads[jb.key].workload
            w.apply([ev.JobObserved(workload=replace(wl, active_deadline_ms=rng.randrange(1, 30) * MIN))])
    if rng.random() < 0.3:  # a job whose LocalQueue does not exist: it can never start
        w.submit(job("lost").ns("ns").queue("nowhere").cpus(1).at(5 * MIN))
    alike = rng.random() < 0.5
    table: dict[Class, list[Millis]] = {}

    def durations(cls: Class) -> list[Millis]:
        if cls not in table:
            if rng.random() < 0.1:
                table[cls] = []  # no recorded run: its end is unknown
            elif alike:
                table[cls] = [rng.randrange(1, 20) * MIN] * rng.randint(1, 4)
            else:
                table[cls] = sorted(rng.randrange(1, 40) * MIN for _ in range(rng.randint(1, 6)))
        return table[cls]

    return w.state, 6 * MIN, durations


def test_the_shortcuts_give_the_plain_loops_estimates() -> None:
    compared = 0
    for seed in range(60):
        state, now, durations = random_case(seed)
        expected = {q: plain(state, now, durations, q) for q in (0.1, 0.5, 0.9)}
        if any(e is None for e in expected.values()):
            continue
        assert estimates(state, now, durations, (0.1, 0.5, 0.9)) == expected, seed
        compared += 1
    assert compared >= 45


def test_a_quantile_that_draws_what_another_drew_is_not_run_again() -> None:
    """All runs of the class alike: p50 and p90 draw the same runtimes, so one forward run gives both."""
    state, now, _ = random_case(3)
    calls: list[Class] = []

    def durations(cls: Class) -> list[Millis]:
        calls.append(cls)
        return [10 * MIN]

    found = estimates(state, now, durations, (0.5, 0.9))
    assert found[0.5] == found[0.9] == plain(state, now, lambda c: [10 * MIN], 0.9)
    drawn_once = len(calls)
    calls.clear()
    estimates(state, now, durations, (0.5,))
    assert 0 < len(calls) < drawn_once  # the second quantile only checked the draws, it did not run forward


def test_a_dry_runs_start_is_the_full_forward_runs() -> None:
    """The dry run runs forward only until its job has started, and once for quantiles that draw alike: the start it
    gives is the one the whole forward run (every pending workload, one run per quantile) gives the job."""
    compared = started = 0
    for seed in range(60):
        state, now, durations = random_case(seed)
        rng = random.Random(seed)
        queue = rng.choice(sorted(q for q in state.local_queues))
        wl = (
            job(f"try{seed}")
            .ns("ns")
            .queue(queue.split("/")[1])
            .cpus(rng.choice((1, 2, 4)))
            .priority(rng.choice((0, 100, 200)))
            .at(now)
            .obj()
        )
        with_it = State.from_snapshot(state.to_snapshot())
        with_it.apply(ev.JobObserved(workload=wl))
        expected = {q: plain(with_it, now, durations, q) for q in (0.1, 0.5, 0.9)}
        if any(e is None for e in expected.values()):
            continue
        got = dry_run(state, now, durations, wl, (0.1, 0.5, 0.9)).starts
        assert got == {q: e[wl.key] for q, e in expected.items() if e is not None}, seed
        compared += 1
        started += got[0.9] is not None
    assert compared >= 45 and started >= 30, (compared, started)
