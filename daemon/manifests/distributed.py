"""Distributed training jobs as workloads of several pod sets, admitted whole: kubeflow.org/v1 PyTorchJob,
ray.io/v1 RayJob and jobset.x-k8s.io/v1alpha2 JobSet, read as Kueue's integrations read them.

Pod set names, counts and order follow Kueue (pkg/controller/jobs/...): a PyTorchJob is "master" then "worker"
(lower-cased replica types, `replicas` defaulting to 1); a RayJob is "head" (1 pod), one pod set per worker group
named by its lower-cased `groupName` (`replicas` x `numOfHosts`), and "submitter" (1 pod) when the job is submitted
by a Kubernetes Job (`submissionMode: K8sJobMode`, the default); a JobSet is one pod set per replicated job (its
`replicas` x its Job's `min(parallelism, completions)`). Each pod template is read by the Job adapter's
`read_pod_template` (requests with init containers, sidecars and overhead; nodeSelector; tolerations).

`pod_spec_pointers` says where, in the object, each pod set's pod spec sits (JSON pointers), for the actuator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from daemon.domain.model import Millis, Workload
from daemon.manifests.fields import INT32_MAX, Reader, at, dns_label, index, key, shown
from daemon.manifests.jobs import (
    QUEUE_NAME_LABEL,
    JobMetadata,
    JobReader,
    PodTemplate,
    read_job_metadata,
    read_pod_template,
    register_adapter,
)

__all__ = [
    "MAX_POD_SETS",
    "DistributedAdapter",
    "JobSetAdapter",
    "PyTorchJobAdapter",
    "RayJobAdapter",
    "pod_spec_pointers",
    "suspend_pointer",
]

MAX_POD_SETS = 8
"""A Workload holds at most 8 pod sets (Kueue's `MaxPodSets`, the CRD's maxItems)."""

PYTORCH_REPLICA_TYPES = ("Master", "Worker")  # Kueue's OrderedReplicaTypes for PyTorchJob
RAY_HEAD = "head"
RAY_SUBMITTER = "submitter"
RAY_SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")

# KubeRay's default submitter pod (when spec.submitterPodTemplate is not given): Kueue counts these requests.
_DEFAULT_SUBMITTER = {
    "spec": {
        "containers": [
            {
                "name": "ray-job-submitter",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ]
    }
}


def _managed(obj: Mapping[str, object]) -> bool:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(QUEUE_NAME_LABEL) if isinstance(labels, Mapping) else None
    return isinstance(value, str) and bool(value)


def _workload(
    kind: str,
    meta: JobMetadata,
    pod_sets: Sequence[PodTemplate],
    *,
    created_at: Millis,
    uid: str,
    pod_priority_class: str | None = None,
) -> Workload | None:
    if meta.name is None:
        return None
    return Workload(
        namespace=meta.namespace,
        name=meta.name,
        kind=kind,
        uid=uid,
        created_at=created_at,
        queue_name=meta.queue_name,
        priority_class=meta.priority_class,
        pod_priority_class=pod_priority_class,
        pod_sets=tuple(t.pod_set for t in pod_sets),
    )


def _count(r: Reader, value: object, path: str, default: int = 1) -> int:
    n = r.integer(value, path, minimum=0, maximum=INT32_MAX)
    return default if n is None else n


def _check_total(r: Reader, kind: str, pod_sets: int, path: str) -> None:
    if pod_sets > MAX_POD_SETS:
        r.error(path, f"a {kind} becomes {pod_sets} pod sets; a workload may have at most {MAX_POD_SETS}")


class DistributedAdapter(JobReader):
    """The shared half of the three adapters (queued by the label only, as Kueue's integrations)."""

    __slots__ = ()
    api_version: str

    def is_managed(self, obj: Mapping[str, object]) -> bool:
        return _managed(obj)


@dataclass(frozen=True, slots=True, kw_only=True)
class PyTorchJobAdapter(DistributedAdapter):
    """kubeflow.org/v1 PyTorchJob: pod sets "master" and "worker" from `spec.pytorchReplicaSpecs`."""

    api_version: str = "kubeflow.org/v1"
    kind: str = "PyTorchJob"

    def read(self, r: Reader, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload | None:
        meta = read_job_metadata(r, obj)
        spec = r.mapping(
            obj.get("spec"),
            "spec",
            required=True,
            known=("runPolicy", "pytorchReplicaSpecs", "elasticPolicy", "nprocPerNode"),
        )
        if spec is None:
            return None
        run_policy = r.mapping(spec.get("runPolicy"), "spec.runPolicy") or {}
        r.boolean(run_policy.get("suspend"), "spec.runPolicy.suspend")
        scheduling = r.mapping(run_policy.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy") or {}
        policy_class = r.string(
            scheduling.get("priorityClass"), "spec.runPolicy.schedulingPolicy.priorityClass", syntax=dns_label
        )
        specs_path = "spec.pytorchReplicaSpecs"
        replica_specs = r.mapping(spec.get("pytorchReplicaSpecs"), specs_path, required=True)
        if replica_specs is None:
            return None
        for name in replica_specs:
            if name not in PYTORCH_REPLICA_TYPES:
                r.error(
                    key(specs_path, name if name.isprintable() and len(name) <= 64 else shown(name)),
                    f"unknown replica type {shown(name)}: a PyTorchJob has {' and '.join(PYTORCH_REPLICA_TYPES)} "
                    "(spelt so)",
                )
        if not any(t in replica_specs for t in PYTORCH_REPLICA_TYPES):
            r.error(specs_path, f"must have a {' or a '.join(PYTORCH_REPLICA_TYPES)} replica spec")
        templates: list[PodTemplate] = []
        for replica_type in PYTORCH_REPLICA_TYPES:
            if replica_type not in replica_specs:
                continue
            path = key(specs_path, replica_type)
            replica = r.mapping(
                replica_specs[replica_type], path, required=True, known=("replicas", "template", "restartPolicy")
            )
            if replica is None:
                continue
            count = _count(r, replica.get("replicas"), at(path, "replicas"))
            if replica_type == "Master" and count > 1:
                # The training operator's validation: a PyTorchJob has one master.
                r.error(at(path, "replicas"), f"must be at most 1 for the Master (got {count})")
            template = read_pod_template(
                r, replica.get("template"), at(path, "template"), replica_type.lower(), count, at(path, "replicas")
            )
            if template is not None:
                templates.append(template)
        if r.errors:
            return None
        # Kueue's KubeflowJob.PriorityClass: the run policy's, else the first replica's (Master, then Worker).
        pod_priority = policy_class or next((t.priority_class for t in templates if t.priority_class), None)
        return _workload(
            self.kind, meta, templates, created_at=created_at, uid=uid, pod_priority_class=pod_priority or None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RayJobAdapter(DistributedAdapter):
    """ray.io/v1 RayJob: pod sets "head", one per worker group, and "submitter" in K8sJobMode.

    A queued RayJob must bring its own cluster and delete it when done, as Kueue's webhook requires: one that runs
    on an existing cluster (`clusterSelector`), keeps its cluster after finishing (`shutdownAfterJobFinishes` not
    true) or autoscales (`enableInTreeAutoscaling`) is rejected with the reason. These checks apply only to a job
    with the queue-name label: without it, admitd leaves the job alone.
    """

    api_version: str = "ray.io/v1"
    kind: str = "RayJob"

    def read(self, r: Reader, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload | None:
        meta = read_job_metadata(r, obj)
        spec = r.mapping(obj.get("spec"), "spec", required=True)
        if spec is None:
            return None
        r.boolean(spec.get("suspend"), "spec.suspend")
        managed = meta.queue_name is not None
        selector = r.string_map(spec.get("clusterSelector"), "spec.clusterSelector")
        if selector and managed:
            r.error(
                "spec.clusterSelector",
                "a queued RayJob cannot run on an existing Ray cluster: admitd admits the cluster a RayJob creates "
                "from its rayClusterSpec (remove clusterSelector, or the queue-name label)",
            )
            return None
        shutdown = r.boolean(spec.get("shutdownAfterJobFinishes"), "spec.shutdownAfterJobFinishes")
        if managed and shutdown is not True:
            r.error(
                "spec.shutdownAfterJobFinishes",
                f"must be true for a queued RayJob (got {'false' if shutdown is False else 'nothing'}): a cluster "
                "kept after the job finishes would hold its queue's quota",
            )
        mode = r.string(spec.get("submissionMode"), "spec.submissionMode") or "K8sJobMode"
        if mode not in RAY_SUBMISSION_MODES:
            r.error(
                "spec.submissionMode", f"unsupported value {shown(mode)} (allowed: {', '.join(RAY_SUBMISSION_MODES)})"
            )
        cluster_path = "spec.rayClusterSpec"
        cluster = r.mapping(spec.get("rayClusterSpec"), cluster_path, required=managed)
        if cluster is None:
            # Unqueued and without a cluster of its own: nothing to admit, and admitd does not manage it.
            return None if r.errors else _workload(self.kind, meta, (), created_at=created_at, uid=uid)
        autoscaling = r.boolean(cluster.get("enableInTreeAutoscaling"), at(cluster_path, "enableInTreeAutoscaling"))
        if managed and autoscaling:
            r.error(
                at(cluster_path, "enableInTreeAutoscaling"),
                "must not be true for a queued RayJob: its quota is held for the replicas it asks for, so it must not "
                "scale beyond them",
            )
        templates: list[PodTemplate] = []
        head_path = at(cluster_path, "headGroupSpec")
        head = r.mapping(cluster.get("headGroupSpec"), head_path, required=True)
        if head is not None:
            t = read_pod_template(r, head.get("template"), at(head_path, "template"), RAY_HEAD, 1, head_path)
            if t is not None:
                templates.append(t)
        groups_path = at(cluster_path, "workerGroupSpecs")
        groups = r.sequence(cluster.get("workerGroupSpecs"), groups_path) or []
        reserved = {RAY_HEAD: "the head group", RAY_SUBMITTER: "the submitter"}
        seen: dict[str, str] = {}
        for i, item in enumerate(groups):
            p = index(groups_path, i)
            group = r.mapping(item, p, required=True)
            if group is None:
                continue
            group_name = r.string(group.get("groupName"), at(p, "groupName"), required=True)
            pod_set = group_name.lower() if group_name else None
            if pod_set is not None:
                problem = dns_label(pod_set)
                if problem:
                    r.error(
                        at(p, "groupName"), f"invalid value {shown(group_name or '')}: as a pod set name it {problem}"
                    )
                    pod_set = None
                elif pod_set in reserved:
                    r.error(at(p, "groupName"), f"{shown(pod_set)} is reserved for {reserved[pod_set]}'s pod set")
                    pod_set = None
                elif pod_set in seen:
                    r.error(at(p, "groupName"), f"{shown(group_name or '')} names the same pod set as {seen[pod_set]}")
                    pod_set = None
                else:
                    seen[pod_set] = at(p, "groupName")
            replicas = _count(r, group.get("replicas"), at(p, "replicas"))
            hosts = r.integer(group.get("numOfHosts"), at(p, "numOfHosts"), minimum=1, maximum=INT32_MAX)
            count = replicas * hosts if hosts is not None and hosts > 1 else replicas
            if count > INT32_MAX:
                r.error(at(p, "numOfHosts"), f"{replicas} replicas x {hosts} hosts exceed {INT32_MAX} pods")
                continue
            t = read_pod_template(r, group.get("template"), at(p, "template"), pod_set or "", count, at(p, "replicas"))
            if t is not None and pod_set is not None:
                templates.append(t)
        if mode == "K8sJobMode":
            submitter = spec.get("submitterPodTemplate")
            path = "spec.submitterPodTemplate"
            t = read_pod_template(
                r, submitter if submitter is not None else _DEFAULT_SUBMITTER, path, RAY_SUBMITTER, 1, path
            )
            if t is not None:
                templates.append(t)
        _check_total(r, self.kind, len(templates), groups_path)
        if r.errors:
            return None
        return _workload(self.kind, meta, templates, created_at=created_at, uid=uid)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSetAdapter(DistributedAdapter):
    """jobset.x-k8s.io/v1alpha2 JobSet: one pod set per replicated job, named as it."""

    api_version: str = "jobset.x-k8s.io/v1alpha2"
    kind: str = "JobSet"

    def read(self, r: Reader, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload | None:
        meta = read_job_metadata(r, obj)
        spec = r.mapping(obj.get("spec"), "spec", required=True)
        if spec is None:
            return None
        r.boolean(spec.get("suspend"), "spec.suspend")
        jobs_path = "spec.replicatedJobs"
        replicated = r.sequence(spec.get("replicatedJobs"), jobs_path, required=True, min_items=1) or []
        templates: list[PodTemplate] = []
        seen: dict[str, str] = {}
        for i, item in enumerate(replicated):
            p = index(jobs_path, i)
            rj = r.mapping(item, p, required=True, known=("name", "groupName", "replicas", "template", "dependsOn"))
            if rj is None:
                continue
            name = r.string(rj.get("name"), at(p, "name"), required=True, syntax=dns_label)
            if name is not None and name in seen:
                r.error(at(p, "name"), f"{shown(name)} is already the name of {seen[name]}")
                name = None
            elif name is not None:
                seen[name] = p
            replicas = _count(r, rj.get("replicas"), at(p, "replicas"))
            job_path = at(p, "template")
            job = r.mapping(rj.get("template"), job_path, required=True)
            if job is None:
                continue
            job_spec_path = at(job_path, "spec")
            job_spec = r.mapping(job.get("spec"), job_spec_path, required=True)
            if job_spec is None:
                continue
            parallelism = r.integer(
                job_spec.get("parallelism"), at(job_spec_path, "parallelism"), minimum=0, maximum=INT32_MAX
            )
            completions = r.integer(
                job_spec.get("completions"), at(job_spec_path, "completions"), minimum=0, maximum=INT32_MAX
            )
            per_replica = 1 if parallelism is None else parallelism
            if completions is not None and completions < per_replica:
                per_replica = completions
            count = replicas * per_replica
            if count > INT32_MAX:
                r.error(at(p, "replicas"), f"{replicas} replicas x {per_replica} pods exceed {INT32_MAX} pods")
                continue
            t = read_pod_template(
                r, job_spec.get("template"), at(job_spec_path, "template"), name or "", count, at(p, "replicas")
            )
            if t is not None and name is not None:
                templates.append(t)
        _check_total(r, self.kind, len(templates), jobs_path)
        if r.errors:
            return None
        return _workload(self.kind, meta, templates, created_at=created_at, uid=uid)


def suspend_pointer(kind: str) -> str:
    """The JSON pointer of the field that suspends a job of `kind`."""
    return "/spec/runPolicy/suspend" if kind == "PyTorchJob" else "/spec/suspend"


def pod_spec_pointers(kind: str, pod_sets: Sequence[str]) -> dict[str, str | None]:
    """Where each pod set's pod spec sits in a job of `kind` whose pod sets are `pod_sets`, in the adapter's order
    (the order of the workload's pod sets). None for a pod set whose template the object may not hold: a RayJob's
    submitter, whose pod KubeRay makes up when `submitterPodTemplate` is absent (Kueue's placement is then lost
    too), so admitd does not place it."""
    match kind:
        case "Job":
            return {name: "/spec/template/spec" for name in pod_sets}
        case "PyTorchJob":
            by_name = {t.lower(): t for t in PYTORCH_REPLICA_TYPES}
            return {name: f"/spec/pytorchReplicaSpecs/{by_name[name]}/template/spec" for name in pod_sets}
        case "RayJob":
            out: dict[str, str | None] = {}
            workers = 0
            for name in pod_sets:
                if name == RAY_HEAD:
                    out[name] = "/spec/rayClusterSpec/headGroupSpec/template/spec"
                elif name == RAY_SUBMITTER:
                    out[name] = None
                else:
                    out[name] = f"/spec/rayClusterSpec/workerGroupSpecs/{workers}/template/spec"
                    workers += 1
            return out
        case "JobSet":
            return {name: f"/spec/replicatedJobs/{i}/template/spec/template/spec" for i, name in enumerate(pod_sets)}
    raise ValueError(f"admitd cannot place the pods of a {kind}")


for _adapter in (PyTorchJobAdapter(), RayJobAdapter(), JobSetAdapter()):
    register_adapter(_adapter)
