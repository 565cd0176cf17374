"""A fresh local control plane per run, and the two schedulers on it: `admitd run` and Kueue's manager.

Both run outside the cluster as processes of this machine, with their webhooks registered by URL on 127.0.0.1:
- admitd: its CRDs from config/crd and the daemon as the integration tests' harness starts it;
- Kueue: the manager built by tests/cluster/kueue/build-kueue.sh, its own CRDs (server-side apply) and webhook
  configurations from its module (the Service reference replaced by a URL and a self-signed CA), its shipped
  Configuration except for what running outside a cluster needs (no leader election, no internal certificate
  management, only the batch/job integration, VisibilityOnDemand off, local ports). With internal certificate
  management off, Kueue reads a metrics certificate from the fixed path /etc/kueue/metrics/certs; it is given one
  inside a private mount namespace (`unshare -m`, an overlay on /etc), so nothing is written to this machine's /etc.
Every process started here is stopped by `stop` (SIGTERM to its process group, SIGKILL after 20 s).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import free_port, kubectl

LOCAL_CLUSTER = REPO / "scripts" / "local-cluster"
BUILD_KUEUE = REPO / "tests" / "cluster" / "kueue" / "build-kueue.sh"
KUEUE_BIN = REPO / "tests" / "cluster" / "bin" / "kueue"
CREATOR_BIN = REPO / "tests" / "cluster" / "bin" / "e2e-creator"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True, slots=True)
class Setting:
    """Client rate limits of one comparison setting."""

    name: str
    controller_manager: tuple[float, int] | None  # --kube-api-qps/--kube-api-burst; None: its defaults (20/30)
    kueue: tuple[float, int]  # Configuration clientConnection qps/burst
    admitd_status: tuple[float, int]  # admitd run --status-qps/--status-burst


SETTINGS = {
    # The schedulers' own client limits as shipped: Kueue's Configuration (config/components/manager) says qps 50,
    # burst 100; admitd's status writer defaults to 50/100. The Job controller's limit is lifted, as in the issue's
    # trial row "controller-manager qps 1000, Kueue as shipped": with the controller-manager's default (20/30) the Job
    # controller binds both systems (`stock`) and the comparison would measure it, not the schedulers.
    "shipped": Setting("shipped", (1000.0, 2000), (50.0, 100), (50.0, 100)),
    "lifted": Setting("lifted", (1000.0, 2000), (1000.0, 2000), (1000.0, 2000)),
    # Everything as shipped, the controller-manager's default client limit (qps 20, burst 30) included.
    "stock": Setting("stock", None, (50.0, 100), (50.0, 100)),
}


class RunFailed(RuntimeError):
    pass


def _stop_group(proc: subprocess.Popen[bytes], what: str) -> int | None:
    """SIGTERM to the process group, SIGKILL after 20 s; the exit status."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        print(f"[e2e] {what} did not stop in 20 s; killing it", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=10)


class LocalCluster:
    """scripts/local-cluster in its own state folder."""

    def __init__(self, state_dir: Path, setting: Setting) -> None:
        self.state_dir = state_dir
        self.setting = setting
        self.cluster: KubeCluster | None = None

    def _script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(LOCAL_CLUSTER), *args, "--state-dir", str(self.state_dir)],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )

    def up(self) -> KubeCluster:
        self._script("down")  # a leftover from an interrupted run
        args = ["up"]
        if self.setting.controller_manager is not None:
            qps, burst = self.setting.controller_manager
            args += ["--controller-manager-qps", f"{qps:g}", "--controller-manager-burst", str(burst)]
        result = self._script(*args)
        if result.returncode != 0:
            raise RunFailed(f"scripts/local-cluster up failed:\n{result.stderr[-3000:]}")
        state = json.loads((self.state_dir / "state.json").read_text())
        self.cluster = KubeCluster(
            kubeconfig=Path(state["kubeconfig"]),
            state_dir=self.state_dir,
            apiserver_url=state["apiserver_url"],
            etcd_url=state["etcd_url"],
            started_here=True,
        )
        return self.cluster

    def pids(self) -> dict[str, int]:
        state = json.loads((self.state_dir / "state.json").read_text())
        return {p["name"]: int(p["pid"]) for p in state["processes"] if p["name"] in COMPONENTS}

    def down(self) -> None:
        result = self._script("down")
        if result.returncode != 0:
            raise RunFailed(f"scripts/local-cluster down failed:\n{result.stderr[-3000:]}")


class NoScheduler:
    """The baseline: no scheduler, the same Jobs created running and unlabelled. What the control plane spends on them
    by itself (Job controller, kube-scheduler, kwok, the benchmark's creates and watch) is what no scheduler causes;
    a scheduler's run minus this is what that scheduler causes."""

    name = "none"
    manages_jobs = False

    def prepare(self) -> None:
        pass

    def version(self) -> str:
        return "no scheduler"

    def start(self, c: KubeCluster, workdir: Path, setting: Setting) -> int:
        return 0  # no process

    def stop(self) -> int | None:
        return None

    def log_path(self) -> Path | None:
        return None


class Admitd:
    """`admitd run` from a snapshot of one commit (`git archive`), not from the shared working tree, so that the
    figures belong to a commit; its CRDs from that snapshot's config/crd; started as the integration harness does
    (webhook by URL on 127.0.0.1, its own certificate folder), with the setting's status write rate."""

    name = "admitd"

    def __init__(self, rev: str = "HEAD", patch: Path | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.rev = rev
        self.patch = patch  # applied to the snapshot (`git apply`), to measure a change before it is committed
        self.extra_args = extra_args  # more `admitd run` options (e.g. --no-workload-objects)
        self.commit = ""
        self.src: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.cluster: KubeCluster | None = None
        self.metrics_url = ""

    def version(self) -> str:
        extra = f" + {self.patch.name}" if self.patch is not None else ""
        extra += "".join(f" {a}" for a in self.extra_args)
        return f"admitd {self.commit[:7] or '?'}{extra}"

    def prepare(self) -> None:
        result = subprocess.run(
            ["git", "rev-parse", "--verify", f"{self.rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        )
        if result.returncode != 0:
            raise RunFailed(f"--admitd-rev {self.rev!r} is not a commit: {result.stderr.strip()}")
        self.commit = result.stdout.strip()
        suffix = ""
        if self.patch is not None:
            suffix = "-" + hashlib.sha256(self.patch.read_bytes()).hexdigest()[:8]
        src = Path("/tmp/admitd") / f"e2e-src-{self.commit[:12]}{suffix}"
        if not (src / ".complete").exists():
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir(parents=True)
            archive = subprocess.run(["git", "archive", self.commit], capture_output=True, check=True, cwd=REPO)
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
            if self.patch is not None:
                applied = subprocess.run(
                    ["git", "apply", str(self.patch.resolve())], capture_output=True, text=True, check=False, cwd=src
                )
                if applied.returncode != 0:
                    raise RunFailed(
                        f"--admitd-patch {self.patch} does not apply to {self.commit[:7]}: {applied.stderr}"
                    )
            (src / ".complete").write_text(self.commit)
        self.src = src

    def start(self, c: KubeCluster, workdir: Path, setting: Setting) -> int:
        assert self.src is not None, "prepare() first"
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = c
        crds = sorted((self.src / "config" / "crd").glob("kueue.x-k8s.io_*.yaml"))
        kubectl(c, "apply", "--server-side", *(a for p in crds for a in ("-f", str(p))))
        kubectl(c, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        # One daemon per cluster: admitd takes the Lease admitd-system/admitd (a7746f9), as README's local run does.
        kubectl(c, "create", "namespace", "admitd-system")
        webhook_port, health_port = free_port(), free_port()
        self.metrics_url = f"http://127.0.0.1:{health_port}/metrics"
        qps, burst = setting.admitd_status
        argv = [
            sys.executable, "-m", "daemon.cli", "--log-level", "info", "run",
            "--kubeconfig", str(c.kubeconfig), "--db", str(workdir / "admitd.db"),
            "--webhook-host", "127.0.0.1", "--webhook-port", str(webhook_port),
            "--webhook-url", f"https://127.0.0.1:{webhook_port}", "--cert-dir", str(workdir / "certs"),
            "--create-webhook-configurations",  # outside the cluster: no config/ applied
            "--health-host", "127.0.0.1", "--health-port", str(health_port),
            "--status-qps", f"{qps:g}", "--status-burst", str(burst), *self.extra_args,
        ]  # fmt: skip
        self.log = workdir / "daemon.log"
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.src,
                env={**os.environ, "PYTHONPATH": str(self.src)},
                start_new_session=True,
            )
        _wait_ready(self.proc, f"http://127.0.0.1:{health_port}/readyz", "admitd", self.log, self.stop)
        return self.proc.pid

    def report(self) -> dict[str, Any]:
        """What the status writer took from a change to the cluster showing it, per kind of object (from admitd's
        metrics, before it stops): the count, and the bucket bounds holding the median and the 90th percentile."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            text = r.read().decode()
        return {"status_sync_delay_s": sync_delays(text)}

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        try:
            return _stop_group(self.proc, "admitd")
        finally:
            self.proc = None

    def log_path(self) -> Path | None:
        return self.log


def sync_delays(metrics_text: str) -> dict[str, dict[str, float | int | None]]:
    """admitd_status_sync_delay_seconds per kind and lane ("workload/urgent"): count, and the upper bounds of the
    buckets holding the median and the 90th percentile (None past the last finite bound)."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "admitd_status_sync_delay_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                name = f"{sample.labels['kind']}/{sample.labels.get('lane', '')}".rstrip("/")
                buckets.setdefault(name, []).append((bound, sample.value))
    out: dict[str, dict[str, float | int | None]] = {}
    for kind, cumulative in sorted(buckets.items()):
        cumulative.sort()
        total = cumulative[-1][1]
        if total:
            out[kind] = {"count": int(total), "p50_le": _bound(cumulative, 0.5), "p90_le": _bound(cumulative, 0.9)}
    return out


def _bound(cumulative: list[tuple[float, float]], q: float) -> float | None:
    """The upper bound of the first bucket holding the q-quantile of a cumulative histogram."""
    for bound, count in cumulative:
        if count >= q * cumulative[-1][1]:
            return None if bound == float("inf") else bound
    return None


def _wait_ready(proc: subprocess.Popen[bytes], url: str, what: str, log: Path, stop: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RunFailed(f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    stop()
    raise RunFailed(f"{what} was not ready in {timeout:.0f} s: {log.read_text(errors='replace')[-3000:]}")


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA) and its key."""
    directory.mkdir(parents=True, exist_ok=True)
    crt, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-keyout", str(key), "-out", str(crt),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return crt, key


# The kustomization in config/components/webhook keeps these webhooks away from kube-system and kueue-system.
_SYSTEM_NAMESPACES = {"mpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io"} | {
    "vpod.kb.io",
    "vdeployment.kb.io",
    "vstatefulset.kb.io",
}


def build_creator() -> Path:
    """Builds the Go Job creator (tests/cluster/creator, this repository's tests/cluster module, from the module
    proxy) into tests/cluster/bin/e2e-creator; seconds on a warm Go build cache, about a minute cold."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    result = subprocess.run(
        [go, "build", "-buildvcs=false", "-o", str(CREATOR_BIN), "./creator"],
        capture_output=True,
        text=True,
        check=False,
        cwd=CREATOR_BIN.parents[1],
    )
    if result.returncode != 0:
        raise RunFailed(f"building tests/cluster/creator failed: {result.stderr[-3000:]}")
    return CREATOR_BIN


# The webhooks the scenario needs: batch/v1 Jobs and Kueue's own kinds. Every other framework's webhook (pods,
# deployments, statefulsets, the Kubeflow and Ray kinds) is registered by the shipped manifests, and Kueue serves
# it as a no-op when the framework is disabled; the pod one is called for every pod the Jobs create.
TUNED_WEBHOOKS = frozenset(
    {
        "mjob.kb.io",
        "vjob.kb.io",
        "mworkload.kb.io",
        "vworkload.kb.io",
        "mclusterqueue.kb.io",
        "vclusterqueue.kb.io",
        "vcohort.kb.io",
        "mresourceflavor.kb.io",
        "vresourceflavor.kb.io",
    }
)
# Feature gates on by default in v0.17.0 that start controllers, watches or metrics the scenario never uses (no
# topology, no MultiKueue clusters, no visibility API); the gates that change scheduling decisions stay as shipped.
TUNED_FEATURE_GATES_OFF = (
    "VisibilityOnDemand",
    "TopologyAwareScheduling",
    "TASFailedNodeReplacement",
    "TASFailedNodeReplacementFailFast",
    "TASReplaceNodeOnNodeTaints",
    "TASReplaceNodeOnPodTermination",
    "TASProfileMixed",
    "MultiKueue",
    "MultiKueueAdaptersForCustomJobs",
    "MultiKueueWaitForWorkloadAdmitted",
    "MultiKueueRedoAdmissionOnEvictionInWorker",
    "LocalQueueMetrics",
)
TUNED_CLIENT = (1000.0, 2000)  # Kueue's performance runner's client limits (its in-cluster make target)


class Kueue:
    """Kueue's manager with its shipped Configuration and webhooks (what running outside a cluster needs aside)."""

    name = "kueue"
    log_level = "2"  # the shipped manager's --zap-log-level (config/components/manager/manager.yaml)

    def __init__(self) -> None:
        self.module_dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def prepare(self) -> None:
        """Builds Kueue if needed (tests/cluster/kueue/build-kueue.sh) and finds its module."""
        result = subprocess.run(["bash", str(BUILD_KUEUE)], stdout=subprocess.PIPE, text=True, check=False)
        if result.returncode != 0:
            raise RunFailed(f"{BUILD_KUEUE} failed (exit {result.returncode}); its output is above")
        self.module_dir = Path(result.stdout.strip().splitlines()[-1])

    def version(self) -> str:
        return f"kueue {self.module_dir.name.split('@')[-1] if self.module_dir else '?'}"

    def module(self) -> Path:
        """The Kueue module's folder (downloaded from the module proxy on first use), without building."""
        if self.module_dir is None:
            go = shutil.which("go") or "/usr/local/go/bin/go"
            result = subprocess.run(
                [go, "mod", "download", "-json", "sigs.k8s.io/kueue"],
                capture_output=True,
                text=True,
                check=False,
                cwd=BUILD_KUEUE.parent,
            )
            if result.returncode != 0:
                raise RunFailed(f"go mod download sigs.k8s.io/kueue failed: {result.stdout}{result.stderr}")
            self.module_dir = Path(json.loads(result.stdout)["Dir"])
        return self.module_dir

    def generator_config(self) -> dict[str, Any]:
        path = self.module() / "test/performance/scheduler/configs/baseline/generator.yaml"
        loaded: dict[str, Any] = yaml.safe_load(path.read_text())
        return loaded

    def start(self, c: KubeCluster, workdir: Path, setting: Setting) -> int:
        assert self.module_dir is not None, "prepare() first"
        workdir.mkdir(parents=True, exist_ok=True)
        crds = sorted((self.module_dir / "config/components/crd/bases").glob("*.yaml"))
        kubectl(c, "apply", "--server-side", *(a for p in crds for a in ("-f", str(p))))
        kubectl(c, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kubectl(c, "create", "namespace", "kueue-system")
        crt, key = _self_signed(workdir / "webhook-certs")
        webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
        ca = base64.b64encode(crt.read_bytes()).decode()
        docs = [
            d for d in yaml.safe_load_all((self.module_dir / "config/components/webhook/manifests.yaml").read_text())
        ]
        for doc in docs:
            if not doc or "Webhook" not in doc.get("kind", ""):
                continue
            doc["webhooks"] = [h for h in doc.get("webhooks", []) if self.keeps_webhook(h["name"])]
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca}
                if hook["name"] in _SYSTEM_NAMESPACES:
                    hook["namespaceSelector"] = {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system", "kueue-system"],
                            }
                        ]
                    }
        kubectl(c, "apply", "-f", "-", stdin=yaml.safe_dump_all([d for d in docs if d]))
        shipped = yaml.safe_load(
            (self.module_dir / "config/components/manager/controller_manager_config.yaml").read_text()
        )
        config = self.configuration(
            shipped,
            setting,
            health=f"127.0.0.1:{health_port}",
            metrics=f"127.0.0.1:{metrics_port}",
            webhook={"port": webhook_port, "host": "127.0.0.1", "certDir": str(crt.parent)},
        )
        config_path = workdir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        overlay = workdir / "etc-overlay"
        (overlay / "upper").mkdir(parents=True, exist_ok=True)
        (overlay / "work").mkdir(parents=True, exist_ok=True)
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay / 'upper'},workdir={overlay / 'work'} /etc"
            f" && mkdir -p /etc/kueue/metrics/certs && cp {crt} {key} /etc/kueue/metrics/certs/"
            f' && exec "$0" --config={config_path} --zap-log-level={self.log_level}'
        )
        self.log = workdir / "kueue.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(KUEUE_BIN)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(c.kubeconfig)},
                start_new_session=True,
            )
        _wait_ready(self.proc, f"http://127.0.0.1:{health_port}/readyz", "kueue", self.log, self.stop)
        return self.proc.pid

    def keeps_webhook(self, name: str) -> bool:
        return True

    def configuration(
        self, shipped: dict[str, Any], setting: Setting, *, health: str, metrics: str, webhook: dict[str, Any]
    ) -> dict[str, Any]:
        """The shipped Configuration, with what running outside a cluster needs and the setting's client limits."""
        qps, burst = setting.kueue
        return {
            **shipped,
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": health},
            "metrics": {"bindAddress": metrics},
            "webhook": webhook,
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"qps": qps, "burst": burst},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"VisibilityOnDemand": False},
        }

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        try:
            return _stop_group(self.proc, "kueue")
        finally:
            self.proc = None

    def log_path(self) -> Path | None:
        return self.log


class KueueTuned(Kueue):
    """Kueue configured for this scenario only, the best Kueue this harness could make: the batch/job integration
    alone, with only its webhooks and Kueue's own (TUNED_WEBHOOKS); the controllers of the frameworks it does not
    use left out of groupKindConcurrency; feature gates that start unused controllers off (TUNED_FEATURE_GATES_OFF);
    the performance runner's client limits (1000 / 2000) at every setting; logging at info (the manager's default,
    as in Kueue's own performance runs, which pass no level unless logs are asked for). The scheduling gates and
    the ClusterQueues are the same as for `kueue`, so the decisions are Kueue's own."""

    name = "kueue-tuned"
    log_level = "info"

    def version(self) -> str:
        return super().version() + " (tuned)"

    def keeps_webhook(self, name: str) -> bool:
        return name in TUNED_WEBHOOKS

    def configuration(
        self, shipped: dict[str, Any], setting: Setting, *, health: str, metrics: str, webhook: dict[str, Any]
    ) -> dict[str, Any]:
        config = super().configuration(shipped, setting, health=health, metrics=metrics, webhook=webhook)
        concurrency = dict((shipped.get("controller") or {}).get("groupKindConcurrency") or {})
        concurrency.pop("Pod", None)  # the pod integration is off
        qps, burst = TUNED_CLIENT
        config.update(
            {
                "clientConnection": {"qps": max(qps, setting.kueue[0]), "burst": max(burst, setting.kueue[1])},
                "controller": {"groupKindConcurrency": concurrency},
                "featureGates": dict.fromkeys(TUNED_FEATURE_GATES_OFF, False),
            }
        )
        return config
