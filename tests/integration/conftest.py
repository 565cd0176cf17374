"""Fixtures for the integration layer: a real local Kubernetes control plane.

`kube_cluster` (session) reuses the cluster that `scripts/local-cluster up` left running, or builds
and starts one and stops it when the session ends. Tests that use it get the `cluster` marker, so
`pytest -m "not cluster"` runs without Go, etcd or Kubernetes. See tests/cluster/README.md.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio import config as kube_config

REPO = Path(__file__).resolve().parents[2]
LOCAL_CLUSTER = REPO / "scripts" / "local-cluster"
STATE_DIR = Path(os.environ.get("LOCAL_CLUSTER_STATE_DIR", REPO / ".local-cluster")).resolve()
CLUSTER_MARK = "cluster"


@dataclass(frozen=True)
class KubeCluster:
    """A running local control plane: etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler, and kwok playing the kubelets of 8 fake GPU nodes."""

    kubeconfig: Path  # admin (system:masters) kubeconfig
    state_dir: Path  # certificates (pki/), component logs (logs/), etcd data
    apiserver_url: str
    etcd_url: str  # plain HTTP on 127.0.0.1; etcd's JSON gateway is at /v3/...
    started_here: bool  # this session started it, and stops it at the end

    @property
    def script(self) -> Path:
        return LOCAL_CLUSTER

    @property
    def bin_dir(self) -> Path:
        return REPO / "tests" / "cluster" / "bin"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    def logs(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"

    def etcd_revision(self) -> int:
        """etcd's current revision (the newest resourceVersion in the cluster)."""
        header = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})["header"]
        return int(header["revision"])

    def compact_etcd(self) -> int:
        """Compacts etcd's history up to its current revision, as the apiserver's periodic
        compaction would; returns that revision. Older resourceVersions are gone for good."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, object] = json.loads(response.read())
            return result


class LocalClusterError(Exception):
    pass


def _local_cluster(config: pytest.Config, command: str) -> subprocess.CompletedProcess[str]:
    """Runs scripts/local-cluster with its progress (a first build takes minutes) shown live."""
    argv = [str(LOCAL_CLUSTER), command, "--state-dir", str(STATE_DIR)]
    if command == "status":
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    # The script's progress starts on a line of its own (after "[100%]" when stopping).
    if reporter is not None and command == "down":
        reporter.write("\n")
    elif reporter is not None:
        reporter.ensure_newline()
    with capture.global_and_fixture_disabled():
        result = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise LocalClusterError(f"scripts/local-cluster {command} failed (exit {result.returncode})")
    return result


_CLUSTER_KEY = pytest.StashKey[KubeCluster]()
_ERROR_KEY = pytest.StashKey[str]()


def _ensure_cluster(config: pytest.Config) -> KubeCluster:
    """Starts the cluster once per session (memoised on the config); a failure is remembered,
    so every cluster test reports it instead of retrying a broken start."""
    if _CLUSTER_KEY in config.stash:
        return config.stash[_CLUSTER_KEY]
    if _ERROR_KEY in config.stash:
        pytest.fail(config.stash[_ERROR_KEY], pytrace=False)
    try:
        running = _local_cluster(config, "status").returncode == 0
        if not running:
            _local_cluster(config, "up")
        state = json.loads((STATE_DIR / "state.json").read_text())
    except (LocalClusterError, OSError, ValueError) as err:
        config.stash[_ERROR_KEY] = f"local Kubernetes control plane unavailable: {err}"
        pytest.fail(config.stash[_ERROR_KEY], pytrace=False)
    cluster = KubeCluster(
        kubeconfig=Path(state["kubeconfig"]),
        state_dir=STATE_DIR,
        apiserver_url=state["apiserver_url"],
        etcd_url=state["etcd_url"],
        started_here=not running,
    )
    config.stash[_CLUSTER_KEY] = cluster
    return cluster


def pytest_configure(config: pytest.Config) -> None:
    # Also registered in pyproject.toml; repeated here so this layer stands on its own.
    config.addinivalue_line("markers", f"{CLUSTER_MARK}: needs the local Kubernetes control plane (tests/cluster)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so the mark added here counts
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(CLUSTER_MARK)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Build and start before the first test, so neither counts against a test's timeout.
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker(CLUSTER_MARK) for item in session.items):
        # A failure is remembered; each cluster test then fails with its message.
        with contextlib.suppress(pytest.fail.Exception):
            _ensure_cluster(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Here rather than in the fixture's teardown: not charged to the last test's timeout, and
    # done before pytest prints its summary, which stays the last thing in the output.
    cluster = session.config.stash.get(_CLUSTER_KEY, None)
    if cluster is not None and cluster.started_here:
        del session.config.stash[_CLUSTER_KEY]
        try:
            _local_cluster(session.config, "down")
        except LocalClusterError as err:
            reporter = session.config.pluginmanager.getplugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"error: {err}; processes may be left: see {STATE_DIR}/state.json")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def kube_cluster(pytestconfig: pytest.Config) -> KubeCluster:
    return _ensure_cluster(pytestconfig)


@pytest.fixture
async def kube_api(kube_cluster: KubeCluster) -> AsyncIterator[client.ApiClient]:
    """An admin API client for one test (kubernetes_asyncio clients are bound to a loop)."""
    api = await kube_config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    async with api:
        yield api


@pytest.fixture
async def namespace(kube_api: client.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace, ready for pods (its `default` ServiceAccount exists), deleted after."""
    core = client.CoreV1Api(kube_api)
    name = f"it-{uuid.uuid4().hex[:10]}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        # The serviceaccount controller makes `default` moments later; until then the
        # ServiceAccount admission plugin rejects pods, and the Job controller backs off.
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_service_account,
                name,
                field_selector="metadata.name=default",
                timeout_seconds=30,
            ):
                if event["type"] in ("ADDED", "MODIFIED"):
                    break
            else:
                pytest.fail(f"no default ServiceAccount in namespace {name} after 30s")
        yield name
    finally:
        await core.delete_namespace(name)
