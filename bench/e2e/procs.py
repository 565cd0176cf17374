"""Per-process CPU seconds and peak RSS from /proc, and the API server's request counter from its /metrics."""

from __future__ import annotations

import os
import re
import ssl
import urllib.request
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` so far (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"/proc/{pid}/status has no VmHWM line")


_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_counts(metrics_text: str) -> Counter[str]:
    """apiserver_request_total by "VERB group/resource[/subresource]" from a Prometheus text exposition."""
    out: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        resource = "/".join(x for x in (labels.get("group", ""), labels.get("resource", "")) if x) or "-"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        out[f"{labels.get('verb', '?')} {resource}"] += int(float(m.group("value")))
    return out


_DURATION = re.compile(
    r"^apiserver_request_duration_seconds_(?P<what>sum|count)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$"
)
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE"})


def write_latency(metrics_text: str) -> tuple[float, float]:
    """(seconds, requests) of apiserver_request_duration_seconds over the writes (POST, PUT, PATCH, APPLY, DELETE),
    leases aside: two scrapes' difference is the mean time the API server took for a write in between."""
    total = {"sum": 0.0, "count": 0.0}
    for line in metrics_text.splitlines():
        m = _DURATION.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("verb") not in WRITE_VERBS or labels.get("resource") == "leases":
            continue
        total[m.group("what")] += float(m.group("value"))
    return total["sum"], total["count"]


def _metrics(apiserver_url: str, pki: Path) -> str:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(f"{apiserver_url}/metrics", context=ctx, timeout=30) as resp:
        return resp.read().decode()


def scrape_requests(apiserver_url: str, pki: Path) -> Counter[str]:
    """The API server's own request counter, read with the admin client certificate."""
    return request_counts(_metrics(apiserver_url, pki))


def scrape_write_latency(apiserver_url: str, pki: Path) -> tuple[float, float]:
    """write_latency of the API server's metrics now."""
    return write_latency(_metrics(apiserver_url, pki))
