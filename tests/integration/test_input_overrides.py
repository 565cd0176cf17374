"""No silent overrides: a queue object declared twice in one scenario is reported and the first one kept; a Job
naming a priority class that does not exist waits with Kueue's reason instead of running at priority 0, and is
queued with the class's priority once the class appears.

Real: `admitd simulate` in-process (`daemon.cli.main`), the loader, the fold, the engine, the SQLite log.
Faked: the cluster (the virtual clock). The last test drives the pure fold and engine directly (no I/O).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.domain.admission import AdmissionEngine
from daemon.domain.model import (
    ClusterQueue,
    LocalQueue,
    PendingReasonKind,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    Workload,
)
from daemon.domain.state import State
from daemon.manifests import parse_documents
from tests.integration.inprocess import admitd
from tests.integration.scenario_text import BASE, job


def simulate(tmp_path: Path, text: str) -> tuple[dict[str, dict[str, object]], str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    run = admitd("simulate", str(path), "--json")
    assert run.crash is None, run.crash
    assert run.status == 0, run.stderr
    jobs = run.json()["jobs"]
    assert isinstance(jobs, dict)
    return jobs, run.stderr


def _cq(version: str, nominal: int) -> str:
    return f"""---
apiVersion: kueue.x-k8s.io/{version}
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {{name: "nvidia.com/gpu", nominalQuota: {nominal}}}
"""


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_a_second_cluster_queue_of_the_same_name_is_rejected_and_the_first_kept(tmp_path: Path, version: str) -> None:
    jobs, stderr = simulate(tmp_path, BASE + _cq(version, 1) + job("four", gpus=4))
    assert "ClusterQueue team: metadata.name: a ClusterQueue of this name was already declared at" in stderr
    assert "the first one is kept" in stderr
    assert jobs["research/four"]["admitted_at"] == [0]  # the first (8 GPUs) holds; with the second it would wait


@pytest.mark.parametrize(
    "doc",
    [
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpu}\n",
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: research-queue, namespace: research}\n"
        "spec: {clusterQueue: elsewhere}\n",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: all}\n",
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 1\n",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1\n",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: research}\n",
    ],
    ids=["ResourceFlavor", "LocalQueue", "Cohort", "WorkloadPriorityClass", "PriorityClass", "Namespace"],
)
def test_every_kind_of_queue_object_declared_twice_is_reported(tmp_path: Path, doc: str) -> None:
    declared_in_base = "ResourceFlavor" in doc or "LocalQueue" in doc
    text = BASE + ("" if declared_in_base else "---\n" + doc) + "---\n" + doc + job("ok")
    jobs, stderr = simulate(tmp_path, text)
    kind = doc.split("kind: ")[1].split("\n", maxsplit=1)[0]
    assert f"a {kind} of this name was already declared at" in stderr, stderr
    assert jobs["research/ok"]["admitted_at"] == [0]  # the first LocalQueue (to team) is the one in use


def test_a_job_whose_priority_class_does_not_exist_waits_with_kueues_reason(tmp_path: Path) -> None:
    wpc = "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 100\n"
    text = (
        BASE
        + wpc
        + job("typo", labels={"kueue.x-k8s.io/priority-class": "hihg"})
        + job("pod-typo", priority_class_name="missing-pc")
        + job("named", labels={"kueue.x-k8s.io/priority-class": "high"})
    )
    jobs, _ = simulate(tmp_path, text)
    assert jobs["research/typo"]["admitted_at"] == []
    assert jobs["research/typo"]["pending_reason"] == (
        'WorkloadPriorityClassNotFound: WorkloadPriorityClass "hihg" not found '
        "(named by the label kueue.x-k8s.io/priority-class)"
    )
    assert jobs["research/pod-typo"]["pending_reason"] == (
        'PriorityClassNotFound: PriorityClass "missing-pc" not found (named by spec.template.spec.priorityClassName)'
    )
    assert jobs["research/named"]["admitted_at"] == [0.002]  # created third, 1 ms apart


def test_a_held_job_is_queued_with_the_classs_priority_once_the_class_appears() -> None:
    state, engine = State(), AdmissionEngine()
    for event in _queue_objects():
        state.apply(event)
    late = Workload(
        namespace="research",
        name="late",
        uid="uid-late",
        created_at=0,
        queue_name="research-queue",
        priority_class="high",
        pod_sets=(PodSet(name="main", count=1, requests={"nvidia.com/gpu": 1000}),),
    )
    state.apply(ev.JobObserved(workload=late))
    decisions = engine.decide(state.view(), 10)
    assert len(decisions) == 1
    pending = decisions[0]
    assert isinstance(pending, ev.WorkloadPending)
    assert pending.reason.kind is PendingReasonKind.WORKLOAD_PRIORITY_CLASS_NOT_FOUND
    for d in decisions:
        state.apply(d)
    state.apply(ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=500)))
    assert state.workloads["research/late"].priority == 500
    decisions = engine.decide(state.view(), 20)
    assert [type(d).__name__ for d in decisions] == ["WorkloadAdmitted"]


def _queue_objects() -> list[ev.Event]:
    """The queue objects of `BASE` as the simulator observes them."""
    out: list[ev.Event] = []
    for parsed in parse_documents(BASE):
        match parsed.obj:
            case ResourceFlavor() as rf:
                out.append(ev.ResourceFlavorObserved(flavor=rf))
            case ClusterQueue() as cq:
                out.append(ev.ClusterQueueObserved(cluster_queue=cq))
            case LocalQueue() as lq:
                out.append(ev.LocalQueueObserved(local_queue=lq))
            case _:
                raise AssertionError(parsed)
    return out
