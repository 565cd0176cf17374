"""The HA take-over on the local control plane, as config/ha runs it: two `admitd run --leader-elect` replicas, each
with its own log, behind one webhook address, sharing one serving certificate (--cert-secret); the leader's process
is killed (SIGKILL) while Jobs are being created, and the standby takes over.

Real: the API server, its webhook calls (failurePolicy Fail) and TLS verification against the caBundle, the Lease,
the Secret, the Job controller, both admitd processes. Stood in for: the Service in front of the replicas is a TCP
forwarder on 127.0.0.1 (`ServiceProxy`) that sends each connection to a replica whose /readyz answered 200 at its
last probe (every `probe_s`, as the readinessProbe's periodSeconds in config/), round robin, as kube-proxy sends to
the ready endpoints; a connection to a replica that died since its last probe fails, as it would through a Service
whose endpoint is not removed yet.

Measured: the take-over time (the kill to the Lease held by the standby, and to its first admission), the window in
which Job creation fails (the first to the last refused create after the kill), how many creates failed, and
whether any Job was unsuspended by both replicas (it must not be). Used by tests/integration/test_ha_takeover.py
(asserts) and bench/bench_takeover.py (3 runs, medians, JSON).
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import ssl
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, apply, job, kubectl, wait_for

V = "kueue.x-k8s.io/v1beta2"


class Api:
    """Admin calls to the API server, synchronous (for threads), with the kubeconfig's client certificate."""

    def __init__(self, cluster: KubeCluster) -> None:
        cfg = yaml.safe_load(cluster.kubeconfig.read_text())
        server = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.base = server["server"].rstrip("/")
        self.ctx = ssl.create_default_context(cafile=server["certificate-authority"])
        self.ctx.load_cert_chain(user["client-certificate"], user["client-key"])

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"{}")
            except ValueError:
                return e.code, {}


class ServiceProxy:
    """A stand-in for the webhook Service: 127.0.0.1:port forwarded to the replicas that were ready at the last
    probe, round robin."""

    def __init__(self, probe_s: float) -> None:
        self.probe_s = probe_s
        self.backends: list[Daemon] = []
        self.ready: list[Daemon] = []
        self._next = 0
        self._stop = threading.Event()
        self.routed: list[tuple[float, str, bool]] = []  # (time, replica, connected) of every connection
        self.open: set[socket.socket] = set()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._forward(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._threads = [
            threading.Thread(target=self.server.serve_forever, daemon=True),
            threading.Thread(target=self._probe, daemon=True),
        ]

    def __enter__(self) -> ServiceProxy:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def _probe(self) -> None:
        while not self._stop.is_set():
            ready = []
            for d in list(self.backends):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{d.health_port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            ready.append(d)
                except (urllib.error.URLError, OSError):
                    pass
            self.ready = ready
            self._stop.wait(self.probe_s)

    def _forward(self, client: socket.socket) -> None:
        ready = list(self.ready)
        if not ready:
            client.close()
            return
        self._next += 1
        target = ready[self._next % len(ready)]
        try:
            upstream = socket.create_connection(("127.0.0.1", target.webhook_port), timeout=5)
        except OSError:
            self.routed.append((time.monotonic(), target.workdir.name, False))
            client.close()  # the replica died since its last probe: the API server sees the connection fail
            return
        upstream.settimeout(None)
        self.routed.append((time.monotonic(), target.workdir.name, True))
        self.open |= {client, upstream}

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
        back.start()
        pipe(client, upstream)
        back.join(timeout=30)
        client.close()
        upstream.close()
        self.open -= {client, upstream}

    def drop_connections(self) -> None:
        """Close every forwarded connection, as the Service's endpoints go away when the replicas stop."""
        for s in list(self.open):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@dataclass
class Creates:
    """Jobs created one after the other through the API server (so through the webhook), each attempt recorded."""

    api: Api
    namespace: str
    every_s: float
    attempts: list[tuple[float, str, bool, str, float]] = field(default_factory=list)  # time, name, ok, error, took
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        i = 0
        while not self._stop.is_set():
            name = f"t{i:04d}"
            started = time.monotonic()
            status, body = self.api.call(
                "POST",
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs",
                job(self.namespace, name, queue="q", gpus=1, runtime="2s"),
            )
            created = status == 201
            error = "" if created else str(body.get("message", status))
            self.attempts.append((started, name, created, error, time.monotonic() - started))
            i += 1
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def created(self) -> list[str]:
        return [name for _, name, ok, _, _ in self.attempts if ok]


def _queues(cluster: KubeCluster, ns: str) -> None:
    rf, cq = f"rf-{ns}", f"cq-{ns}"
    apply(
        cluster,
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {}},
        {
            "apiVersion": V,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 10000}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": V,
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    )


def _running(api: Api, ns: str) -> set[str]:
    """namespace/name of the jobs whose spec.suspend is false."""
    status, body = api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")
    assert status == 200, body
    return {f"{ns}/{j['metadata']['name']}" for j in body["items"] if j["spec"].get("suspend") is False}


def _unsuspended_by(daemon: Daemon, ns: str) -> list[tuple[str, int, float]]:
    """(namespace/name, decision, when in wall-clock seconds) of every Job this replica unsuspended, from its log."""
    return [
        (e["payload"]["job"], e["payload"]["decision"], e["payload"]["at"] / 1000)
        for e in daemon.events()
        if e["type"] == "job.unsuspended" and e["subject"].startswith(f"job/{ns}/")
    ]


def run(
    cluster: KubeCluster, workdir: Path, ns: str, *, probe_s: float = 5.0, create_every_s: float = 0.25
) -> dict[str, Any]:
    """One take-over; the figures and the facts the test asserts. Leaves nothing running."""
    api = Api(cluster)
    _queues(cluster, ns)
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/admitd"
    with ServiceProxy(probe_s) as proxy:
        common = (
            "--leader-elect",
            "--leader-election-lease",
            f"{ns}/admitd",
            "--cert-secret",
            f"{ns}/admitd-serving-cert",
            "--webhook-url",
            f"https://127.0.0.1:{proxy.port}",  # both replicas behind one address, as behind the Service
        )
        a = Daemon(cluster, workdir / "a", extra=(*common, "--identity", "a"))
        b = Daemon(cluster, workdir / "b", extra=(*common, "--identity", "b"))
        creates = Creates(api, ns, create_every_s)
        creator = threading.Thread(target=creates.run, daemon=True)
        try:
            a.start()
            wait_for("a to lead", lambda: "became the leader" in a.stderr.read_text())
            b.start()
            proxy.backends = [a, b]
            wait_for("both replicas behind the proxy", lambda: len(proxy.ready) == 2, timeout=3 * probe_s + 5)
            creator.start()
            wait_for("a to admit the first jobs", lambda: len(_unsuspended_by(a, ns)) >= 4, timeout=60)
            killed, killed_wall = time.monotonic(), time.time()
            a.kill()
            held_by_b = None
            while time.monotonic() - killed < 60:
                status, lease = api.call("GET", lease_path)
                if status == 200 and (lease.get("spec") or {}).get("holderIdentity") == "b":
                    held_by_b = time.monotonic()
                    break
                time.sleep(0.1)
            assert held_by_b is not None, "b never took the Lease"
            # Creates go on until well after the take-over, so that the new leader's first admissions are timed.
            time.sleep(8)
            creates._stop.set()
            creator.join(timeout=60)
            created = {f"{ns}/{n}" for n in creates.created()}
            # Every created job running, as the cluster shows it (a job the old leader unsuspended just before it died,
            # without the time to record it, is adopted by the new one: in neither log's job.unsuspended). What is
            # left after 90 s is reported, and the test fails.
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                left = created - _running(api, ns)
                if not left:
                    break
                time.sleep(1.0)
            by_a, by_b = _unsuspended_by(a, ns), _unsuspended_by(b, ns)
            proxy.backends = []
            proxy.drop_connections()
            assert b.stop() == 0, b.stderr.read_text()[-3000:]
            b.verify()
            a.verify()
        finally:
            creates._stop.set()
            for d in (a, b):
                if d.proc is not None:
                    d.kill()
            kubectl(
                cluster,
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "admitd",
                "--ignore-not-found",
            )
    a_jobs, b_jobs = [j for j, _, _ in by_a], [j for j, _, _ in by_b]
    first_admission = min((at for _, _, at in by_b), default=None)
    decisions: dict[str, set[tuple[str, int]]] = {}
    for replica, unsuspended in (("a", by_a), ("b", by_b)):
        for j, decision, _ in unsuspended:
            decisions.setdefault(j, set()).add((replica, decision))
    took_after_kill = sorted(took for t, _, ok, _, took in creates.attempts if ok and t > killed)
    # An attempt counts as after the kill when it ended after it: one under way when the leader was killed may be
    # answered by the killed replica's broken connection, which is the take-over's failure, not the certificate's.
    failed_after_kill = [(t - killed, err) for t, _, ok, err, took in creates.attempts if not ok and t + took > killed]
    failed_before_kill = [err for t, _, ok, err, took in creates.attempts if not ok and t + took <= killed]
    window = (failed_after_kill[-1][0] - failed_after_kill[0][0] + create_every_s) if failed_after_kill else 0.0
    routed = proxy.routed
    return {
        # The API server's connections to the webhook through the Service stand-in (it keeps them open and reuses
        # them, so few): to each replica before the kill, and the ones that found the killed replica gone.
        "connections_to_a_before_kill": sum(1 for t, r, _ in routed if r == "a" and t <= killed),
        "connections_to_b_before_kill": sum(1 for t, r, _ in routed if r == "b" and t <= killed),
        "connections_refused_after_kill": sum(1 for t, _, ok in routed if not ok and t > killed),
        "takeover_lease_s": round(held_by_b - killed, 2),
        "takeover_first_admission_s": None if first_admission is None else round(first_admission - killed_wall, 2),
        "create_failure_window_s": round(window, 2),
        "creates_failed_after_kill": len(failed_after_kill),
        "creates_failed_first_at_s": round(failed_after_kill[0][0], 2) if failed_after_kill else None,
        "creates_failed_before_kill": len(failed_before_kill),
        "create_errors_before_kill": sorted(set(failed_before_kill)),
        "creates_ok": len(created),
        "create_every_s": create_every_s,
        "probe_s": probe_s,
        "a_unsuspended": len(a_jobs),
        "b_unsuspended": len(b_jobs),
        "unsuspended_by_both": sorted(set(a_jobs) & set(b_jobs)),
        # The same decision carried out again by one replica (its patch repeated, nothing admitted anew) ...
        "unsuspended_twice_by_one": sorted({j for js in (a_jobs, b_jobs) for j in js if js.count(j) > 1}),
        # ... and a Job unsuspended for two different decisions (admitted twice): must be none.
        "admitted_twice": sorted(j for j, d in decisions.items() if len(d) > 1),
        "create_latency_after_kill_max_s": round(took_after_kill[-1], 2) if took_after_kill else None,
        "create_latency_after_kill_median_s": round(statistics.median(took_after_kill), 2) if took_after_kill else None,
        "never_unsuspended": sorted(left),
        "running_adopted_only": sorted(created - set(a_jobs) - set(b_jobs) - left),
        "failure_sample": failed_after_kill[0][1][:300] if failed_after_kill else "",
    }
