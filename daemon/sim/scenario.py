"""A simulator scenario: the manifests of one multi-document YAML file, read into events and timed jobs.

The file holds what `kubectl apply` takes (Kueue objects, PriorityClass, Namespace, batch/v1 Job). A Job's
`simulate.admitd.io/submit-at` says when it is created and `simulate.admitd.io/runtime` how long it runs;
`simulate.admitd.io/ready-after` says how long after it starts its pods are all ready (`never`: they never are; it
matters only with waitForPodsReady; default: ready at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.management import default_queue_exists, manage_new_job, namespace_managed
from daemon.domain.model import (
    ClusterQueue,
    Cohort,
    JobManagement,
    LocalQueue,
    Millis,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    Workload,
)
from daemon.manifests import ManifestError, Parsed, adapter_for, load_documents
from daemon.manifests.durations import DurationError, parse_duration
from daemon.manifests.fields import printable

SUBMIT_AT = "simulate.admitd.io/submit-at"
RUNTIME = "simulate.admitd.io/runtime"
READY_AFTER = "simulate.admitd.io/ready-after"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimJob:
    workload: Workload
    submit_at: Millis  # when it is created: its annotation plus its place among jobs of the same instant
    runtime: Millis | None  # None: it never finishes
    ready_after: Millis | None = 0  # after each start, when its pods are all ready; None: never


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    source: str
    config: tuple[ev.Event, ...]  # observations of the queue objects, in document order (rejections included;
    # those of objects declared twice first)
    jobs: tuple[SimJob, ...]  # in creation order
    problems: tuple[str, ...] = ()  # one line each (escaped for a terminal): an object or job rejected, and why
    warnings: tuple[str, ...] = ()  # one line each, escaped likewise
    unmanaged_jobs: int = 0  # jobs admitd leaves alone (no queue name, or a namespace not managed): not simulated
    rejected: Mapping[str, str] = field(default_factory=dict)  # job key -> why it was not simulated
    # Queue-object events observed later, at their times (a what-if on a recorded log: daemon.sim.whatif); at an
    # instant they come before the jobs created then.
    timed_config: tuple[tuple[Millis, ev.Event], ...] = ()


def _observed(parsed: Parsed) -> ev.Event | None:
    match parsed.obj:
        case ResourceFlavor() as rf:
            return ev.ResourceFlavorObserved(flavor=rf)
        case ClusterQueue() as cq:
            return ev.ClusterQueueObserved(cluster_queue=cq)
        case Cohort() as co:
            return ev.CohortObserved(cohort=co)
        case LocalQueue() as lq:
            return ev.LocalQueueObserved(local_queue=lq)
        case PriorityClass() as pc:
            return ev.PriorityClassObserved(priority_class=pc)
        case Namespace() as ns:
            return ev.NamespaceObserved(namespace=ns)
        case None:
            return None


def _identity(parsed: Parsed) -> tuple[str, str] | None:
    """What makes two queue objects the same object in a cluster: the kind (any API version) and the name (with
    the namespace for a LocalQueue). None for jobs and rejected documents."""
    match parsed.obj:
        case LocalQueue() as lq:
            return ("LocalQueue", lq.key)
        case PriorityClass() as pc:
            return (pc.kind, pc.name)
        case ResourceFlavor() | ClusterQueue() | Cohort() | Namespace() as obj:
            return (type(obj).__name__, obj.name)
        case None:
            return None


def _where(parsed: Parsed) -> str:
    loc = f"{parsed.source}:{parsed.line}" if parsed.source and parsed.line else f"document {parsed.doc_index}"
    return loc


def _annotation(raw: Mapping[str, object], name: str) -> str | None:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or name not in annotations:
        return None
    value = annotations[name]
    return str(value)


def load_scenario(path: Path | str, management: JobManagement | None = None) -> Scenario:
    """Read a scenario file. Raises ManifestError only when the file itself cannot be read or parsed as YAML.
    `management` says which jobs are managed (manageJobsWithoutQueueName, managedJobsNamespaceSelector; Kueue's defaults
    when None); a job without a queue name in a namespace with a LocalQueue `default` is queued there."""
    docs = load_documents(path)
    manages = management if management is not None else JobManagement()
    # Every queue object is observed before the first job is created, so a job sees them all when it is created.
    local_queues = {d.obj.key: d.obj for d in docs if isinstance(d.obj, LocalQueue) and not d.errors}
    namespaces: dict[str, Namespace] = {}
    for d in docs:
        if isinstance(d.obj, Namespace) and not d.errors:
            namespaces.setdefault(d.obj.name, d.obj)
    config: list[ev.Event] = []
    duplicates: list[ev.Event] = []  # rejections of queue objects declared twice
    problems: list[str] = []
    warnings: list[str] = []
    rejected: dict[str, str] = {}
    timed: list[tuple[Millis, int, Workload, Millis | None]] = []
    unmanaged = 0
    seen_jobs: set[str] = set()
    ready_after_of: dict[str, Millis | None] = {}
    declared: dict[tuple[str, str], str] = {}  # queue object -> where it was first declared
    for document in docs:
        parsed = document
        warnings.extend(printable(f"{_where(parsed)}: {w}") for w in parsed.warnings)
        identity = _identity(parsed)
        twice = identity is not None and identity in declared
        if identity is not None and twice:
            # kubectl apply would silently replace the first with the second; in one file that is a mistake.
            duplicate = ManifestError(
                f"a {identity[0]} of this name was already declared at {declared[identity]}; "
                "the first one is kept and this one is ignored",
                kind=parsed.kind,
                name=parsed.name,
                namespace=parsed.namespace,
                field="metadata.name",
            )
            parsed = replace(parsed, obj=None, errors=(duplicate,))
        elif identity is not None:
            declared[identity] = _where(parsed)
        if parsed.errors:
            for err in parsed.errors:
                problems.append(printable(f"{_where(parsed)}: {err}"))
            # A second declaration is another document, not a newer version of the first: its rejection goes ahead
            # of every observation, so that the fold never takes it for the held queue edited into an invalid one.
            (duplicates if twice else config).append(
                ev.ObjectRejected(
                    kind=parsed.kind or "Unknown",
                    name=parsed.name or f"document-{parsed.doc_index}",
                    namespace=parsed.namespace,
                    errors=tuple(str(e) for e in parsed.errors),
                )
            )
            continue
        observed = _observed(parsed)
        if observed is not None:
            config.append(observed)
            continue
        if parsed.raw_job is None or parsed.workload is None:
            continue
        adapter = adapter_for(parsed.api_version, parsed.kind)
        ns = parsed.namespace or "default"
        managed = manage_new_job(
            manages,
            parsed.workload.queue_name,
            namespace_selected=namespace_managed(manages, ns, namespaces.get(ns)),
            default_queue=default_queue_exists(local_queues, ns),
        )
        if adapter is None or managed is None:
            unmanaged += 1
            continue
        key = f"{ns}/{parsed.name}"

        def job_error(field: str, message: str, parsed: Parsed = parsed, ns: str = ns) -> ManifestError:
            return ManifestError(message, kind=parsed.kind, name=parsed.name, namespace=ns, field=field)

        try:
            if key in seen_jobs:
                raise job_error("metadata.name", "a job of this name was already declared earlier in the scenario")
            submit_text = _annotation(parsed.raw_job, SUBMIT_AT)
            runtime_text = _annotation(parsed.raw_job, RUNTIME)
            try:
                submit_at = 0 if submit_text is None else parse_duration(submit_text)
            except DurationError as e:
                raise job_error(f"metadata.annotations[{SUBMIT_AT}]", str(e)) from e
            try:
                runtime = None if runtime_text is None else parse_duration(runtime_text)
            except DurationError as e:
                raise job_error(f"metadata.annotations[{RUNTIME}]", str(e)) from e
            ready_text = _annotation(parsed.raw_job, READY_AFTER)
            try:
                ready_after = (
                    0 if ready_text is None else None if ready_text.strip() == "never" else parse_duration(ready_text)
                )
            except DurationError as e:
                raise job_error(f"metadata.annotations[{READY_AFTER}]", f"{e} (or 'never')") from e
            # The loader already ran the adapter; only the identity and creation time are the simulator's.
            workload = replace(parsed.workload, uid=f"sim-{parsed.doc_index}", queue_name=managed.queue_name)
        except ManifestError as e:
            problems.append(printable(f"{_where(parsed)}: {e}"))
            rejected[key] = str(e)
            config.append(ev.ObjectRejected(kind=parsed.kind, name=parsed.name, namespace=ns, errors=(str(e),)))
            continue
        seen_jobs.add(key)
        ready_after_of[key] = ready_after
        timed.append((submit_at, len(timed), workload, runtime))
    # Jobs of the same instant are created in document order, 1 ms apart, so FIFO ties are well defined.
    timed.sort(key=lambda t: (t[0], t[1]))
    jobs: list[SimJob] = []
    last_instant, offset = -1, 0
    for submit_at, _, workload, runtime in timed:
        offset = offset + 1 if submit_at == last_instant else 0
        last_instant = submit_at
        created = submit_at + offset
        jobs.append(
            SimJob(
                workload=replace(workload, created_at=created),
                submit_at=created,
                runtime=runtime,
                ready_after=ready_after_of.get(workload.key, 0),
            )
        )
    return Scenario(
        source=str(path),
        config=(*duplicates, *config),
        jobs=tuple(jobs),
        problems=tuple(problems),
        warnings=tuple(warnings),
        unmanaged_jobs=unmanaged,
        rejected=rejected,
    )
