"""The dry run's answer (`admitd simulate --against LOG|--server URL -f JOB.yaml`): would each job be admitted now,
when, or never, and what would it preempt, on a state and the runtimes recorded up to it; nothing is written. The
pure `daemon.domain.eta.dry_run` does the work; this module reads the jobs and shapes the answer, for the CLI on a
file (`daemon.sim.dryrun_cli`) and the daemon on its live state (`daemon.answers`), which answer alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from daemon.domain.durations import format_seconds
from daemon.domain.eta import DryRun, Durations, dry_run
from daemon.domain.management import default_queue_exists, manage_new_job, namespace_managed
from daemon.domain.model import JobManagement, Workload
from daemon.domain.state import State
from daemon.manifests import ManifestError, adapter_for, parse_documents
from daemon.manifests.fields import printable
from daemon.query.moment import VIRTUAL_BEFORE_MS

QUANTILES = (0.5, 0.9)


def _shower(first_ms: int) -> Callable[[int | None], str | None]:
    """Times as `admitd explain` shows them: offsets on a simulated log, RFC 3339 UTC on a real one."""
    virtual = first_ms < VIRTUAL_BEFORE_MS

    def show(ms: int | None) -> str | None:
        if ms is None:
            return None
        if virtual:
            return ("-" if ms < 0 else "+") + format_seconds(abs(ms))
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    return show


def _json(d: DryRun, show: Any, now: int) -> dict[str, Any]:
    a = d.admitted_now
    return {
        "job": d.workload,
        "admitted_now": a is not None,
        "admission": None
        if a is None
        else {"cluster_queue": a.cluster_queue, "flavors": {ps.name: dict(ps.flavors) for ps in a.pod_sets}},
        "would_preempt": list(d.would_preempt),
        "reason": None if d.reason is None else {"kind": d.reason.kind.value, "message": d.reason.message},
        "never": d.never,
        "p50": show(d.starts.get(0.5)),
        "p90": show(d.starts.get(0.9)),
        "p50_in_seconds": None if d.starts.get(0.5) is None else (d.starts[0.5] - now) / 1000,  # type: ignore[operator]
        "p90_in_seconds": None if d.starts.get(0.9) is None else (d.starts[0.9] - now) / 1000,  # type: ignore[operator]
    }


def _text(r: dict[str, Any]) -> str:
    victims = f", preempting {', '.join(r['would_preempt'])}" if r["would_preempt"] else ""
    if r["admitted_now"]:
        flavors = "; ".join(
            f"{name}: " + ", ".join(f"{res} in {fl}" for res, fl in sorted(f.items()))
            for name, f in r["admission"]["flavors"].items()
        )
        return (
            f"{r['job']}: would be admitted now to ClusterQueue {r['admission']['cluster_queue']} ({flavors}){victims}"
        )
    reason = f"{r['reason']['kind']}: {r['reason']['message']}" if r["reason"] else "not assessed"
    if r["never"]:
        return f"{r['job']}: would never be admitted: {reason}"

    def when(q: str) -> str:
        if r[q] is None:
            return "unknown"
        seconds = r[q + "_in_seconds"]
        return f"{r[q]} ({'now' if seconds <= 0 else f'in {seconds:g}s'})"

    return f"{r['job']}: would wait: {reason}{victims}\n  estimated start: p50 {when('p50')}, p90 {when('p90')}"


class DryRunError(Exception):
    """A dry run that cannot be answered (bad input): its message, one line."""


def jobs_of(text: str, source: str, state: State) -> tuple[list[Workload], list[str]]:
    """The jobs of JOB.yaml's `text` that admitd would manage, as it would queue them in `state` (a job without a
    queue name goes to its namespace's LocalQueue `default` when the state has one: Kueue's default management),
    and the problems of the documents left out. DryRunError when it is not YAML, or no job is left."""
    try:
        docs = parse_documents(text, source=source)
    except ManifestError as e:
        raise DryRunError(str(e)) from None
    manages = JobManagement()
    jobs: list[Workload] = []
    problems: list[str] = []
    for parsed in docs:
        if parsed.errors:
            problems += [printable(f"{source}: document {parsed.doc_index + 1}: {e}") for e in parsed.errors]
            continue
        if parsed.raw_job is None or parsed.workload is None or adapter_for(parsed.api_version, parsed.kind) is None:
            continue
        ns = parsed.namespace or "default"
        managed = manage_new_job(
            manages,
            parsed.workload.queue_name,
            namespace_selected=namespace_managed(manages, ns, state.namespaces.get(ns)),
            default_queue=default_queue_exists(state.local_queues, ns),
        )
        if managed is not None:
            jobs.append(replace(parsed.workload, uid=f"dry-run-{parsed.doc_index}", queue_name=managed.queue_name))
    if not jobs:
        raise DryRunError(
            f"{source}: no Job admitd would manage (a kueue.x-k8s.io/queue-name label)"
            + (f": {'; '.join(problems)}" if problems else "")
        )
    return jobs, problems


def answer(state: State, durations: Durations, first_ms: int, now: int, jobs: list[Workload]) -> dict[str, Any]:
    """The `--json` body: each job of `jobs` tried on its own on `state` at `now` (the log's last event)."""
    show = _shower(first_ms)
    results = []
    for job in jobs:
        wl = replace(job, created_at=now)
        if wl.key in state.workloads:
            raise DryRunError(f"{wl.key}: the log already has a live job of that name")
        results.append(_json(dry_run(state, now, durations, wl, QUANTILES), show, now))
    clock = "virtual" if first_ms < VIRTUAL_BEFORE_MS else "wall"
    return {"now": show(now), "clock": clock, "jobs": results}


def text(body: dict[str, Any]) -> str:
    return "\n".join(_text(r) for r in body["jobs"])
