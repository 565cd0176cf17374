"""What carrying out a decision means for a job, as pure values: the orders the actuate stage hands to a Cluster.

An admission becomes an `Order` to unsuspend with each pod set's nodeSelector merged with its flavors' nodeLabels
and the flavors' tolerations appended; a preemption becomes an order to suspend with the pod sets' original
nodeSelector and tolerations restored (the fold has them from the job as first observed). The fold keeps every order
that has no recorded actuation yet (its outbox), so a restarted daemon carries out exactly what was decided.
A workload that may be admitted partially also has its pod counts set: to the admitted counts on admission, back to
the counts it asked for on suspension (Kueue's RunWithPodSetsInfo / RestorePodSetsInfo).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from daemon.domain.model import Admission, Millis, PodSet, PodSetAssignment, ResourceFlavor, Toleration, Workload


class Action(StrEnum):
    UNSUSPEND = "unsuspend"
    SUSPEND = "suspend"


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """One pod set's scheduling constraints: what its pod template's nodeSelector and tolerations are set to."""

    pod_set: str
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Resize:
    """Partial admission: run pod set `pod_set` with `count` pods; `full` is the count the job asked for."""

    pod_set: str
    count: int
    full: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Order:
    """One decision to carry out on the job `job` (namespace/name) of kind `kind`.

    `decision` is the seq of the decision event; every actuation event points back at it. `conflict` is set when the
    order cannot be carried out as decided (a pod template's nodeSelector already pins a key to another value than
    the flavor's): the actuate stage records that as a permanent failure instead of overwriting the user's value.
    """

    job: str
    kind: str
    uid: str  # the job's uid when it was observed: an order never touches a job recreated under the same name
    decision: int
    action: Action
    cluster_queue: str
    placements: tuple[Placement, ...]
    reason: str = ""  # for a suspension: Preempted | ClusterQueueStopped | LocalQueueStopped
    preemptor: str | None = None
    conflict: str | None = None
    # for an admission: `admission_note`, written on the job so another replica can adopt it; for a suspension, the
    # admission being stopped, written as the job's stopping note until its pods are gone
    note: str = ""
    resize: tuple[Resize, ...] = ()  # the pod sets that may run with fewer pods (a `min_count`): their counts
    # For a suspension: the decision of the unsuspension it replaced in the outbox before that one's result was
    # recorded (0: none). That patch may have been sent, by this process or by one that died since, and may land
    # yet: a process that did not send it itself (a restart) cannot take the Job's suspension as final at once.
    supersedes: int = 0


def _as_created(ps: PodSet) -> Placement:
    return Placement(
        pod_set=ps.name, node_selector=tuple(sorted(ps.node_selector.items())), tolerations=tuple(ps.tolerations)
    )


def original_placements(workload: Workload) -> tuple[Placement, ...]:
    """The pod sets' nodeSelector and tolerations as the job was created with them."""
    return tuple(_as_created(ps) for ps in workload.pod_sets)


def _admitted_placement(ps: PodSet, flavor_names: list[str], flavors: Mapping[str, ResourceFlavor]) -> Placement:
    selector = dict(ps.node_selector)
    tolerations = list(ps.tolerations)
    for name in flavor_names:
        flavor = flavors.get(name)
        if flavor is None:
            continue  # a flavor deleted after the decision: the decision stands, its labels are no longer known
        for key in sorted(flavor.node_labels):
            value = flavor.node_labels[key]
            if selector.get(key, value) != value:
                raise _Conflict(
                    f"pod set {ps.name}: nodeSelector {key}={selector[key]} conflicts with flavor {name}'s "
                    f"nodeLabel {key}={value}"
                )
            selector[key] = value
        for toleration in flavor.tolerations:
            if toleration not in tolerations:
                tolerations.append(toleration)
    return Placement(pod_set=ps.name, node_selector=tuple(sorted(selector.items())), tolerations=tuple(tolerations))


class _Conflict(Exception):
    pass


def unsuspend_order(
    workload: Workload, admission: Admission, flavors: Mapping[str, ResourceFlavor], decision: int, *, at: Millis = 0
) -> Order:
    """The order that carries out `admission`: each admitted pod set gets its flavors' nodeLabels and tolerations."""
    assigned = {a.name: a for a in admission.pod_sets}
    placements: list[Placement] = []
    conflict: str | None = None
    for ps in workload.pod_sets:
        assignment = assigned.get(ps.name)
        names = [] if assignment is None else sorted(set(assignment.flavors.values()))
        try:
            placements.append(_admitted_placement(ps, names, flavors))
        except _Conflict as e:
            conflict = str(e)
            placements.append(_as_created(ps))
    return Order(
        job=workload.key,
        kind=workload.kind,
        uid=workload.uid,
        decision=decision,
        action=Action.UNSUSPEND,
        cluster_queue=admission.cluster_queue,
        placements=tuple(placements),
        conflict=conflict,
        note=admission_note(admission, decision, at=at),
        resize=tuple(
            Resize(pod_set=ps.name, count=assigned[ps.name].count if ps.name in assigned else ps.count, full=ps.count)
            for ps in workload.pod_sets
            if ps.min_count is not None
        ),
    )


ADMISSION_ANNOTATION = "admitd.io/admission"


def admission_note(admission: Admission, decision: int, *, at: Millis = 0) -> str:
    """The admission as the compact JSON written on the job (annotation `admitd.io/admission`): enough for
    another admitd replica to adopt the running job with its quota (`read_admission_note`). `at`, when it was
    decided, tells a note put back after its admission ended from a current one (`daemon.domain.trust`)."""
    return _NOTE_ENCODER.encode(
        {
            "at": at,
            "clusterQueue": admission.cluster_queue,
            "decision": decision,
            "podSets": [{"name": ps.name, "count": ps.count, "flavors": dict(ps.flavors)} for ps in admission.pod_sets],
        }
    )


# What json.dumps(..., sort_keys=True, separators=(",", ":")) builds anew at each call (a fifth of the fold's cost
# of an admission in the 10,000-job benchmark); the encoder keeps no state between calls.
_NOTE_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def read_admission_note(note: str, workload: Workload) -> Admission | None:
    """The admission a note describes, with its usage from the workload's per-pod requests; None when the note is
    empty, malformed or does not fit the workload (a pod set it does not have)."""
    try:
        raw = json.loads(note)
        pod_sets = {ps.name: ps for ps in workload.pod_sets}
        assignments = []
        for item in raw["podSets"]:
            ps = pod_sets[item["name"]]
            count, flavors = int(item["count"]), {str(k): str(v) for k, v in item["flavors"].items()}
            usage = {res: count * ps.requests[res] for res in flavors if res in ps.requests}
            assignments.append(PodSetAssignment(name=ps.name, count=count, flavors=flavors, usage=usage))
        return Admission(cluster_queue=str(raw["clusterQueue"]), pod_sets=tuple(assignments))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def suspend_order(
    workload: Workload, cluster_queue: str, decision: int, *, reason: str, preemptor: str | None, note: str = ""
) -> Order:
    """The order that carries out a preemption or a drain: suspend, with the original placements restored. `note`:
    the admission the pods run under until they are gone, written as the job's stopping note
    (`daemon.domain.trust.STOPPING_ANNOTATION`)."""
    return Order(
        job=workload.key,
        kind=workload.kind,
        uid=workload.uid,
        decision=decision,
        action=Action.SUSPEND,
        cluster_queue=cluster_queue,
        placements=original_placements(workload),
        reason=reason,
        preemptor=preemptor,
        resize=_as_asked(workload),
        note=note,
    )


def _as_asked(workload: Workload) -> tuple[Resize, ...]:
    """The pod counts the job asked for, restored on suspension (harmless when it ran with all of them)."""
    return tuple(
        Resize(pod_set=ps.name, count=ps.count, full=ps.count) for ps in workload.pod_sets if ps.min_count is not None
    )


def inherited_unsuspensions(outbox: Mapping[str, Order]) -> list[str]:
    """The jobs of a replayed outbox that an unsuspension may be on its way to, sent by the process before this
    one: an unsuspension without a result, or a suspension that replaced one (`Order.supersedes`)."""
    return sorted(key for key, o in outbox.items() if o.action is Action.UNSUSPEND or o.supersedes)
