"""The metrics' fast path (text kept per queue and rendered again only where an event changed something, rendering
done ahead of the scrape by `refresh`, a background fold) gives exactly what a fold and render from scratch give, on
logs of random scenarios; the cohort metrics equal what the quota tree of the folded state says; a process that
folds in the background answers "not ready" until it has caught up, then the same as one folding on demand.

Real: `admitd simulate`'s driver writing SQLite logs of randomly generated scenarios (hierarchical cohorts,
borrowing and lending limits, priority classes, preemption, LocalQueues), the fold, the renderer,
`prometheus_client.parser`, the quota tree. Nothing faked.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.domain.quota import UNLIMITED, QuotaTree
from daemon.eventlog import LogReader, codec
from daemon.metrics import FoldedMetrics, LogMetrics, MetricsNotReady, Renderer
from daemon.metrics.families import COHORT_FAMILIES
from daemon.query.moment import state_at
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario

SEEDS = range(6)


def random_scenario(seed: int) -> str:
    """Two root cohorts, one with a child cohort holding quota of its own, five ClusterQueues (one without a
    cohort) over two flavors with random nominal quotas and borrowing/lending limits, two priority classes, a
    LocalQueue per ClusterQueue (two for one of them), and 40 jobs of random size, priority, queue and times."""
    rng = random.Random(seed)
    docs = [
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: fast}",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: slow}",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 1000",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: low}\nvalue: 10",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: org}\nspec: {}",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: team}\nspec:\n  parentName: org\n"
        "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
        f"    - name: fast\n      resources: [{{name: cpu, nominalQuota: {rng.randint(0, 4)}}}]",
    ]
    cohorts = ["org", "team", "team", "other", None]
    for i, cohort in enumerate(cohorts):
        limits = []
        for flavor in ("fast", "slow"):
            q = f"{{name: cpu, nominalQuota: {rng.randint(0, 6)}"
            if cohort is not None and rng.random() < 0.4:
                q += f", borrowingLimit: {rng.randint(0, 4)}"
            if cohort is not None and rng.random() < 0.3:
                q += f", lendingLimit: {rng.randint(0, 3)}"
            limits.append(f"    - name: {flavor}\n      resources: [{q}}}]")
        preemption = rng.choice(["", "  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}\n"])
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {{name: cq-{i}}}\nspec:\n"
            + (f"  cohort: {cohort}\n" if cohort else "")
            + "  namespaceSelector: {}\n"
            + preemption
            + "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
            + "\n".join(limits)
        )
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {{name: lq-{i}, namespace: ns}}\n"
            f"spec: {{clusterQueue: cq-{i}}}"
        )
    docs.append(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: extra, namespace: other}\n"
        "spec: {clusterQueue: cq-1}"
    )
    for j in range(40):
        ns, lq = rng.choice([("ns", f"lq-{i}") for i in range(len(cohorts))] + [("other", "extra")])
        labels = f"kueue.x-k8s.io/queue-name: {lq}"
        pc = rng.choice([None, "high", "low"])
        if pc is not None:
            labels += f", kueue.x-k8s.io/priority-class: {pc}"
        docs.append(
            f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: job-{j}\n  namespace: {ns}\n"
            f"  labels: {{{labels}}}\n"
            f"  annotations: {{simulate.admitd.io/submit-at: {rng.randint(0, 600)}s, "
            f"simulate.admitd.io/runtime: {rng.randint(10, 900)}s}}\n"
            f"spec:\n  parallelism: {rng.randint(1, 4)}\n  template:\n    spec:\n      restartPolicy: Never\n"
            "      containers: [{name: w, image: w, resources: {requests: {cpu: 1}}}]"
        )
    return "\n---\n".join(docs) + "\n"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("fast-path")
    out = []
    for seed in SEEDS:
        scenario = base / f"random-{seed}.yaml"
        scenario.write_text(random_scenario(seed))
        db = base / f"random-{seed}.db"
        asyncio.run(run_simulation(load_scenario(scenario), db_path=db))
        out.append(db)
    return out


def events_of(db: Path) -> list[tuple[int, object]]:
    with LogReader(db) as reader:
        return [(e.seq, codec.decode(e.type, e.version, e.payload, seq=e.seq)) for e in reader.iter_events()]


def from_scratch(events: list[tuple[int, object]], upto: int) -> bytes:
    fm = FoldedMetrics()
    for seq, event in events:
        if seq > upto:
            break
        fm.apply(event, seq)  # type: ignore[arg-type]
    return Renderer(local_queue_metrics=True).render(fm)


def test_the_fast_path_equals_a_render_from_scratch_at_random_moments(logs: list[Path]) -> None:
    checked = 0
    for seed, db in zip(SEEDS, logs, strict=True):
        rng = random.Random(seed)
        events = events_of(db)
        live, renderer = FoldedMetrics(), Renderer(local_queue_metrics=True)
        for seq, event in events:
            live.apply(event, seq)  # type: ignore[arg-type]
            roll = rng.random()
            if roll < 0.15:
                renderer.refresh(live)  # rendering ahead of a scrape, as the background fold does
            elif roll < 0.3 or seq == events[-1][0]:
                assert renderer.render(live) == from_scratch(events, seq), (db.name, seq)
                checked += 1
    assert checked > 50


def test_the_output_parses_and_has_kueue_cohort_metrics_equal_to_the_quota_tree(logs: list[Path]) -> None:
    families_seen: set[str] = set()
    for db in logs:
        with LogReader(db) as reader:
            events = events_of(db)
            for upto in (events[len(events) // 3][0], events[2 * len(events) // 3][0], events[-1][0]):
                fm = FoldedMetrics()
                for seq, event in events:
                    if seq > upto:
                        break
                    fm.apply(event, seq)  # type: ignore[arg-type]
                text = Renderer(local_queue_metrics=True).render(fm).decode()
                got = {
                    (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "replica_role"))): s.value
                    for f in text_string_to_metric_families(text)
                    for s in f.samples
                }
                families_seen |= {f.name for f in text_string_to_metric_families(text)}
                state = state_at(reader, upto)
                view = state.view()
                tree = QuotaTree.build(state.cluster_queues, state.cohorts, state.flavors)
                usage: dict[str, dict[tuple[str, str], int]] = {}
                for cq, wls in view.admitted_by_cq.items():
                    acc = usage.setdefault(cq, {})
                    for aw in wls.values():
                        for fr, v in aw.admission.usage().items():
                            acc[fr] = acc.get(fr, 0) + v
                tree.load_usage(usage)
                assert set(tree.cohorts) == {"org", "team", "other"}
                for name, node in tree.cohorts.items():
                    parent = node.parent.name if node.parent is not None else ""
                    root = node.root().name
                    info = ("kueue_cohort_info", (("cohort", name), ("parent_cohort", parent), ("root_cohort", root)))
                    assert got[info] == 1.0
                    admitted = sum(
                        len(view.admitted_by_cq.get(cq, {}))
                        for cq, cq_node in tree.cqs.items()
                        if any(up is node for up in cq_node.path_to_root())
                    )
                    lab = (("cohort", name),)
                    assert got[("kueue_cohort_subtree_admitted_active_workloads", lab)] == admitted
                    for fr, quota in node.subtree.items():
                        frl = (("cohort", name), ("flavor", fr[0]), ("resource", fr[1]))
                        want = float("inf") if quota >= UNLIMITED else quota / 1000
                        assert got[("kueue_cohort_subtree_quota", frl)] == want
                        assert got[("kueue_cohort_subtree_resource_reservations", frl)] == node.usage.get(fr, 0) / 1000
                # The subtree counter: each admission counted in its ClusterQueue's cohort and every one above.
                admissions: dict[str, int] = {}
                for seq, event in events:
                    if seq > upto:
                        break
                    if type(event).__name__ == "WorkloadAdmitted":
                        node_ = tree.cqs[event.admission.cluster_queue]  # type: ignore[attr-defined]
                        for up in node_.path_to_root():
                            admissions[up.name] = admissions.get(up.name, 0) + 1
                counted: dict[str, float] = {}
                for (metric, labels), sample in got.items():
                    if metric == "kueue_cohort_subtree_admitted_workloads_total":
                        co = dict(labels)["cohort"]
                        counted[co] = counted.get(co, 0) + sample
                assert counted == admissions
                for cq, node in tree.cqs.items():
                    parent = node.parent.name if node.parent is not None else ""
                    root = node.root().name if node.parent is not None else ""
                    key = (("cluster_queue", cq), ("parent_cohort", parent), ("root_cohort", root))
                    assert got[("kueue_cluster_queue_info", key)] == 1.0
    assert {f.name for f in COHORT_FAMILIES} - {"kueue_cohort_subtree_admitted_workloads"} <= families_seen | {
        "kueue_cohort_subtree_admitted_workloads_total"
    }
    assert "kueue_cohort_subtree_admitted_workloads" in families_seen  # the parser drops a counter's _total


def test_a_background_fold_is_not_ready_until_caught_up_then_equals_folding_on_demand(
    logs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = logs[0]
    monkeypatch.setattr(LogMetrics, "CHUNK", 7)  # many chunks: the lock is let go between them
    background = LogMetrics(db, local_queue_metrics=True, follow_every=0.01)
    on_demand = LogMetrics(db, local_queue_metrics=True)
    try:
        with pytest.raises(MetricsNotReady, match=r"not ready: folding .* at seq 0 of \d+; scrape again"):
            background.render()
        assert background.start() is background
        assert background.caught_up(timeout=60)
        assert background.fm.state.seq > 7
        wall = ("admitd_snapshot_age_seconds", "admitd_replay_duration_seconds", "process_")  # they move
        a = [x for x in background.render().decode().splitlines() if not x.startswith(wall)]
        b = [x for x in on_demand.render().decode().splitlines() if not x.startswith(wall)]
        assert a == b
        assert background.follow_error is None
    finally:
        background.close()
        on_demand.close()
