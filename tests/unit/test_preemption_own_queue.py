"""The victims' search restricted to the preemptor's own queue (`preemption.own_queue_only`) finds what the search
over every candidate finds: the same victims, reasons and policies, the same off-limits mark, the snapshot left as
it was.

Real: the fold (builders' `World`), the quota tree and snapshot, `classical_targets` and `all_candidates_targets`.
The random states: a Cohort of ClusterQueues, sometimes under a parent Cohort with quota of its own (so a level can
give the hierarchical advantage), preemption within the queue and reclaim by random policies, borrowWithinCohort
mostly Never, admitted workloads of a few sizes and priorities, some evicting, some evicted and admitted again at
the instant asked (off limits then).
"""

from __future__ import annotations

import random

from daemon.domain.model import FlavorResource
from daemon.domain.preemption import Preemptor, Target, all_candidates_targets, classical_targets, own_queue_only
from daemon.domain.quota import QuotaTree, Snapshot
from daemon.domain.view import ClusterView, PendingWorkload
from tests.unit.builders import World, cohort, cq, flavor, job, lq, running

NOW = 10_000
FR: FlavorResource = ("f", "cpu")
POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")


def _world(rng: random.Random) -> World:
    w = World()
    w.add(flavor("f"))
    if rng.random() < 0.3:
        w.add(cohort("top").flavor("f", cpu=rng.choice((0, 4, 8))))
        w.add(cohort("co").parent("top").flavor("f", cpu=rng.choice((0, 2))))
        w.add(cq("other").cohort("top").flavor("f", cpu=rng.choice((2, 4))), lq("ns", "other", "other"))
    names = [f"q{i}" for i in range(rng.randint(2, 4))]
    for name in names:
        b = cq(name).cohort("co").flavor("f", cpu=rng.choice((2, 4, 6)))
        b = b.preempt(
            within=rng.choice(POLICIES[:3]),
            reclaim=rng.choice(POLICIES),
            borrow_within="Never" if rng.random() < 0.8 else "LowerPriority",
        )
        w.add(b, lq("ns", name, name))
    queues = [*names, *(["other"] if "other" in w.cluster_queues else [])]
    for n in range(rng.randint(0, 14)):
        name = rng.choice(queues)
        jb = job(f"r{n}").ns("ns").queue(name).cpus(rng.choice((1, 1, 2))).priority(rng.choice((0, 50, 100)))
        r = rng.random()
        if r < 0.15:  # evicted and admitted again at NOW: off limits at NOW
            w.run(running(jb, name, "f", at=NOW, evicting=True))
            w.evict(jb.key, NOW)
            w.run(running(jb, name, "f", at=NOW))
        else:
            w.run(running(jb, name, "f", at=rng.randrange(0, NOW), evicting=r < 0.25))
    return w


def _preemptor(view: ClusterView, tree: QuotaTree, pw: PendingWorkload, quantity: int) -> Preemptor:
    name = pw.local_queue.split("/")[1]  # each LocalQueue is named after its ClusterQueue
    return Preemptor(
        pw=pw,
        cq=view.cluster_queues[name],
        node=tree.cqs[name],
        usage={FR: quantity},
        frs=frozenset({FR}),
        excluded=set(),
        now=NOW,
    )


def _shown(targets: list[Target]) -> list[tuple[str, str, str]]:
    return [(t.victim.key, t.reason, t.policy) for t in targets]


def test_the_own_queue_search_finds_what_the_whole_search_finds() -> None:
    applied = found = marked = 0
    for seed in range(400):
        rng = random.Random(seed)
        w = _world(rng)
        for name in sorted(w.cluster_queues):
            for priority in (0, 50, 100, 200):
                w.submit(job(f"p-{name}-{priority}").ns("ns").queue(name).cpus(1).priority(priority))
        view = w.view()
        tree = QuotaTree.build(view.cluster_queues, view.cohorts, view.flavors, view.rejected)
        snap = Snapshot(tree, view.admitted_by_cq, {})
        for name in sorted(view.cluster_queues):
            for pw in view.pending_by_cq[name]:
                quantity = rng.choice((1000, 2000, 3000))
                fast, whole = (_preemptor(view, tree, pw, quantity) for _ in range(2))
                if not own_queue_only(fast):
                    continue
                before = {n: dict(node.usage) for n, node in [*tree.cqs.items(), *tree.cohorts.items()]}
                got, expected = classical_targets(fast, snap), all_candidates_targets(whole, snap)
                assert _shown(got) == _shown(expected), seed
                assert fast.skipped_readmitted == whole.skipped_readmitted, seed
                assert {n: dict(node.usage) for n, node in [*tree.cqs.items(), *tree.cohorts.items()]} == before
                applied += 1
                found += bool(got)
                marked += fast.skipped_readmitted
    # The comparison saw every case: the shortcut taken, victims found by it, and the off-limits mark set.
    assert applied >= 1000 and found >= 150 and marked >= 300, (applied, found, marked)
