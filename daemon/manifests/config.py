"""admitd's own settings, read from Kueue's Configuration file so that one file serves both.

Only what admitd implements is read (`fairSharing` with its `preemptionStrategies`, `waitForPodsReady`,
`manageJobsWithoutQueueName`, `managedJobsNamespaceSelector`, `featureGates.PartialAdmission` and
`featureGates.VisibilityOnDemand`), and admitd's own `webUI` (`enable`: the web view of `admitd run --ui`); every
other Kueue setting (or feature gate) is reported as ignored, never silently dropped. v1beta1 switches fair sharing
on with `fairSharing.enable: true`; in v1beta2 a `fairSharing` section switches it on by being there, as in Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from daemon.domain.config import EngineConfig
from daemon.domain.fairpreemption import DEFAULT_STRATEGIES, VALID_STRATEGY_SETS
from daemon.domain.management import namespace_labels
from daemon.domain.model import JobManagement, selects
from daemon.domain.podsready import RequeueTimestamp, WaitForPodsReady
from daemon.manifests.core import read_label_selector
from daemon.manifests.durations import DurationError, parse_duration
from daemon.manifests.errors import ManifestError
from daemon.manifests.fields import Reader

CONFIG_GROUP = "config.kueue.x-k8s.io"
_VERSIONS = ("v1beta1", "v1beta2")
_STRATEGIES = DEFAULT_STRATEGIES


def _error(field: str, message: str, source: str) -> ManifestError:
    return ManifestError(message, kind="Configuration", field=field, source=source)


def parse_config(doc: object, source: str = "<config>") -> tuple[EngineConfig, tuple[str, ...]]:
    """The engine settings in one Configuration document, and warnings about settings admitd ignores."""
    if not isinstance(doc, Mapping):
        raise _error("", "expected a Configuration object (a YAML mapping)", source)
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    allowed = ", ".join(f"{CONFIG_GROUP}/{v}" for v in _VERSIONS)
    if kind != "Configuration":
        raise _error("kind", f"must be Configuration, got {kind!r}", source)
    if api_version not in tuple(f"{CONFIG_GROUP}/{v}" for v in _VERSIONS):
        raise _error("apiVersion", f"must be one of {allowed}, got {api_version!r}", source)
    warnings = [
        f"{source}: {name} is a Kueue setting admitd does not implement; ignored"
        for name in sorted(str(k) for k in doc)
        if name not in ("apiVersion", "kind", "fairSharing", "waitForPodsReady", "webUI", *_JOB_SETTINGS)
    ]
    section = doc.get("fairSharing")
    fair = False
    chosen: tuple[str, ...] = DEFAULT_STRATEGIES
    if section is not None:
        if not isinstance(section, Mapping):
            raise _error("fairSharing", f"must be a mapping, got {type(section).__name__}", source)
        enable = section.get("enable")
        if enable is not None and not isinstance(enable, bool):
            raise _error("fairSharing.enable", f"must be true or false, got {enable!r}", source)
        # v1beta1 needs enable: true; in v1beta2 the section's presence is enough (unless it says enable: false).
        fair = bool(enable) if api_version == f"{CONFIG_GROUP}/v1beta1" else enable is not False
        strategies = section.get("preemptionStrategies")
        if strategies is not None:
            if not isinstance(strategies, list) or not all(isinstance(s, str) for s in strategies):
                raise _error("fairSharing.preemptionStrategies", "must be a list of strategy names", source)
            unknown = [s for s in strategies if s not in _STRATEGIES]
            if unknown:
                raise _error(
                    "fairSharing.preemptionStrategies",
                    f"unknown strategy {unknown[0]!r}; allowed: {', '.join(_STRATEGIES)}",
                    source,
                )
            if tuple(strategies) not in VALID_STRATEGY_SETS:
                allowed_sets = "; ".join(f"[{', '.join(v)}]" for v in VALID_STRATEGY_SETS)
                raise _error(
                    "fairSharing.preemptionStrategies",
                    f"[{', '.join(strategies)}] is not one of the lists Kueue accepts: {allowed_sets}",
                    source,
                )
            chosen = tuple(strategies)
        for name in sorted(str(k) for k in section):
            if name not in ("enable", "preemptionStrategies"):
                warnings.append(f"{source}: fairSharing.{name} is not implemented by admitd; ignored")
    pods_ready = _wait_for_pods_ready(doc.get("waitForPodsReady"), str(api_version), source, warnings)
    config = EngineConfig(fair_sharing=fair, fair_sharing_strategies=chosen, wait_for_pods_ready=pods_ready)
    config = replace(
        config,
        jobs=_job_management(doc, source),
        partial_admission=_gate(doc.get("featureGates"), "PartialAdmission", source, warnings),
        visibility_on_demand=_gate(doc.get("featureGates"), "VisibilityOnDemand", source, []),
        web_ui=_web_ui(doc.get("webUI"), source, warnings),
    )
    return config, tuple(warnings)


def _web_ui(section: object, source: str, warnings: list[str]) -> bool:
    """admitd's own `webUI: {enable: BOOL}` (default false): the read-only web view `admitd run --ui` serves. Not a
    Kueue setting (KueueViz is deployed on its own); named in Kueue's style (`fairSharing.enable`)."""
    if section is None:
        return False
    if not isinstance(section, Mapping):
        raise _error("webUI", f"must be a mapping such as {{enable: true}}, got {section!r}", source)
    enable = section.get("enable", False)
    if not isinstance(enable, bool):
        raise _error("webUI.enable", f"must be true or false, got {enable!r}", source)
    for name in sorted(str(k) for k in section):
        if name != "enable":
            warnings.append(f"{source}: webUI.{name} is not a setting of admitd's web view; ignored")
    return enable


_JOB_SETTINGS = ("manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "featureGates")
_PROTECTED_NAMESPACES = ("kube-system", "kueue-system")


def _job_management(doc: Mapping[object, object], source: str) -> JobManagement:
    """`manageJobsWithoutQueueName` (default false) and `managedJobsNamespaceSelector` (default: every namespace but
    kube-system and kueue-system). As Kueue's validation, a selector must leave those two namespaces out."""
    manage = doc.get("manageJobsWithoutQueueName", False)
    if not isinstance(manage, bool):
        raise _error("manageJobsWithoutQueueName", f"must be true or false, got {manage!r}", source)
    raw = doc.get("managedJobsNamespaceSelector")
    if raw is None:
        return JobManagement(without_queue_name=manage)
    r = Reader(kind="Configuration")
    selector = read_label_selector(r, raw, "managedJobsNamespaceSelector")
    if r.errors:
        e = r.errors[0]
        raise _error(e.field, e.message, source)
    if selector is None:
        raise _error("managedJobsNamespaceSelector", "must be a label selector (matchLabels, matchExpressions)", source)
    for name in _PROTECTED_NAMESPACES:
        if selects(selector, namespace_labels(name, None)):
            raise _error(
                "managedJobsNamespaceSelector",
                f'should not match the "{name}" namespace (Kueue refuses such a selector: admitd must never hold '
                "the system's own jobs)",
                source,
            )
    return JobManagement(without_queue_name=manage, namespace_selector=selector)


_GATES = {"PartialAdmission": True, "VisibilityOnDemand": False}
"""Kueue feature gates admitd honours, with their defaults: Kueue's, but for VisibilityOnDemand (on in Kueue), off
because serving it needs the APIService of config/components/visibility."""


def _gate(gates: object, gate: str, source: str, warnings: list[str]) -> bool:
    if gates is None:
        return _GATES[gate]
    if not isinstance(gates, Mapping):
        raise _error("featureGates", f"must be a mapping of feature names to true/false, got {gates!r}", source)
    for name, value in gates.items():
        if not isinstance(value, bool):
            raise _error(f"featureGates.{name}", f"must be true or false, got {value!r}", source)
        if name not in _GATES:
            warnings.append(f"{source}: featureGates.{name} is not a feature gate admitd implements; ignored")
    return bool(gates.get(gate, _GATES[gate]))


_WFPR = "waitForPodsReady"


def _wait_for_pods_ready(
    section: object, api_version: str, source: str, warnings: list[str]
) -> WaitForPodsReady | None:
    """Kueue's `waitForPodsReady` with Kueue's defaults (timeout 5m; blockAdmission true when enabled; requeuing by
    eviction time, backoff 60 s doubling up to 3600 s, no limit). None when absent or not enabled. v1beta1 needs
    `enable: true`; in v1beta2 the section's presence is enough (unless it says enable: false)."""
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise _error(_WFPR, f"must be a mapping, got {type(section).__name__}", source)
    enable = section.get("enable")
    if enable is not None and not isinstance(enable, bool):
        raise _error(f"{_WFPR}.enable", f"must be true or false, got {enable!r}", source)
    enabled = bool(enable) if api_version == f"{CONFIG_GROUP}/v1beta1" else enable is not False
    timeout = 300_000
    raw_timeout = section.get("timeout")
    if raw_timeout is not None:
        if not isinstance(raw_timeout, str):
            raise _error(f"{_WFPR}.timeout", f"must be a duration such as 5m or 90s, got {raw_timeout!r}", source)
        try:
            timeout = parse_duration(raw_timeout)
        except DurationError as e:
            raise _error(f"{_WFPR}.timeout", str(e), source) from e
        if timeout <= 0:
            raise _error(f"{_WFPR}.timeout", f"must be longer than 0, got {raw_timeout!r}", source)
    block = section.get("blockAdmission")
    if block is not None and not isinstance(block, bool):
        raise _error(f"{_WFPR}.blockAdmission", f"must be true or false, got {block!r}", source)
    for name in sorted(str(k) for k in section):
        if name == "recoveryTimeout":
            warnings.append(
                f"{source}: {_WFPR}.recoveryTimeout is not implemented by admitd (a workload whose pods were ready "
                "once is never timed out again); ignored"
            )
        elif name not in ("enable", "timeout", "blockAdmission", "requeuingStrategy"):
            warnings.append(f"{source}: {_WFPR}.{name} is not implemented by admitd; ignored")
    strategy = section.get("requeuingStrategy")
    if strategy is None:
        strategy = {}
    if not isinstance(strategy, Mapping):
        raise _error(f"{_WFPR}.requeuingStrategy", f"must be a mapping, got {type(strategy).__name__}", source)
    stamp = strategy.get("timestamp", RequeueTimestamp.EVICTION.value)
    allowed = [t.value for t in RequeueTimestamp]
    if stamp not in allowed:
        raise _error(
            f"{_WFPR}.requeuingStrategy.timestamp", f"must be one of {', '.join(allowed)}, got {stamp!r}", source
        )
    numbers: dict[str, int | None] = {"backoffLimitCount": None, "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600}
    for name in numbers:
        value = strategy.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > 2**31 - 1:
            what = f"must be a whole number from 0 to 2147483647, got {value!r}"
            raise _error(f"{_WFPR}.requeuingStrategy.{name}", what, source)
        numbers[name] = value
    for name in sorted(str(k) for k in strategy):
        if name not in ("timestamp", *numbers):
            warnings.append(f"{source}: {_WFPR}.requeuingStrategy.{name} is not implemented by admitd; ignored")
    if not enabled:
        return None
    base, cap = numbers["backoffBaseSeconds"], numbers["backoffMaxSeconds"]
    assert base is not None and cap is not None
    return WaitForPodsReady(
        timeout=timeout,
        block_admission=True if block is None else block,
        requeue_timestamp=RequeueTimestamp(stamp),
        backoff_limit_count=numbers["backoffLimitCount"],
        backoff_base_seconds=base,
        backoff_max_seconds=cap,
    )


def load_config(path: Path | str) -> tuple[EngineConfig, tuple[str, ...]]:
    """Read a Configuration file. Raises ManifestError (unreadable file, bad YAML, bad field) naming the file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError(f"cannot read: {e.strerror or e}", kind="Configuration", source=source) from e
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        what = ", ".join(str(p) for p in (getattr(e, "context", None), getattr(e, "problem", None)) if p) or str(e)
        raise ManifestError(f"invalid YAML: {what}", kind="Configuration", source=source, line=line) from e
    return parse_config(doc, source)
