"""Helpers for tests that run `admitd run` as a real process against the local control plane.

Nothing is faked here: the daemon is the installed `admitd` command, the cluster is tests/cluster's, and objects
are applied with its kubectl. Each daemon gets its own log file and free ports; `stop` sends SIGTERM and checks
the exit status, `kill` sends SIGKILL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import REPO, KubeCluster

CRD_DIR = REPO / "config" / "crd"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubectl(cluster: KubeCluster, *args: str, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def apply(cluster: KubeCluster, *docs: dict[str, Any] | str) -> None:
    text = "\n---\n".join(d if isinstance(d, str) else yaml.safe_dump(d) for d in docs)
    kubectl(cluster, "apply", "-f", "-", stdin=text)


def install_crds(cluster: KubeCluster) -> None:
    """admitd's CRDs as config/crd has them (conversion by the admitd webhook Service); a daemon started with
    --webhook-url then points their conversion at itself."""
    docs = [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("kueue.x-k8s.io_*.yaml"))]
    for crd in docs:
        # Undo a URL that an earlier daemon set, so that the apply below does not leave both a URL and a Service.
        conversion = json.loads(json.dumps(crd["spec"]["conversion"]))
        if conversion["strategy"] == "Webhook":
            conversion["webhook"]["clientConfig"]["url"] = None
        else:
            conversion["webhook"] = None
        kubectl(
            cluster,
            "patch",
            "crd",
            crd["metadata"]["name"],
            "--type=merge",
            "-p",
            json.dumps({"spec": {"conversion": conversion}}),
            check=False,
        )
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs))
    for crd in docs:
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")


JOB_CRDS_SCRIPT = REPO / "tests" / "cluster" / "fetch-crds.sh"


def install_job_crds(cluster: KubeCluster) -> None:
    """The real CRDs of PyTorchJob, RayJob and JobSet, fetched from the projects' released Go modules by
    tests/cluster/fetch-crds.sh (cached in tests/cluster/bin/crds/), applied server-side (the RayJob CRD is too
    large for the last-applied annotation of a client-side apply)."""
    crd_dir = Path(
        subprocess.run([str(JOB_CRDS_SCRIPT)], capture_output=True, text=True, check=True, timeout=600).stdout.strip()
    )
    files = sorted(crd_dir.glob("*.yaml"))
    assert len(files) == 3, files
    for path in files:
        kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in files:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


def job(
    namespace: str,
    name: str,
    *,
    queue: str | None,
    gpus: int = 4,
    pods: int = 1,
    runtime: str = "1h",
    priority_class: str | None = None,
    node_selector: dict[str, str] | None = None,
    suspend: bool | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job whose pods each ask for `gpus` GPUs and 'run' for `runtime` (kwok)."""
    labels = {} if queue is None else {"kueue.x-k8s.io/queue-name": queue}
    if priority_class is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}},
            }
        ],
    }
    if node_selector:
        pod["nodeSelector"] = node_selector
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": {"metadata": {"annotations": {COMPLETE_DELAY: runtime}}, "spec": pod},
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def get_job(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(kubectl(cluster, "get", "job", "-n", namespace, name, "-o", "json"))
    return out


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60, every: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Daemon:
    """One `admitd run` process with its own log file and ports."""

    cluster: KubeCluster
    workdir: Path
    extra: tuple[str, ...] = ()
    db: Path = field(init=False)
    webhook_port: int = field(init=False, default_factory=free_port)
    health_port: int = field(init=False, default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db = self.workdir / "admitd.db"
        self.stderr = self.workdir / "daemon.log"

    def start(self) -> Daemon:
        argv = [
            sys.executable,
            "-m",
            "daemon.cli",
            "--log-level",
            "info",
            "run",
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--db",
            str(self.db),
            "--webhook-host",
            "127.0.0.1",
            "--webhook-port",
            str(self.webhook_port),
            "--webhook-url",
            f"https://127.0.0.1:{self.webhook_port}",
            "--cert-dir",
            str(self.workdir / "certs"),
            "--create-webhook-configurations",  # outside the cluster: no config/ applied
            "--health-host",
            "127.0.0.1",
            "--health-port",
            str(self.health_port),
            # One daemon per cluster takes a Lease even without --leader-elect: each log its own Lease here, so that
            # the tests' daemons (one killed, the next started at once) never wait for each other's; a test that
            # means two daemons to meet names one Lease for both.
            "--leader-election-lease",
            f"default/admitd-{hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:12]}",
            *self.extra,
        ]
        with self.stderr.open("ab") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=os.environ.copy())
        wait_for("the daemon to be ready", self.ready, timeout=60)
        return self

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the daemon exited with {self.proc.returncode}: {self.stderr.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> int:
        """SIGTERM; the exit status (0 when it drained cleanly)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc = None
        return code

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc = None

    def events(self) -> list[dict[str, Any]]:
        out = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "log", "export", "--db", str(self.db)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        return [json.loads(line) for line in out.splitlines()]

    def verify(self) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "log", "verify", "--db", str(self.db)],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout


_STARTED: list[subprocess.Popen[bytes]] = []


def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19]


def stop_component(cluster: KubeCluster, name: str) -> dict[str, Any]:
    """Kill one control-plane process (its whole process group); `start_component` brings it back."""
    state_path = cluster.state_dir / "state.json"
    state = json.loads(state_path.read_text())
    proc = next(p for p in state["processes"] if p["name"] == name)
    # SIGKILL: an outage, not a graceful shutdown (which would wait for every open watch to finish).
    os.killpg(proc["pid"], signal.SIGKILL)
    wait_for(f"{name} to stop", lambda: _start_time(proc["pid"]) != proc["start_time"], timeout=30)
    return dict(proc)


def start_component(cluster: KubeCluster, proc: dict[str, Any]) -> None:
    """Start a stopped component again with its recorded command line, and record it so `down` stops it."""
    state_path = cluster.state_dir / "state.json"
    with open(proc["log"], "ab") as out:
        new = subprocess.Popen(
            proc["argv"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cluster.state_dir,
            start_new_session=True,
        )
    _STARTED.append(new)  # kept, so that no ResourceWarning fires; `scripts/local-cluster down` stops it
    state = json.loads(state_path.read_text())
    for p in state["processes"]:
        if p["name"] == proc["name"]:
            p["pid"], p["start_time"] = new.pid, _start_time(new.pid)
    state_path.write_text(json.dumps(state, indent=2))


@contextlib.contextmanager
def running_daemon(cluster: KubeCluster, workdir: Path, *extra: str) -> Iterator[Daemon]:
    """An `admitd run` for one test: started, then stopped (it must exit 0: its log's tail is the message if not),
    and its webhook registration removed, so the next test's Jobs are not sent to a daemon that is gone."""
    d = Daemon(cluster, workdir, extra=extra).start()
    try:
        yield d
    finally:
        if d.proc is not None:
            assert d.stop() == 0, d.stderr.read_text()[-3000:]
        kubectl(
            cluster,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
