"""The estimate on the Workload (issue 26): the status writer puts a workload's last recorded estimate
(`workload.estimated`) in its Workload's `admitd.io/estimated-start` annotation, one write per estimate recorded.

Real: the fold, the status writer and its Workload builder. Faked: the API server (a client that records each
request and answers {}), the clock.
"""

from __future__ import annotations

import json
from typing import Any, cast

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.kube import status_objects as so
from daemon.kube.client import KubeClient
from daemon.kube.status import StatusWriter
from tests.unit.builders import World, cq, flavor, job, lq

HOUR = 3_600_000
T0 = 1_780_000_000_000  # 2026-05-28T20:26:40Z


class Recording:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, *, body: object = None, **_: object) -> dict[str, Any]:
        self.requests.append((method, path, body))
        return {}


class Clock:
    def now(self) -> int:
        return T0


def _annotations(client: Recording) -> list[dict[str, Any]]:
    return [
        json.loads(body["metadata"]["annotations"][so.ESTIMATE_ANNOTATION])
        for method, path, body in client.requests
        if method == "PATCH" and not path.endswith("/status") and "metadata" in body
    ]


async def test_each_recorded_estimate_is_written_once_on_the_workload() -> None:
    w = World().add(flavor("h100"), cq("a").flavor("h100", gpu=8), lq("ns", "q", "a"))
    jb = job("wait").ns("ns").queue("q").gpus(4).at(T0)
    w.submit(jb)
    client = Recording()
    writer = StatusWriter(cast(KubeClient, client), w.state, Clock(), monotonic=lambda: 0.0)
    writer.listener(ev.JobObserved(workload=w.state.workloads[jb.key].workload), 1)
    await writer._write_workload(jb.key)  # created, no estimate yet
    assert _annotations(client) == []
    first = ev.WorkloadEstimated(workload=jb.key, at=T0, inputs=7, p10=T0 + HOUR, p50=T0 + 2 * HOUR, p90=None)
    writer.listener(first, 8)
    await writer._write_workload(jb.key)
    await writer._write_workload(jb.key)  # nothing new: no second write
    assert _annotations(client) == [
        {
            "p10": "2026-05-28T21:26:40Z",
            "p50": "2026-05-28T22:26:40Z",
            "p90": None,
            "madeAt": "2026-05-28T20:26:40Z",
            "inputsSeq": 7,
        }
    ]
    moved = ev.WorkloadEstimated(workload=jb.key, at=T0 + 1, inputs=9, p10=T0, p50=T0 + HOUR, p90=T0 + 3 * HOUR)
    writer.listener(moved, 10)
    await writer._write_workload(jb.key)
    assert [a["p50"] for a in _annotations(client)] == ["2026-05-28T22:26:40Z", "2026-05-28T21:26:40Z"]
    assert writer.stats.writes["workload-estimate"] == 2


async def test_without_workload_objects_no_estimate_is_written() -> None:
    w = World().add(flavor("h100"), cq("a").flavor("h100", gpu=8), lq("ns", "q", "a"))
    jb = job("wait").ns("ns").queue("q").gpus(4).at(T0)
    w.submit(jb)
    client = Recording()
    writer = StatusWriter(cast(KubeClient, client), w.state, Clock(), workload_objects=False, monotonic=lambda: 0.0)
    writer.listener(ev.JobObserved(workload=w.state.workloads[jb.key].workload), 1)
    writer.listener(ev.WorkloadEstimated(workload=jb.key, at=T0, inputs=1, p10=None, p50=T0, p90=None), 2)
    await writer._write_workload(jb.key)
    assert client.requests == []


async def test_an_estimate_not_yet_written_when_the_workload_is_admitted_is_not_written() -> None:
    w = World().add(flavor("h100"), cq("a").flavor("h100", gpu=8), lq("ns", "q", "a"))
    jb = job("wait").ns("ns").queue("q").gpus(4).at(T0)
    w.submit(jb)
    client = Recording()
    writer = StatusWriter(cast(KubeClient, client), w.state, Clock(), monotonic=lambda: 0.0)
    writer.listener(ev.JobObserved(workload=w.state.workloads[jb.key].workload), 1)
    await writer._write_workload(jb.key)
    first = ev.WorkloadEstimated(workload=jb.key, at=T0, inputs=7, p10=T0 + HOUR, p50=T0 + 2 * HOUR, p90=None)
    writer.listener(first, 8)
    await writer._write_workload(jb.key)
    assert len(_annotations(client)) == 1
    # A second estimate, then the admission before the writer reaches the Workload: the wait it was about is over.
    later = ev.WorkloadEstimated(workload=jb.key, at=T0 + 1, inputs=9, p10=T0, p50=T0 + HOUR, p90=T0 + 3 * HOUR)
    writer.listener(later, 10)
    admission = Admission(
        cluster_queue="a",
        pod_sets=(
            PodSetAssignment(name="main", count=1, flavors={"nvidia.com/gpu": "h100"}, usage={"nvidia.com/gpu": 4000}),
        ),
    )
    admitted = ev.WorkloadAdmitted(workload=jb.key, at=T0 + 2, admission=admission)
    w.state.apply(admitted)
    writer.listener(admitted, 11)
    await writer._write_workload(jb.key)
    assert len(_annotations(client)) == 1  # only the first: the unwritten one is dropped with the wait
    statuses = [body for method, path, body in client.requests if method == "PATCH" and path.endswith("/status")]
    assert "admission" in statuses[-1]["status"]  # the admission itself is written
    assert writer.stats.writes["workload-estimate"] == 1
