"""A running `admitd run`'s /metrics on the real local control plane (marker `cluster`): the live instruments move
as it works (admission attempts and their duration, append and commit latency, the leader gauge, the start-up
replay) next to the figures folded from its log, and a real Prometheus text parser accepts the whole page.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, job, running_daemon, wait_for
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, running

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(crds, tmp_path) as d:
        yield d


def scrape(daemon: Daemon) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.health_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(got: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in got.items() if n == name and want <= set(lab))


def test_a_running_daemons_metrics_show_the_live_instruments_moving(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns = namespace
    before = scrape(daemon)
    assert total(before, "admitd_leader") == 1.0  # no leader election: it leads from the start
    assert ("admitd_replay_duration_seconds", ()) in before
    apply(crds, flavor(f"h100-{ns}", **{"gpu-type": "h100"}), cluster_queue(f"cq-{ns}", f"h100-{ns}", 4))
    apply(crds, local_queue(ns, "q", f"cq-{ns}"), job(ns, "fits", queue="q", gpus=4, runtime="1h"))
    apply(crds, job(ns, "waits", queue="q", gpus=4, runtime="1h"))
    wait_for("the first job to run", lambda: running(crds, ns, "fits"))

    def moved() -> bool:
        now = scrape(daemon)
        return (
            total(now, "kueue_admission_attempts_total", result="success")
            > total(before, "kueue_admission_attempts_total", result="success")
            and total(now, "kueue_pending_workloads", cluster_queue=f"cq-{ns}") == 1
        )

    wait_for("the scrape to show the admission", moved)
    after = scrape(daemon)
    for name in ("admitd_append_latency_seconds_count", "admitd_commit_latency_seconds_count"):
        assert total(after, name) > total(before, name), name
    assert total(after, "admitd_commit_latency_seconds_sum") > 0
    assert total(after, "kueue_admission_attempt_duration_seconds_count", result="success") >= 1
    assert total(after, "kueue_admitted_active_workloads", cluster_queue=f"cq-{ns}") == 1
    assert total(after, "admitd_append_failures_total") == 0
    assert total(after, "admitd_leader") == 1.0
