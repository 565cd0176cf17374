"""Kubernetes' own objects at the border: v1 Namespace, scheduling.k8s.io/v1 PriorityClass, and the core pieces
Kueue objects and jobs embed (label selectors, taints, tolerations), checked as the apiserver checks them.
"""

from __future__ import annotations

from collections.abc import Mapping

from daemon.domain.model import LabelRequirement, LabelSelector, Namespace, PriorityClass, Taint, Toleration
from daemon.manifests.fields import (
    INT32_MAX,
    INT32_MIN,
    MAX_ANNOTATIONS_BYTES,
    Reader,
    at,
    index,
    label_value,
    qualified_name,
)

__all__ = [
    "TAINT_EFFECTS",
    "parse_namespace",
    "parse_priority_class",
    "read_annotations",
    "read_label_selector",
    "read_labels",
    "read_taints",
    "read_tolerations",
]

TAINT_EFFECTS = {"NoSchedule": "NoSchedule", "PreferNoSchedule": "PreferNoSchedule", "NoExecute": "NoExecute"}
_TOLERATION_OPERATORS = {"Equal": "Equal", "Exists": "Exists"}
_SELECTOR_OPERATORS = {"In": "In", "NotIn": "NotIn", "Exists": "Exists", "DoesNotExist": "DoesNotExist"}

# scheduling.k8s.io: user-defined PriorityClasses may not go above this; only the built-in system-* ones do.
_HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


def read_labels(r: Reader, meta: Mapping[str, object]) -> dict[str, str]:
    """`metadata.labels`, checked as the apiserver checks them (ValidateLabels): qualified-name keys, values of at
    most 63 characters in the label-value syntax."""
    return r.string_map(meta.get("labels"), "metadata.labels", key_syntax=qualified_name, value_syntax=label_value)


def read_annotations(r: Reader, meta: Mapping[str, object]) -> dict[str, str]:
    """`metadata.annotations` (ValidateAnnotations): qualified-name keys, string values, and at most 256 KiB of
    keys and values together."""
    annotations = r.string_map(meta.get("annotations"), "metadata.annotations", key_syntax=qualified_name)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        r.error("metadata.annotations", f"may not have more than {MAX_ANNOTATIONS_BYTES} bytes in all (got {size})")
    return annotations


def read_label_selector(r: Reader, value: object, path: str) -> LabelSelector | None:
    """A metav1.LabelSelector. Absent or null is None (for a ClusterQueue: no namespace); ``{}`` matches all."""
    m = r.mapping(value, path, known=("matchLabels", "matchExpressions"))
    if m is None:
        return None
    labels = r.string_map(
        m.get("matchLabels"), at(path, "matchLabels"), key_syntax=qualified_name, value_syntax=label_value
    )
    requirements: list[LabelRequirement] = []
    exprs_path = at(path, "matchExpressions")
    for i, item in enumerate(r.sequence(m.get("matchExpressions"), exprs_path) or ()):
        p = index(exprs_path, i)
        e = r.mapping(item, p, required=True, known=("key", "operator", "values"))
        if e is None:
            continue
        k = r.string(e.get("key"), at(p, "key"), required=True, syntax=qualified_name)
        op = r.enum(e.get("operator"), at(p, "operator"), _SELECTOR_OPERATORS)
        if op is None and not e.get("operator"):
            r.error(at(p, "operator"), f"required (allowed: {', '.join(_SELECTOR_OPERATORS)})")
        values = r.strings(e.get("values"), at(p, "values"), syntax=label_value) or []
        # ValidateLabelSelectorRequirement: set operators need values, existence operators forbid them.
        if op in ("In", "NotIn") and not values:
            r.error(at(p, "values"), f"must be specified when operator is {op}")
        elif op in ("Exists", "DoesNotExist") and values:
            r.error(at(p, "values"), f"may not be specified when operator is {op}")
        if k is not None and op is not None and all(v is not None for v in values):
            requirements.append(LabelRequirement(key=k, operator=op, values=tuple(v for v in values if v is not None)))
    return LabelSelector(match_labels=labels, match_expressions=tuple(requirements))


def read_taints(r: Reader, value: object, path: str, *, max_items: int | None = None) -> tuple[Taint, ...]:
    """Node taints, as ResourceFlavor.spec.nodeTaints: effect required, unique by (key, effect)."""
    taints: list[Taint] = []
    first_at: dict[tuple[str, str], str] = {}
    for i, item in enumerate(r.sequence(value, path, max_items=max_items) or ()):
        p = index(path, i)
        t = r.mapping(item, p, required=True, known=("key", "value", "effect", "timeAdded"))
        if t is None:
            continue
        k = r.string(t.get("key"), at(p, "key"), required=True, syntax=qualified_name)
        v = r.string(t.get("value"), at(p, "value"), syntax=label_value)
        effect = r.enum(t.get("effect"), at(p, "effect"), TAINT_EFFECTS)
        if effect is None and not t.get("effect"):
            r.error(at(p, "effect"), f"required (allowed: {', '.join(TAINT_EFFECTS)})")
        if k is None or effect is None:
            continue
        if (k, effect) in first_at:
            r.error(
                p,
                f"duplicate taint {k}:{effect} (already at {first_at[(k, effect)]}); "
                "taints must be unique by key and effect",
            )
            continue
        first_at[(k, effect)] = p
        taints.append(Taint(key=k, value=v or "", effect=effect))
    return tuple(taints)


def read_tolerations(r: Reader, value: object, path: str, *, max_items: int | None = None) -> tuple[Toleration, ...]:
    """Tolerations, with the rules Kueue's ResourceFlavor CRD and the apiserver's pod validation share."""
    out: list[Toleration] = []
    for i, item in enumerate(r.sequence(value, path, max_items=max_items) or ()):
        p = index(path, i)
        t = r.mapping(item, p, required=True, known=("key", "operator", "value", "effect", "tolerationSeconds"))
        if t is None:
            continue
        before = len(r.errors)
        k = r.string(t.get("key"), at(p, "key"), syntax=qualified_name) or ""
        op = r.enum(t.get("operator"), at(p, "operator"), _TOLERATION_OPERATORS) or "Equal"
        v = r.string(t.get("value"), at(p, "value"), syntax=label_value) or ""
        effect = r.enum(t.get("effect"), at(p, "effect"), TAINT_EFFECTS) or ""
        seconds = r.integer(t.get("tolerationSeconds"), at(p, "tolerationSeconds"))
        if not k and op != "Exists":
            r.error(at(p, "operator"), f"must be Exists when key is empty (got {op})")
        if op == "Exists" and v:
            r.error(at(p, "value"), f"must be empty when operator is Exists (got {v!r})")
        if seconds is not None and effect != "NoExecute":
            r.error(at(p, "effect"), f"must be NoExecute when tolerationSeconds is set (got {effect or 'empty'})")
        if len(r.errors) == before:
            out.append(Toleration(key=k, operator=op, value=v, effect=effect))
    return tuple(out)


def parse_namespace(r: Reader, doc: Mapping[str, object]) -> Namespace:
    meta = r.mapping(doc.get("metadata"), "metadata") or {}
    return Namespace(name=r.name, labels=read_labels(r, meta))


def parse_priority_class(r: Reader, doc: Mapping[str, object], *, kind: str) -> PriorityClass | None:
    """A WorkloadPriorityClass (kueue.x-k8s.io) or a PriorityClass (scheduling.k8s.io): both carry a top-level
    int32 `value`; only the core one has `globalDefault` and the user-definable ceiling."""
    value = r.integer(doc.get("value"), "value", required=True, minimum=INT32_MIN, maximum=INT32_MAX)
    r.string(doc.get("description"), "description")
    global_default = False
    if kind == "PriorityClass":
        global_default = r.boolean(doc.get("globalDefault"), "globalDefault") or False
        r.enum(
            doc.get("preemptionPolicy"),
            "preemptionPolicy",
            {"PreemptLowerPriority": "PreemptLowerPriority", "Never": "Never"},
        )
        if value is not None and value > _HIGHEST_USER_DEFINABLE_PRIORITY and not r.name.startswith("system-"):
            r.error(
                "value",
                f"must be at most {_HIGHEST_USER_DEFINABLE_PRIORITY} (got {value}); "
                "higher values are reserved for system-* classes",
            )
            return None
    if value is None:
        return None
    return PriorityClass(name=r.name, value=value, kind=kind, global_default=global_default)
