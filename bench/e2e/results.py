"""The comparison's table in bench/RESULTS.md, between two markers (replaced on each write, the rest untouched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"
SYSTEMS = ("admitd", "kueue", "kueue-tuned")  # the columns, in this order, of those with completed runs
RATIO_HEADS = {"admitd/kueue": "admitd/Kueue", "admitd/kueue-tuned": "admitd/Kueue tuned"}


def markers(setting: str) -> tuple[str, str]:
    """Each setting's block has its own markers, so a later `compare` of one setting leaves the other's block."""
    return f"<!-- e2e:{setting}:begin (written by python -m bench.e2e compare) -->", f"<!-- e2e:{setting}:end -->"


def _fmt(x: object) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
    return str(x)


def gpu_row_get(a: dict[str, Any]) -> Any:
    return a.get("lost_gpu_s")


gpu_row: tuple[str, Any] = ("work lost to preemption, GPU-s", gpu_row_get)


def _rows(per: dict[str, Any], systems: list[str]) -> list[tuple[str, Any]]:
    """(label, getter) of each figure row, for a system's medians and for the ratios alike."""
    rows: list[tuple[str, Any]] = [("makespan, s", lambda a: a["makespan_s"])]
    for klass in per[systems[0]]["mean_tta_s"]:
        rows.append((f"time to admission {klass}, mean s", lambda a, k=klass: a["mean_tta_s"][k]))
        rows.append((f"time to admission {klass}, p90 s", lambda a, k=klass: a["p90_tta_s"][k]))
    rows += [
        ("admissions/s", lambda a: a["admissions_per_s"]),
        ("evictions", lambda a: a["evictions"]),
        ("work lost to preemption, pod-s unsuspended before a re-suspend (upper bound)", lambda a: a.get("lost_pod_s")),
        ("work lost to preemption, share of all pod-s unsuspended", lambda a: a.get("lost_share")),
        ("work lost to preemption, cpu core-s", lambda a: a.get("lost_cpu_core_s")),
        ("scheduler CPU, s", lambda a: a["scheduler_cpu_s"]),
        ("scheduler CPU per Job, ms", lambda a: a.get("scheduler_cpu_ms_per_job")),
        ("scheduler peak RSS, MiB", lambda a: a["scheduler_rss_mib"]),
        ("API requests per Job", lambda a: a["api_requests_per_job"]),
    ]
    groups = sorted({g for s in systems for g in per[s].get("queue_groups") or {}})
    for g in groups:
        rows += [
            (
                f"{g} queues: admissions per minute",
                lambda a, g=g: ((a.get("queue_groups") or {}).get(g) or {}).get("admissions_per_min"),
            ),
            (
                f"{g} queues: longest wait of a pending Job while it fit, s",
                lambda a, g=g: ((a.get("queue_groups") or {}).get(g) or {}).get("fit_wait_max_s"),
            ),
            (
                f"{g} queues: p99 of those waits, s",
                lambda a, g=g: ((a.get("queue_groups") or {}).get(g) or {}).get("fit_wait_p99_s"),
            ),
        ]
    if any(per[s].get("lost_gpu_s") for s in systems):
        rows.insert(rows.index(next(r for r in rows if r[0].endswith("cpu core-s"))) + 1, gpu_row)
    if "none" in per:
        rows.append(
            (
                "API requests per Job caused (minus the no-scheduler baseline)",
                lambda a: a.get("caused_requests_per_job"),
            )
        )
    return rows


def table(result: dict[str, Any], setting: str) -> str:
    """Markdown for one setting: rows are figures, columns admitd, Kueue, Kueue tuned (those that ran) and admitd's
    ratio to each Kueue. Files saved before Kueue tuned and the lost work existed give their old columns, with "—"
    for the figures they did not record."""
    systems_versions = ", ".join(result["versions"]["systems"])
    lines = [
        f"**{setting}**: run {result['date']}: `{result['command']}`; {systems_versions}, Kubernetes "
        f"{result['versions']['kubernetes']}; {result['jobs']} Jobs in {result['cluster_queues']} ClusterQueues "
        f"({result['scale_pct']:g}% of the {result.get('shape', 'baseline')} shape); Jobs created by the "
        f"{result.get('creator', 'python')} creator; "
        + (
            f"finished Jobs deleted {result['ttl_after_finished_s']} s after they finished (ttlSecondsAfterFinished); "
            if result.get("ttl_after_finished_s") is not None
            else ""
        )
        + f"{result['cpus']} cores shared with other work. Medians over the runs; each run on a fresh cluster.",
        "",
    ]
    per = result["summary"][setting]
    for s in SYSTEMS:
        for why in per.get(s, {}).get("failed", []):
            lines += [f"A {s} run failed: {why}", ""]
    if result.get("complete") is False:
        lines += [
            "The comparison was stopped before all its runs were done; the figures are those of the runs done.",
            "",
        ]
    systems = [s for s in SYSTEMS if per.get(s, {}).get("runs")]
    if not systems:
        return "\n".join([*lines, "No completed run at this setting.", ""])
    ratio_keys = [k for k in RATIO_HEADS if per.get(k)]
    head = ["figure", *systems, *(RATIO_HEADS[k] for k in ratio_keys)]
    counts = ", ".join(f"{s} {per[s]['runs']}" for s in systems)
    lines += [f"Completed runs: {counts}.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, get in _rows(per, systems):
        cells = [_fmt(get(per[s])) for s in systems] + [_fmt(get(per[k])) for k in ratio_keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    extra = [
        ("kube-apiserver CPU, s", [_fmt(per[s]["apiserver_cpu_s"]) for s in systems]),
        (
            "kube-apiserver mean time per write, ms (leases aside)",
            [_fmt(per[s].get("apiserver_write_latency_ms")) for s in systems],
        ),
        ("makespans of the runs, s", [", ".join(_fmt(x) for x in per[s]["makespan_s_all"]) for s in systems]),
        (
            "still writing after the last Job completed, s (each run; counted in the requests)",
            [", ".join(_fmt(x) for x in per[s].get("settle_s_all") or ()) for s in systems],
        ),
        (
            "load average (1 min) at start/end of each run",
            [", ".join(f"{a:.1f}/{b:.1f}" for a, b in per[s]["loadavg_1m"]) for s in systems],
        ),
    ]
    if "none" in per:
        base = per["none"]
        extra.insert(
            0,
            (
                f"no-scheduler baseline, API requests per Job (median of {base['runs']})",
                [_fmt(base["api_requests_per_job"]) for _ in systems],
            ),
        )
    for label, cells in extra:
        lines.append(f"| {label} | " + " | ".join([*cells, *("—" for _ in ratio_keys)]) + " |")
    return "\n".join([*lines, ""])


def write_results(result: dict[str, Any], path: Path = RESULTS) -> None:
    text = path.read_text()
    for setting in result["summary"]:
        begin, end = markers(setting)
        block = f"{begin}\n{table(result, setting)}\n{end}"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            text = head + block + rest.split(end, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
