"""The job kinds `admitd run` manages, as the API server serves them: where each is listed and patched, how its
status says it is suspended, running or finished, and which kinds this cluster serves.

batch/v1 Job is always there. PyTorchJob (kubeflow.org/v1), RayJob (ray.io/v1) and JobSet (jobset.x-k8s.io/v1alpha2)
are watched only when their CRDs are installed (checked once at start-up through discovery); a kind installed later
needs a restart. How each reports finished follows Kueue's integrations: a PyTorchJob's condition Succeeded or
Failed, a RayJob's `status.jobDeploymentStatus` Complete or Failed, a JobSet's condition Completed or Failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.kube.client import KubeClient
from daemon.kube.errors import NotFound
from daemon.kube.watch import Reflector
from daemon.manifests.distributed import pod_spec_pointers, suspend_pointer
from daemon.obs.logging import get_logger

log = get_logger("admitd.jobkinds")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobKind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"

    def object_path(self, key: str) -> str:
        namespace, _, name = key.partition("/")
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}/{name}"

    @property
    def suspend_pointer(self) -> str:
        return suspend_pointer(self.kind)

    def pod_spec_pointers(self, pod_sets: Sequence[str]) -> dict[str, str | None]:
        return pod_spec_pointers(self.kind, pod_sets)


JOB = JobKind(kind="Job", group="batch", version="v1", plural="jobs")
DISTRIBUTED = (
    JobKind(kind="PyTorchJob", group="kubeflow.org", version="v1", plural="pytorchjobs"),
    JobKind(kind="RayJob", group="ray.io", version="v1", plural="rayjobs"),
    JobKind(kind="JobSet", group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets"),
)
KINDS: Mapping[str, JobKind] = {k.kind: k for k in (JOB, *DISTRIBUTED)}


async def served_distributed_kinds(client: KubeClient) -> list[JobKind]:
    """The distributed kinds whose CRDs this cluster serves (API discovery, one request per group version)."""
    served: list[JobKind] = []
    for k in DISTRIBUTED:
        try:
            resources = await client.request("GET", f"/apis/{k.group}/{k.version}")
        except NotFound:
            log.info("not served; not watched", kind=k.kind, api_version=k.api_version)
            continue
        if any(r.get("name") == k.plural for r in resources.get("resources") or ()):
            served.append(k)
            log.info("watching", kind=k.kind, api_version=k.api_version)
    return served


class JobWatches:
    """The Reflectors of every job kind, run together; `synced` once each has listed."""

    def __init__(self, reflectors: Sequence[Reflector]) -> None:
        self.reflectors = tuple(reflectors)
        self.synced = asyncio.Event()

    async def run(self) -> None:
        async def synced() -> None:
            await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
            self.synced.set()

        await asyncio.gather(synced(), *(r.run() for r in self.reflectors))

    async def relist(self) -> None:
        """Every kind listed again now (`Reflector.relist`)."""
        await asyncio.gather(*(r.relist() for r in self.reflectors))


# --- status of the distributed kinds ----------------------------------------------------------------------------

_RAY_IDLE = ("", "New", "Suspended", "Complete", "Failed")  # no RayCluster pods exist in these deployment states


def _true(conditions: object, *types: str) -> str | None:
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") in types and cond.get("status") == "True":
            return str(cond["type"])
    return None


@dataclass(frozen=True, slots=True)
class DistributedStatus:
    suspended: bool
    active: int  # pods (or, for a RayJob, clusters) still running
    finished: str | None  # "Complete" | "Failed" | None
    ready: bool  # Kueue's PodsReady for the kind, which each of these reports for the job as a whole


def distributed_status(obj: Mapping[str, Any]) -> DistributedStatus:
    """A PyTorchJob's, RayJob's or JobSet's status as Kueue's integrations read it. PodsReady: a PyTorchJob's
    condition Running, a RayJob's `status.rayClusterStatus.state` ready, every replicated job of a JobSet ready or
    succeeded."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == "PyTorchJob":
        suspended = bool((spec.get("runPolicy") or {}).get("suspend"))
        replicas = status.get("replicaStatuses") or {}
        active = (
            sum(int((r or {}).get("active") or 0) for r in replicas.values()) if isinstance(replicas, Mapping) else 0
        )
        done = _true(status.get("conditions"), "Succeeded", "Failed")
        finished = None if done is None else ("Complete" if done == "Succeeded" else "Failed")
        return DistributedStatus(suspended, active, finished, _true(status.get("conditions"), "Running") is not None)
    if kind == "RayJob":
        deployment = str(status.get("jobDeploymentStatus") or "")
        finished = {"Complete": "Complete", "Failed": "Failed"}.get(deployment)
        cluster = status.get("rayClusterStatus") or {}
        ready = isinstance(cluster, Mapping) and cluster.get("state") == "ready"
        return DistributedStatus(bool(spec.get("suspend")), 0 if deployment in _RAY_IDLE else 1, finished, ready)
    if kind == "JobSet":
        jobs = status.get("replicatedJobsStatus") or []
        jobs = jobs if isinstance(jobs, list) else []
        active = sum(int((j or {}).get("active") or 0) for j in jobs)
        done = _true(status.get("conditions"), "Completed", "Failed")
        finished = None if done is None else ("Complete" if done == "Completed" else "Failed")
        wanted = sum(int((rj or {}).get("replicas", 1) or 0) for rj in spec.get("replicatedJobs") or ())
        have = sum(int((j or {}).get("ready") or 0) + int((j or {}).get("succeeded") or 0) for j in jobs)
        return DistributedStatus(bool(spec.get("suspend")), active, finished, bool(jobs) and have >= wanted)
    raise ValueError(f"not a distributed job kind: {kind}")
