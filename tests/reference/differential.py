"""The engine and the reference model on the same scenario: random scenarios, both runs, and their differences.

A scenario is queue objects (flavors, Cohorts up to three levels deep, ClusterQueues with borrowing and lending
limits, preemption policies, flavor orders, queueing strategies) and jobs (queue, priority, arrival, runtime,
several at the same instant). Both sides live in the simulator's world: at each instant the arrivals and
completions due are applied, then cycles run until one decides nothing; a preempted job stops at once. The engine
side is the real fold (`tests.unit.builders.World`) and `AdmissionEngine`; the model side is
`tests.reference.kueue_model.KueueModel`. Their decisions are compared instant by instant.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hypothesis import strategies as st

from daemon.domain.admission import ALL_OPTIMISATIONS, AdmissionEngine, EngineConfig, Optimisations
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPreempted
from daemon.domain.model import PendingReason
from daemon.domain.quota import QuotaTree
from tests.reference.kueue_model import Decision, KueueModel, Switches
from tests.unit.builders import JobBuilder, World, cohort, cq, flavor, job, lq, namespace

WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")


@dataclass(frozen=True, slots=True)
class Space:
    """Which part of the scenario space to draw from."""

    flavors: int = 3
    max_queues: int = 5
    cohort_levels: int = 3
    preemption: bool = True
    strict_fifo: bool = True
    max_jobs: int = 14


@dataclass
class Scenario:
    items: list[object]  # builders and objects for a World
    jobs: list[tuple[int, JobBuilder, int | None]]  # (arrival, job, runtime)

    def describe(self) -> str:
        lines = [repr(getattr(i, "obj", lambda i=i: i)()) for i in self.items]
        lines += [
            f"at {at}: {jb.key} queue={jb.queue_name} prio={jb.prio} {jb.pod_sets} runtime={rt}"
            for at, jb, rt in self.jobs
        ]
        return "\n".join(lines)


SPACES = {
    "full": Space(),
    "no-cohorts": Space(cohort_levels=0),
    "no-preemption": Space(preemption=False),
    "no-cohorts-one-flavor": Space(cohort_levels=0, flavors=1),
    "one-flavor": Space(flavors=1),
    "no-preemption-one-flavor": Space(preemption=False, flavors=1),
    "no-cohorts-no-preemption": Space(cohort_levels=0, preemption=False),
    "best-effort": Space(strict_fifo=False),
}
CI_SPACE = SPACES["no-cohorts"]
"""The part of the space the unit test also runs with fair sharing on (without Cohorts Kueue's fair sharing decides
as its classic cycle); the classic test runs the whole space (`SPACES["full"]`)."""


@st.composite
def scenarios(draw: st.DrawFn, space: Space = Space()) -> Scenario:
    flavors = [f"f{i}" for i in range(draw(st.integers(1, space.flavors)))]
    items: list[object] = [*(flavor(f) for f in flavors), namespace("default")]
    parents: list[str] = []
    for level in range(space.cohort_levels):
        for i in range(draw(st.integers(1 if level == 0 else 0, 2))):
            name = f"co{level}{i}"
            c = cohort(name)
            if level > 0:
                c = c.parent(draw(st.sampled_from([p for p in parents if p.startswith(f"co{level - 1}")] or parents)))
            if draw(st.booleans()):
                for f in draw(st.lists(st.sampled_from(flavors), min_size=1, max_size=len(flavors), unique=True)):
                    c = c.flavor(f, gpu=draw(st.integers(0, 4)), borrow=draw(st.one_of(st.none(), st.integers(0, 3))))
            items.append(c)
            parents.append(name)
    n = draw(st.integers(1, space.max_queues))
    for i in range(n):
        b = cq(f"cq{i}")
        parent = draw(st.one_of(st.none(), st.sampled_from(parents))) if parents else None
        if parent is not None:
            b = b.cohort(parent)
        if space.strict_fifo and draw(st.booleans()):
            b = b.strict_fifo()
        if space.preemption:
            reclaim = draw(st.sampled_from(RECLAIM))
            b = b.preempt(
                draw(st.sampled_from(WITHIN)),
                reclaim,
                draw(st.sampled_from(("Never", "LowerPriority"))) if reclaim != "Never" else "Never",
            )
        if draw(st.booleans()):
            b = b.fungibility(
                draw(st.sampled_from(("MayStopSearch", "TryNextFlavor"))),
                draw(st.sampled_from(("MayStopSearch", "TryNextFlavor"))),
                draw(st.sampled_from(("BorrowingOverPreemption", "PreemptionOverBorrowing"))),
            )
        for f in draw(st.lists(st.sampled_from(flavors), min_size=1, max_size=len(flavors), unique=True)):
            b = b.flavor(
                f,
                gpu=draw(st.integers(0, 6)),
                borrow=draw(st.one_of(st.none(), st.integers(0, 4))),
                lend=draw(st.one_of(st.none(), st.integers(0, 4))),
            )
        items += [b, lq("default", f"q{i}", f"cq{i}")]
    jobs = []
    instants = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True))
    for t in range(draw(st.integers(1, space.max_jobs))):
        at = draw(st.sampled_from(instants)) * 1000
        jb = job(f"j{t}").queue(f"q{draw(st.integers(0, n - 1))}").priority(draw(st.integers(0, 2)))
        jb = jb.at(at).gpus(draw(st.integers(1, 4)))
        jobs.append((at, jb, draw(st.one_of(st.none(), st.integers(1, 4).map(lambda s: s * 1000)))))
    return Scenario(items, jobs)


# --- the two runs ----------------------------------------------------------------------------------------------------


Timeline = list[tuple[int, int, str, str]]


def _timeline(sc: Scenario) -> Timeline:
    tl: Timeline = [(at, i, "create", jb.key) for i, (at, jb, _) in enumerate(sc.jobs)]
    heapq.heapify(tl)
    return tl


def _drive(
    sc: Scenario,
    create: Callable[[JobBuilder], None],
    finish: Callable[[str], bool],
    settle: Callable[[int], list[Decision]],
    wants_next: Callable[[], bool],
) -> list[Decision]:
    """The simulator's loop around either side: arrivals and completions, then cycles; an instant more when the
    side asks for it (a workload held back at its eviction instant)."""
    builders = {jb.key: jb for _, jb, _ in sc.jobs}
    runtime = {jb.key: rt for _, jb, rt in sc.jobs}
    tl = _timeline(sc)
    epoch: dict[str, int] = {}
    order = len(tl)
    out: list[Decision] = []
    while tl:
        now = tl[0][0]
        acted = False
        while tl and tl[0][0] == now:
            _, _, kind, key = heapq.heappop(tl)
            if kind == "create":
                create(builders[key])
                acted = True
            elif kind == "tick":
                acted = True
            elif kind == f"finish{epoch.get(key)}":
                acted |= finish(key)
        if not acted:
            continue
        decisions = settle(now)
        out.extend(decisions)
        for d in decisions:
            rt = runtime[d.workload]
            if d.kind == "admit" and rt is not None:
                epoch[d.workload] = epoch.get(d.workload, 0) + 1
                order += 1
                heapq.heappush(tl, (now + rt, order, f"finish{epoch[d.workload]}", d.workload))
            elif d.kind == "preempt":
                epoch[d.workload] = epoch.get(d.workload, 0) + 1
        if wants_next():
            order += 1
            heapq.heappush(tl, (now + 1, order, "tick", ""))
    return out


def run_engine(
    sc: Scenario,
    config: EngineConfig | None = None,
    optimisations: Optimisations = ALL_OPTIMISATIONS,
    reasons: list[tuple[int, dict[str, PendingReason | None]]] | None = None,
) -> list[Decision]:
    """The engine's decisions; with `reasons`, also every pending workload's last reason after each instant."""
    w = World().add(*sc.items)
    engine = AdmissionEngine(config or EngineConfig(), optimisations)

    def finish(key: str) -> bool:
        if key not in w.admitted:
            return False
        w.finish(key)
        return True

    def settle(now: int) -> list[Decision]:
        out: list[Decision] = []
        for _ in range(10_000):
            events: list[Event] = engine.decide(w.view(), now)
            w.apply(events)
            for e in events:
                if isinstance(e, WorkloadPreempted):
                    out.append(Decision(now, "preempt", e.workload, e.cluster_queue, preemptor=e.preemptor))
                    w.evict(e.workload, now)
                elif isinstance(e, WorkloadAdmitted):
                    flavors = tuple((ps.name, tuple(sorted(ps.flavors.items()))) for ps in e.admission.pod_sets)
                    out.append(Decision(now, "admit", e.workload, e.admission.cluster_queue, flavors=flavors))
            if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
                if reasons is not None:
                    reasons.append((now, {k: r.last_reason for k, r in sorted(w.pending.items())}))
                return out
        raise AssertionError(f"the engine found no fixed point at {now} ms")

    return _drive(sc, w.submit, finish, settle, lambda: engine.retry_at is not None)


def run_model(sc: Scenario, switches: Switches | None = None) -> list[Decision]:
    w = World().add(*sc.items)  # the fold reads the objects as the engine sees them
    s = w.state
    model = KueueModel(
        flavors=s.flavors,
        cluster_queues=s.cluster_queues,
        cohorts=s.cohorts,
        local_queues=s.local_queues,
        namespaces=s.namespaces,
        switches=switches or Switches(),
    )

    def create(jb: JobBuilder) -> None:
        model.create(jb.obj(), jb.prio)

    def finish(key: str) -> bool:
        if key not in model.admitted:
            return False
        model.finish(key)
        return True

    return _drive(sc, create, finish, model.settle, model.wants_next_instant)


# --- differences ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Difference:
    kind: str  # admitted | order | flavors | evicted
    at: int
    engine: tuple[Decision, ...]
    model: tuple[Decision, ...]

    def __str__(self) -> str:
        def show(ds: tuple[Decision, ...]) -> str:
            return (
                "; ".join(
                    f"{d.kind} {d.workload}"
                    + (f" in {d.cluster_queue} on {d.flavors}" if d.kind == "admit" else f" by {d.preemptor}")
                    for d in ds
                )
                or "nothing"
            )

        return f"{self.kind} at {self.at} ms:\n  engine: {show(self.engine)}\n  model:  {show(self.model)}"


def trees(sc: Scenario) -> dict[str, str]:
    """Each ClusterQueue's quota tree (its root Cohort, or itself)."""
    s = World().add(*sc.items).state
    tree = QuotaTree.build(s.cluster_queues, s.cohorts, s.flavors)
    return {name: node.tree for name, node in tree.cqs.items()}


def first_difference(engine: list[Decision], model: list[Decision], tree_of: Mapping[str, str]) -> Difference | None:
    """The first instant at which the two runs decide differently, and how. Decisions in different quota trees
    are independent: only their order within a tree is compared."""

    def per_tree(ds: tuple[Decision, ...]) -> dict[str, list[Decision]]:
        out: dict[str, list[Decision]] = {}
        for d in ds:
            out.setdefault(tree_of[d.cluster_queue], []).append(d)
        return out

    instants = sorted({d.at for d in engine} | {d.at for d in model})
    for at in instants:
        e = tuple(d for d in engine if d.at == at)
        m = tuple(d for d in model if d.at == at)
        if per_tree(e) == per_tree(m):
            continue
        ea = [d for d in e if d.kind == "admit"]
        ma = [d for d in m if d.kind == "admit"]
        ep = sorted(d.workload for d in e if d.kind == "preempt")
        mp = sorted(d.workload for d in m if d.kind == "preempt")
        if ep != mp:
            kind = "evicted"
        elif {d.workload for d in ea} != {d.workload for d in ma}:
            kind = "admitted"
        elif sorted(ea, key=lambda d: d.workload) != sorted(ma, key=lambda d: d.workload):
            kind = "flavors"
        elif [(d.workload, d.preemptor) for d in e if d.kind == "preempt"] != [
            (d.workload, d.preemptor) for d in m if d.kind == "preempt"
        ]:
            kind = "preemptor"  # the same victims, claimed by other preemptors
        else:
            kind = "order"  # the same decisions, in another order within a quota tree
        return Difference(kind, at, e, m)
    return None
