"""Run seeds of the faulty simulation, in parallel processes; shrink a failing seed's scenario while it still fails.

A seed fixes everything: the scenario (tests.dst.scenarios) and every fault the world draws. A failing seed is
replayed exactly by `python -m tests.dst --seed N --trace` (with the same --shape and --faults), and its shrunk
form by the command `Failure.command` prints.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from daemon.obs.logging import configure
from daemon.sim.faults import ALL, Faults
from daemon.sim.faulty import FaultyResult, run_faulty
from tests.dst.scenarios import CI, ISSUE, Pick, Shape, build, job_plan

SHAPES = {"issue": ISSUE, "ci": CI}
SHRINK_BUDGET = 400  # runs a shrink may take


@dataclass(frozen=True, slots=True)
class Case:
    seed: int
    shape: Shape
    faults: Faults = ALL
    pick: Pick = field(default_factory=Pick)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a worker sends back for one seed (small: thousands of them cross a pipe)."""

    seed: int
    ok: bool
    invariant: str | None  # the first that failed
    violation: str | None
    invariants: tuple[str, ...]  # every one that failed, in order
    churn: int
    preemptions: int
    admissions: int
    crashes: int
    lease_losses: int
    events: int
    seconds: float  # wall
    cpu_seconds: float  # the worker process's CPU time for the seed (its threads included)


def _quiet() -> None:
    configure(level="critical")  # the stages' retry warnings are the faults injected, thousands of them
    sys.setswitchinterval(0.0005)  # the log's writer thread hands the GIL back sooner


def run_case(case: Case) -> FaultyResult:
    scenario = build(case.seed, case.shape, case.pick)
    return asyncio.run(run_faulty(scenario, case.faults, case.seed, expect_all_end=True))


def _outcome(case: Case) -> Outcome:
    started, cpu = time.perf_counter(), time.process_time()
    r = run_case(case)
    first = r.violations[0] if r.violations else None
    return Outcome(
        seed=case.seed,
        ok=r.ok,
        invariant=first.invariant if first else None,
        violation=str(first) if first else None,
        invariants=tuple(dict.fromkeys(v.invariant for v in r.violations)),
        churn=r.churn,
        preemptions=r.preemptions,
        admissions=r.admissions,
        crashes=r.crashes,
        lease_losses=r.lease_losses,
        events=r.events,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu,
    )


def run_seeds(
    seeds: Sequence[int],
    shape: Shape,
    faults: Faults,
    *,
    jobs: int = 1,
    progress: Callable[[Outcome, int, int], None] | None = None,
) -> list[Outcome]:
    """Every seed's outcome, in seed order; `jobs` worker processes (1: in this process). `progress` is told of
    each outcome as it comes (with the count done and the total)."""
    cases = [Case(seed, shape, faults) for seed in seeds]
    outcomes: list[Outcome] = []
    if jobs <= 1:
        _quiet()
        for case in cases:
            outcomes.append(_outcome(case))
            if progress is not None:
                progress(outcomes[-1], len(outcomes), len(cases))
    else:
        # spawn, not fork: a fresh interpreter per worker, nothing of the parent's event loop or threads in it
        with multiprocessing.get_context("spawn").Pool(jobs, initializer=_quiet) as pool:
            for outcome in pool.imap_unordered(_outcome, cases, chunksize=4):
                outcomes.append(outcome)
                if progress is not None:
                    progress(outcome, len(outcomes), len(cases))
    return sorted(outcomes, key=lambda o: o.seed)


def _still_fails(case: Case, invariant: str) -> FaultyResult | None:
    r = run_case(case)
    return r if any(v.invariant == invariant for v in r.violations) else None


def _chunks(items: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Parts of `items` to try removing: halves, then quarters, ... then single items."""
    size = max(1, len(items) // 2)
    while True:
        for start in range(0, len(items), size):
            yield items[start : start + size]
        if size == 1:
            return
        size = max(1, size // 2)


def shrink(case: Case, invariant: str, budget: int = SHRINK_BUDGET) -> tuple[Case, FaultyResult]:
    """A smaller case (fewer faults, queues, jobs) that still fails `invariant`; greedy, each step kept only if the
    run still fails the same way. Deterministic: the same failing case shrinks to the same result."""
    best = run_case(case)
    runs = 0

    def attempt(candidate: Case) -> bool:
        nonlocal best, case, runs
        if runs >= budget:
            return False
        runs += 1
        r = _still_fails(candidate, invariant)
        if r is None:
            return False
        case, best = candidate, r
        return True

    for name in case.faults.active():
        attempt(replace(case, faults=case.faults.without(name)))
    plan = job_plan(case.seed, case.shape)
    queues = tuple(range(case.shape.queues)) if case.pick.queues is None else case.pick.queues
    changed = True
    while changed and runs < budget:
        changed = False
        for part in list(_chunks(queues)):
            kept = tuple(q for q in queues if q not in part)
            if kept and attempt(replace(case, pick=replace(case.pick, queues=kept))):
                queues, changed = kept, True
                break
    jobs = tuple(i for i in range(len(plan)) if plan[i][0] in queues) if case.pick.jobs is None else case.pick.jobs
    case = replace(case, pick=replace(case.pick, jobs=jobs))
    changed = True
    while changed and runs < budget:
        changed = False
        for part in list(_chunks(jobs)):
            kept = tuple(j for j in jobs if j not in part)
            if kept and attempt(replace(case, pick=replace(case.pick, jobs=kept))):
                jobs, changed = kept, True
                break
    return case, best


def command(case: Case, shape_name: str) -> str:
    """The one command that replays `case` exactly, with its trail."""
    parts = ["python -m tests.dst", f"--seed {case.seed}", f"--shape {shape_name}"]
    if case.faults != ALL:
        parts.append(f"--faults '{case.faults.describe()}'")
    if case.pick.queues is not None:
        parts.append("--queues " + ",".join(map(str, case.pick.queues)))
    if case.pick.jobs is not None:
        parts.append("--keep-jobs " + ",".join(map(str, case.pick.jobs)))
    parts.append("--trace")
    return " ".join(parts)
