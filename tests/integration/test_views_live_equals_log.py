"""Every projection of daemon/views fed live (by the Recorder, during a simulation) equals the same projection
rebuilt from the log it wrote (`views.follow.Following`), and a projection built for a state that was never fed
(`Queues.of`) holds the same figures; the queue usage kept by `Queues` is the sum of the admitted records.

Real: the simulator's stages and Recorder, the SQLite log, the fold, the projections. Faked: the cluster (the
simulator's virtual clock). Seeded random scenarios, some with a cohort cycle, a stopped ClusterQueue or a
ClusterQueue naming a missing flavor.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario
from daemon.views.follow import Following
from daemon.views.jobs import Jobs
from daemon.views.kueue_counters import KueueCounters
from daemon.views.ledger import Preemptions
from daemon.views.projection import Projection
from daemon.views.queues import Queues
from daemon.views.usage import Usage
from tests.integration.test_metrics_fast_path import random_scenario

SEEDS = range(8)


def scenario_with_extras(seed: int) -> str:
    """`random_scenario(seed)` plus, by the seed, a pair of cohorts in a cycle with a ClusterQueue and a LocalQueue in
    it, a stopped ClusterQueue, a ClusterQueue naming a flavor that does not exist; jobs sent to each."""
    rng = random.Random(1000 + seed)
    docs = [random_scenario(seed).rstrip("\n")]
    extras: list[tuple[str, str]] = []  # (ClusterQueue spec head, its name)
    if rng.random() < 0.7:
        docs += [
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: loop-a}\nspec: {parentName: loop-b}",
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: loop-b}\nspec: {parentName: loop-a}",
        ]
        extras.append(("  cohort: loop-a\n", "cq-cycle"))
    if rng.random() < 0.6:
        extras.append(("  stopPolicy: Hold\n", "cq-stopped"))
    if rng.random() < 0.6:
        extras.append(("", "cq-missing-flavor"))
    for head, name in extras:
        flavor = "nowhere" if name == "cq-missing-flavor" else "fast"
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n{head}"
            "  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
            f"    - name: {flavor}\n      resources: [{{name: cpu, nominalQuota: 4}}]"
        )
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {{name: lq-{name}, namespace: ns}}\n"
            f"spec: {{clusterQueue: {name}}}"
        )
        for j in range(rng.randint(1, 4)):
            docs.append(
                f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}-job-{j}\n  namespace: ns\n"
                f"  labels: {{kueue.x-k8s.io/queue-name: lq-{name}}}\n"
                f"  annotations: {{simulate.admitd.io/submit-at: {rng.randint(0, 300)}s, "
                "simulate.admitd.io/runtime: 60s}\n"
                "spec:\n  parallelism: 1\n  template:\n    spec:\n      restartPolicy: Never\n"
                "      containers: [{name: w, image: w, resources: {requests: {cpu: 1}}}]"
            )
    return "\n---\n".join(docs) + "\n"


def projections(state: State) -> list[Projection]:
    return [Queues(state), KueueCounters(state), Jobs(state), Preemptions(state), Usage(state, 0)]


@pytest.mark.parametrize("seed", SEEDS)
def test_projections_fed_live_equal_the_same_rebuilt_from_the_log(tmp_path: Path, seed: int) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(scenario_with_extras(seed))
    live: list[Projection] = []

    def attach(state: State) -> list[Projection]:
        live.extend(projections(state))
        return live

    db = tmp_path / "sim.db"
    result = asyncio.run(run_simulation(load_scenario(scenario), db_path=db, views=attach))
    assert result.state is not None and result.state.seq > 0
    state = State(pending_indexes=False)
    rebuilt = Following(state, projections(state))
    with LogReader(db) as reader:
        assert rebuilt.follow(reader) == result.state.seq
    assert rebuilt.state.seq == result.state.seq
    for fed, again in zip(live, rebuilt.projections, strict=True):
        assert fed.seq == again.seq == result.state.seq, type(fed).__name__
        assert fed.figures() == again.figures(), type(fed).__name__
    queues = live[0]
    assert isinstance(queues, Queues)
    # The state alone gives the same queue figures (a past moment's `admitd queues`).
    assert Queues.of(result.state).figures() == queues.figures()
    # Usage is the sum of what the admitted records hold (evicting ones included).
    summed: dict[str, dict[tuple[str, str], int]] = {}
    for aw in result.state.view().admitted.values():
        acc = summed.setdefault(aw.admission.cluster_queue, {})
        for fr, v in aw.admission.usage().items():
            acc[fr] = acc.get(fr, 0) + v
    assert {k: v for k, v in queues.usage.items() if v} == {
        k: {f: x for f, x in v.items() if x} for k, v in summed.items() if any(v.values())
    }
    names = set(result.state.cluster_queues)
    activities = {n: queues.activity(n) for n in names}
    if "cq-cycle" in names:
        assert activities["cq-cycle"].status == "inactive"
        assert activities["cq-cycle"].reason == "CohortCycleDetected"
        assert activities["cq-cycle"].kueue_status == "pending"
        assert queues.admitted("cq-cycle") == 0
    if "cq-stopped" in names:
        assert activities["cq-stopped"].status == "stopped"
        assert queues.admitted("cq-stopped") == 0
    if "cq-missing-flavor" in names:
        assert activities["cq-missing-flavor"].reason == "FlavorNotFound"
        assert "nowhere" in activities["cq-missing-flavor"].condition
    for n in names:
        counts = queues.pending_counts(n)
        assert counts.total == queues.pending(n) == counts.active + counts.inadmissible
