"""`admitd run --ui` serves the web view on its health port, from its live state, and shows each viewer what RBAC
allows: the queues' figures to who may list ClusterQueues, a namespace's jobs to who may get its Workloads.

Real: the local control plane (marker `cluster`), `admitd run` as a process, Jobs run by kwok, ServiceAccount
tokens the API server issues and checks (TokenReview), RBAC's answers (SubjectAccessReview) from Kueue's user
roles (config/rbac/user_roles.yaml). Faked: nothing. (Named to run after test_crds.py, as the other daemon tests.)
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import install_crds, kubectl, running_daemon, wait_for
from tests.integration.test_served_answers_daemon import cleanup, one_running_one_waiting

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def page(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_web_view_shows_each_viewer_what_rbac_allows(crds: KubeCluster, tmp_path: Path, namespace: str) -> None:
    ns, cq = namespace, f"web-{namespace}"
    kubectl(crds, "apply", "-f", str(REPO / "config" / "rbac" / "user_roles.yaml"))
    for sa in ("oncall", "queues-only", "nosy"):
        kubectl(crds, "create", "serviceaccount", sa, "-n", ns)
    bindings = [f"web-oncall-{ns}", f"web-queues-{ns}"]
    for name, sa in zip(bindings, ("oncall", "queues-only"), strict=True):
        kubectl(
            crds,
            "create",
            "clusterrolebinding",
            name,
            "--clusterrole=kueue-clusterqueue-viewer-role",
            f"--serviceaccount={ns}:{sa}",
        )
    kubectl(
        crds, "create", "rolebinding", "web-workloads", "-n", ns,
        "--clusterrole=kueue-workload-viewer-role", f"--serviceaccount={ns}:oncall",
    )  # fmt: skip
    try:
        with running_daemon(crds, tmp_path, "--ui", "--ui-past-memory", "64") as d:
            one_running_one_waiting(crds, ns, cq)
            token = {
                sa: kubectl(crds, "create", "token", sa, "-n", ns).strip() for sa in ("oncall", "queues-only", "nosy")
            }
            base = f"http://127.0.0.1:{d.health_port}/ui"

            def second_waits() -> bool:
                status, html = page(f"{base}/clusterqueue/{cq}", token["oncall"])
                return status == 200 and f'data-job="{ns}/second"' in html and "WaitingForQuota" in html

            wait_for("the second job to wait, on the ClusterQueue's page", second_waits)
            # A past moment (now, as a time: the page is built as of the log's seq then, from the daemon's timeline).
            then = urllib.parse.quote(datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"))
            time.sleep(0.05)
            status, html = page(f"{base}/job/{ns}/second?at={then}", token["oncall"])
            assert status == 200 and 'id="job-reason">WaitingForQuota<' in html, html[-2000:]
            status, html = page(f"{base}/clusterqueue/{cq}?at={then}", token["oncall"])
            assert status == 200 and f'data-job="{ns}/second"' in html
            status, html = page(f"{base}/clusterqueue/{cq}", token["queues-only"])
            assert status == 200 and f"{ns}/second" not in html and "a job in a namespace you may not see" in html
            status, html = page(f"{base}/", token["oncall"])
            assert status == 200 and f'href="/ui/clusterqueue/{cq}"' in html
            status, html = page(f"{base}/job/{ns}/second", token["oncall"])
            assert status == 200 and 'id="job-reason">WaitingForQuota<' in html
            assert page(f"{base}/job/{ns}/second", token["queues-only"])[0] == 403
            assert page(f"{base}/", token["nosy"])[0] == 403
            status, html = page(f"{base}/")
            assert status == 401 and 'id="login"' in html
            assert page(f"{base}/", "not-a-token")[0] == 401
    finally:
        cleanup(crds, ns, cq)
        for name in bindings:
            kubectl(crds, "delete", "clusterrolebinding", name, "--ignore-not-found")
