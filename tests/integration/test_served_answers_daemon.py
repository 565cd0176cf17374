"""`admitd run` serves its answers (`/answers/v1/...`) from its live state: on the health port, and under
`--metrics-auth` on its HTTPS port only to callers the API server authenticates and RBAC allows.

Real: the local control plane (marker `cluster`), `admitd run` as a process, Jobs run by kwok, ServiceAccount
tokens the API server issues, RBAC from config/rbac/answers_reader_role.yaml, the CLI on the daemon's file. Faked:
nothing. (These files are named to run after test_crds.py, which needs CRDs that no daemon has pointed at
itself yet.)
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import (
    apply,
    install_crds,
    job,
    kubectl,
    running_daemon,
    wait_for,
)
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, running

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def get(url: str, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=20, context=context) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode()


def cli(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args, "--json"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    return body


def one_running_one_waiting(cluster: KubeCluster, ns: str, cq: str) -> None:
    apply(
        cluster,
        flavor(f"{cq}-gpu"),
        cluster_queue(cq, f"{cq}-gpu", 4),
        local_queue(ns, "q", cq),
        job(ns, "first", queue="q", gpus=4, runtime="1h"),
    )
    wait_for("the first job to run", lambda: running(cluster, ns, "first"))
    apply(cluster, job(ns, "second", queue="q", gpus=4, runtime="1h"))


def cleanup(cluster: KubeCluster, ns: str, cq: str) -> None:
    kubectl(cluster, "delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)
    kubectl(cluster, "delete", "clusterqueue", cq, "--wait=false", check=False)
    kubectl(cluster, "delete", "resourceflavor", f"{cq}-gpu", "--wait=false", check=False)


def test_the_daemon_answers_from_its_live_state_as_the_cli_on_its_file(
    crds: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    ns, cq = namespace, f"answers-{namespace}"
    try:
        with running_daemon(crds, tmp_path) as d:
            one_running_one_waiting(crds, ns, cq)
            base = f"http://127.0.0.1:{d.health_port}/answers/v1"

            def second_waits() -> bool:
                status, body = get(f"{base}/pending?queue={cq}")
                rows = body["cluster_queues"].get(cq, []) if status == 200 else []
                return [r["job"] for r in rows] == [f"{ns}/second"] and rows[0]["reason"] is not None

            wait_for("the second job to wait with a reason", second_waits)
            status, pending = get(f"{base}/pending?queue={cq}")
            assert status == 200
            (row,) = pending["cluster_queues"][cq]
            assert (row["position"], row["local_queue_position"], row["reason"]) == (0, 0, "WaitingForQuota")
            on_file = cli("pending", "--queue", cq, "--db", str(d.db))
            assert pending["cluster_queues"] == on_file["cluster_queues"]

            status, x = get(f"{base}/explain/{ns}/second")
            assert status == 200 and (x["status"], x["verdict"]) == ("pending", "waiting")
            file_x = cli("explain", f"{ns}/second", "--db", str(d.db))
            assert {k: v for k, v in x.items() if k != "at"} == {k: v for k, v in file_x.items() if k != "at"}

            status, qs = get(f"{base}/queues")
            (mine,) = [q for q in qs["cluster_queues"] if q["name"] == cq]
            assert (mine["pending"], mine["admitted"], mine["resources"][0]["used"]) == (1, 1, "4")

            status, h = get(f"{base}/history/{ns}/first")
            assert status == 200 and h["status"] == "running"
            kinds = [e["kind"] for e in h["events"]]
            assert kinds[0] == "observed" and "admitted" in kinds, kinds

            status, err = get(f"{base}/explain/{ns}/nobody")
            assert status == 404 and err["error"]["parameter"] == "job"

            # Now is now: a running job's time runs to the present, over HTTP and in the CLI on the live file.
            admitted_ms = next(
                e["recorded_at"]
                for e in d.events()
                if e["type"] == "workload.admitted" and e["subject"] == f"job/{ns}/first"
            )
            wait_for("3 s of running", lambda: time.time() * 1000 - admitted_ms > 3000, timeout=10)
            status, h = get(f"{base}/history/{ns}/first")
            since = time.time() - admitted_ms / 1000
            assert since - 2 <= h["running_seconds"] <= since, (h["running_seconds"], since)
            on_file = cli("history", f"{ns}/first", "--db", str(d.db))
            assert since - 2 <= on_file["running_seconds"] <= time.time() - admitted_ms / 1000
            status, x = get(f"{base}/explain/{ns}/first")
            assert abs(rfc3339_ms(x["at"]["time"]) - time.time() * 1000) < 2000, x["at"]
            assert (
                abs(rfc3339_ms(cli("explain", f"{ns}/first", "--db", str(d.db))["at"]["time"]) - time.time() * 1000)
                < 2000
            )
        # A log nobody writes any more ends at its last event: the run is measured to it, not to now.
        last_ms = d.events()[-1]["recorded_at"]
        stopped = cli("history", f"{ns}/first", "--db", str(d.db))
        assert stopped["status"] == "running"
        assert stopped["running_seconds"] == (last_ms - admitted_ms) / 1000
    finally:
        cleanup(crds, ns, cq)  # after the daemon stopped: its log keeps the first job running


def rfc3339_ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def test_under_metrics_auth_the_answers_need_a_token_rbac_allows(
    crds: KubeCluster, tmp_path: Path, namespace: str
) -> None:
    ns = namespace
    kubectl(crds, "apply", "-f", str(REPO / "config" / "rbac" / "answers_reader_role.yaml"))
    for sa in ("oncall", "nosy"):
        kubectl(crds, "create", "serviceaccount", sa, "-n", ns)
    binding = f"oncall-{ns}"
    kubectl(
        crds,
        "create",
        "clusterrolebinding",
        binding,
        "--clusterrole=admitd-answers-reader",
        f"--serviceaccount={ns}:oncall",
    )
    try:
        with running_daemon(crds, tmp_path, "--metrics-auth") as d:
            oncall = kubectl(crds, "create", "token", "oncall", "-n", ns).strip()
            nosy = kubectl(crds, "create", "token", "nosy", "-n", ns).strip()
            url = f"https://127.0.0.1:{d.webhook_port}/answers/v1/queues"
            status, body = get(url, context=insecure())
            assert status == 401 and "a bearer token is required" in body["error"]["message"]
            status, body = get(url, nosy, insecure())
            assert status == 403 and "may not get /answers/v1/queues" in body["error"]["message"]
            status, body = get(url, oncall, insecure())
            assert status == 200 and "cluster_queues" in body
            status, body = get(f"https://127.0.0.1:{d.webhook_port}/answers/v1/explain/{ns}/nobody", oncall, insecure())
            assert status == 404 and body["error"]["parameter"] == "job"
            # Not on the plain health port.
            assert get(f"http://127.0.0.1:{d.health_port}/answers/v1/queues")[0] == 404
    finally:
        kubectl(crds, "delete", "clusterrolebinding", binding, "--ignore-not-found")
