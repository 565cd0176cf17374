"""`admitd run`: the daemon on a real cluster, wired from the same stages the simulator runs.

Start-up: replay the log (newest valid snapshot + tail), then list the cluster (queue objects first, then Jobs
and the distributed kinds whose CRDs are installed: PyTorchJob, RayJob, JobSet)
and append only the differences, so the log stays the history and the cluster the truth about what exists now.
Then the stages run as guarded concurrent loops beside the watches, the webhook server and the health/metrics
server. `/readyz` answers 200 only after the replay and the first full list. SIGTERM or SIGINT drains: the loops
stop, the batch in flight is committed, the watches close, and the process exits 0. An unexpected crash of any
loop exits non-zero, because a restart (replay) is the recovery path.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.domain.actuation import Action, Order
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.events import Event, WorkloadAdmitted
from daemon.domain.state import State
from daemon.eventlog import EventStore, LogReader, replay
from daemon.kube import webhook
from daemon.kube.actuate import JobActuator
from daemon.kube.client import KubeClient, Obj, load_configuration
from daemon.kube.errors import Conflict, KubeError, NotFound, Temporary
from daemon.kube.jobkinds import JOB, JobWatches, served_distributed_kinds
from daemon.kube.leader import LeaderElector, LeadershipLost
from daemon.kube.observe import Observer
from daemon.kube.status import StatusWriter
from daemon.kube.watch import Reflector, Resource, backoff_s
from daemon.manifests.conversion import review
from daemon.obs import metrics, systemd
from daemon.obs.logging import get_logger
from daemon.stages.actuate import Actuate
from daemon.stages.admit import Admit
from daemon.stages.ingest import Ingest
from daemon.stages.ports import Inbox, Observed, Outcome, WallClock
from daemon.stages.recorder import Recorder
from daemon.stages.runner import StageCrashed, run_concurrently

log = get_logger("admitd.run")

KUEUE_KINDS = {  # watched in this order, queue objects before Jobs: plural -> kind
    "resourceflavors": "ResourceFlavor",
    "cohorts": "Cohort",
    "clusterqueues": "ClusterQueue",
    "localqueues": "LocalQueue",
    "workloadpriorityclasses": "WorkloadPriorityClass",
}
MANAGED_BY = ("app.kubernetes.io/managed-by", "admitd")


class StartupError(Exception):
    """The daemon cannot start (configuration, CRDs owned by another installation, an unusable log)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    db: Path
    kubeconfig: Path | None = None
    context: str | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 9443
    webhook_url: str | None = None  # register by URL (outside the cluster), e.g. https://127.0.0.1:9443
    webhook_service: tuple[str, str, int] | None = ("admitd-system", "admitd-webhook", 443)
    webhook_failure_policy: str = "Fail"
    register_webhook: bool = True
    cert_dir: Path = Path("certs")
    health_host: str = "0.0.0.0"
    health_port: int = 8080
    local_queue_metrics: bool = False  # Kueue's kueue_local_queue_* on /metrics
    actuation_parallelism: int = 16
    cert_check_s: float = 12 * 3600  # how often the webhook's certificate is checked for renewal
    leader_elect: bool = False
    leader_election_lease: tuple[str, str] = ("admitd-system", "admitd")  # namespace, name of the Lease
    identity: str | None = None  # this replica's name in the Lease (default: host name and a random suffix)
    workload_objects: bool = True  # a kueue.x-k8s.io Workload per managed Job (off for the largest clusters)
    status_qps: float = 50.0  # status writes (Workloads, queue status, Events): sustained rate ...
    status_burst: int = 100  # ... and burst, one token bucket
    status_parallelism: int = 4  # status writes in flight at once


def job_callbacks(
    observer: Observer, actuator: JobActuator, kind: str
) -> tuple[Callable[[str, Obj], None], Callable[[list[Obj]], None]]:
    """A job watch's event and list callbacks: the actuator follows what it may have to undo, then the observer."""
    listed_by_observer = observer.jobs_listed_of(kind)

    def on_event(type_: str, obj: Obj) -> None:
        actuator.seen(type_, obj)
        observer.job_event(type_, obj)

    def on_listed(items: list[Obj]) -> None:
        actuator.listed(items)
        listed_by_observer(items)

    return on_event, on_listed


class KubeCluster:
    """The real Cluster: observations from the Reflectors through the Observer, actuations as Job patches."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.actuator = JobActuator(client)
        self.inbox: Inbox | None = None

    def connect(self, inbox: Inbox) -> None:
        self.inbox = inbox

    def deliver(self, observed: Observed) -> None:
        """The Observer's output: what the watches saw, for the ingest stage."""
        if self.inbox is None:
            raise RuntimeError("the cluster is not connected to the ingest stage")
        self.inbox.put(observed)

    async def carry_out(self, order: Order) -> Outcome:
        return await self.actuator.carry_out(order)


async def check_crds(client: KubeClient) -> str:
    """The kueue.x-k8s.io version to watch; refuses CRDs that another installation (Kueue) owns."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterqueues.kueue.x-k8s.io"
    try:
        crd = await client.request("GET", path)
    except NotFound:
        raise StartupError(
            "the kueue.x-k8s.io CRDs are not installed: apply them first (kubectl apply --server-side -k config/crd)"
        ) from None
    labels = (crd.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
        owner = labels.get(MANAGED_BY[0]) or "not admitd"
        raise StartupError(
            f"the kueue.x-k8s.io CRDs belong to another installation ({MANAGED_BY[0]}={owner}), probably Kueue: "
            "admitd will not run beside it. Uninstall Kueue, or run admitd on another cluster."
        )
    versions = [v for v in crd.get("spec", {}).get("versions", []) if v.get("storage")]
    return str(versions[0]["name"]) if versions else "v1beta2"


class Daemon:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.ready = False
        self.stopping = False
        self._cert_pem = b""
        self._cert_names: list[str] = []
        self._ssl: ssl.SSLContext | None = None
        self._leading = False
        self._new_jobs: webhook.NewJobPolicy | None = None

    async def run(self) -> int:
        opts = self.options
        clock = WallClock()
        state = self._replay(opts.db)
        cfg = await load_configuration(opts.kubeconfig, opts.context)
        status_client = KubeClient(cfg, user_agent="admitd-status")  # its own count of requests, and its own pool
        async with KubeClient(cfg) as client, status_client, await EventStore.open(opts.db) as store:
            store.observer = metrics.write_observer()
            version = await check_crds(client)
            recorder = Recorder(store, state, clock, wait_durable=True)
            status = StatusWriter(
                status_client,
                state,
                clock,
                workload_objects=opts.workload_objects,
                qps=opts.status_qps,
                burst=opts.status_burst,
                parallelism=opts.status_parallelism,
                synced=metrics.status_synced,
            )
            metrics.status_backlog_is(status.backlog)
            recorder.listeners.append(status.listener)
            cluster = KubeCluster(client)
            cluster.actuator.assume_unsuspending(k for k, o in state.outbox.items() if o.action is Action.UNSUSPEND)
            actuate = Actuate(recorder, cluster, clock, parallelism=opts.actuation_parallelism)
            pods_ready = opts.engine.wait_for_pods_ready
            admit = Admit(recorder, AdmissionEngine(opts.engine), clock, actuate.submit, pods_ready=pods_ready)
            ingest = Ingest(recorder, admit.notify)
            cluster.connect(ingest)
            elector = None
            if opts.leader_elect:
                namespace, name = opts.leader_election_lease
                elector = LeaderElector(client, namespace=namespace, name=name, identity=opts.identity or _identity())
                admit.gate = actuate.gate = elector.is_leader
            metrics.leader_is(elector.is_leader if elector is not None else lambda: self._leading)
            starter = _suspender(actuate)
            observer = Observer(
                state,
                cluster.deliver,
                clock,
                on_started_unsuspended=starter,
                is_leader=elector.is_leader if elector is not None else lambda: True,
                unsuspending=cluster.actuator.unsuspending,
                pods_ready=pods_ready is not None,
                jobs=opts.engine.jobs,
            )
            # What the API server answers to a suspension is observed like a watch event (see JobActuator).
            cluster.actuator.on_suspended = partial(observer.job_event, "MODIFIED")
            cluster.actuator.on_suspended_unsent = observer.suspended_unsent

            def watch(
                resource: Resource, on_event: Callable[[str, Obj], None], on_listed: Callable[[list[Obj]], None]
            ) -> Reflector:
                return Reflector(
                    client, resource, on_event=on_event, on_listed=on_listed, on_restart=metrics.watch_restarted
                )

            def object_watch(plural: str, path: str, kind: str) -> Reflector:
                return watch(Resource(plural, path), observer.object_event, observer.objects_listed(kind))

            queue_reflectors = [
                object_watch("namespaces", "/api/v1/namespaces", "Namespace"),
                object_watch("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses", "PriorityClass"),
                *(
                    object_watch(plural, f"/apis/kueue.x-k8s.io/{version}/{plural}", kind)
                    for plural, kind in KUEUE_KINDS.items()
                ),
            ]
            all_jobs = JobWatches(  # Jobs, and the distributed kinds this cluster serves
                [
                    watch(Resource(k.plural, k.list_path), *job_callbacks(observer, cluster.actuator, k.kind))
                    for k in (JOB, *await served_distributed_kinds(client))
                ]
            )
            # waitForPodsReady: no timeout is decided before the Jobs are listed and what was observed is in the
            # fold (a Job that became ready while admitd was down must not be evicted on its restart).
            admit.deadlines_gate = lambda: all_jobs.synced.is_set() and not ingest.has_work()
            web_runner = await self._serve_health(opts)
            self._new_jobs = webhook.new_job_policy(opts.engine.jobs, state)
            webhook_runner = await self._serve_webhook(client, opts)
            main = asyncio.current_task()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop, main)
            stages = (ingest, actuate, CountedCycles(admit, recorder, metrics.admission_attempt))
            try:
                others = [(f"watch-{r.resource.name}", r.run()) for r in queue_reflectors]
                others.append(("startup", self._startup(queue_reflectors, all_jobs)))
                others.append(("lead", self._lead(client, opts, elector, admit, actuate, status, all_jobs.synced)))
                others.append(("certificate", self._renew_certificate(client, opts)))
                others.append(("systemd-watchdog", systemd.watchdog_loop()))  # pings only while the loops run
                due = {"actuate": actuate.next_due, "admit": admit.next_due}
                await run_concurrently(stages, clock, others=others, due=due)
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
                log.info("stopping: committing the batch in flight")
            except StageCrashed as e:
                if isinstance(e.error, LeadershipLost):
                    log.warning("lost the lease; exiting so that a restart comes back as a standby")
                return 1
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
                with contextlib.suppress(asyncio.CancelledError):
                    await recorder.catch_up()
                await web_runner.cleanup()
                if webhook_runner is not None:
                    await webhook_runner.cleanup()
        log.info("stopped", seq=state.seq, api_requests=client.requests, status_requests=status_client.requests)
        return 0

    def _stop(self, task: asyncio.Task[Any] | None) -> None:
        self.stopping = True
        systemd.stopping()
        if task is not None:
            task.cancel()

    @staticmethod
    def _replay(db: Path) -> State:
        if not db.exists():
            return State()
        started = time.perf_counter()
        with LogReader(db) as reader:
            state = replay(reader)
        metrics.replayed(time.perf_counter() - started)
        log.info("replayed the log", seq=state.seq, workloads=len(state.workloads), outbox=len(state.outbox))
        return state

    async def _startup(self, queue_reflectors: list[Reflector], jobs: JobWatches) -> None:
        """Queue objects listed first, then Jobs; ready after that. Then watch Jobs. (The leader resumes the
        outbox once the Jobs are listed: `_lead`.)"""
        await asyncio.gather(*(r.synced.wait() for r in queue_reflectors))
        jobs_task = asyncio.create_task(jobs.run(), name="watch-jobs")
        await jobs.synced.wait()
        self.ready = True
        systemd.ready()  # Type=notify: READY=1 exactly when /readyz turns 200
        log.info("ready: replayed and listed")
        await jobs_task

    async def _serve_health(self, opts: RunOptions) -> web.AppRunner:
        from daemon.obs.metrics import CONTENT_TYPE, LogMetrics, MetricsNotReady  # noqa: PLC0415

        log_metrics = LogMetrics(
            opts.db,
            local_queue_metrics=opts.local_queue_metrics,
            fair_sharing=opts.engine.fair_sharing,
            follow_every=2.0,
        ).start()  # folds and renders in the background, so that a scrape only joins the text

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            return web.Response(text="ready" if self.ready else "not ready", status=200 if self.ready else 503)

        async def scrape(_: web.Request) -> web.Response:
            try:
                body = await asyncio.to_thread(log_metrics.render)
            except MetricsNotReady as e:
                return web.Response(text=str(e), status=503)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/metrics", scrape)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, opts.health_host, opts.health_port).start()
        log.info("serving /healthz, /readyz and /metrics", port=opts.health_port)
        return runner

    async def _serve_webhook(self, client: KubeClient, opts: RunOptions) -> web.AppRunner | None:
        names = ["127.0.0.1", "localhost", socket.gethostname()]
        if opts.webhook_service is not None:
            ns, name, _ = opts.webhook_service
            names += [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
        cert = webhook.load_or_make_cert(opts.cert_dir, names)
        runner = web.AppRunner(webhook.routes({webhook.CONVERT_PATH: review}, self._new_jobs), access_log=None)
        await runner.setup()
        self._ssl = webhook.ssl_context(cert, opts.cert_dir)
        await web.TCPSite(runner, opts.webhook_host, opts.webhook_port, ssl_context=self._ssl).start()
        log.info("webhook serving", port=opts.webhook_port)
        self._cert_pem, self._cert_names = cert.cert_pem, names
        return runner

    async def _renew_certificate(self, client: KubeClient, opts: RunOptions) -> None:
        """Rotate the serving certificate while running: every `cert_check_s`, a certificate with less than 30 days
        left is replaced; new TLS handshakes use the new one, and the leader writes it into the caBundles."""
        while True:
            await asyncio.sleep(opts.cert_check_s)
            cert = webhook.load_or_make_cert(opts.cert_dir, self._cert_names)
            if cert.cert_pem == self._cert_pem or self._ssl is None:
                continue
            self._ssl.load_cert_chain(opts.cert_dir / "webhook.crt", opts.cert_dir / "webhook.key")
            self._cert_pem = cert.cert_pem
            log.info("webhook certificate renewed", not_after=cert.not_after.isoformat())
            if self._leading:
                await self._register_webhooks(client, opts)

    async def _register_webhooks(self, client: KubeClient, opts: RunOptions) -> None:
        """Point the API server's mutating webhook and the CRDs' conversion at this replica (the leader's job)."""
        if not opts.register_webhook:
            return
        service = None if opts.webhook_url else opts.webhook_service
        body = webhook.webhook_configuration(
            self._cert_pem,
            url=opts.webhook_url,
            service=service,
            failure_policy=opts.webhook_failure_policy,
            namespaces=opts.engine.jobs.namespace_selector,  # every job there: the default LocalQueue, unlabelled jobs
        )
        rng = random.Random()
        for attempt in itertools.count():
            try:
                await webhook.register(client, body)
                await webhook.point_conversion(client, self._cert_pem, url=opts.webhook_url, service=service)
                return
            except (Temporary, Conflict) as e:
                delay = backoff_s(attempt, rng)
                log.warning("registering the webhooks failed; retrying", error=str(e), retry_in_s=round(delay, 2))
                await asyncio.sleep(delay)

    async def _lead(
        self,
        client: KubeClient,
        opts: RunOptions,
        elector: LeaderElector | None,
        admit: Admit,
        actuate: Actuate,
        status: StatusWriter,
        jobs_synced: asyncio.Event,
    ) -> None:
        """Wait for the lease (at once without leader election), then decide, actuate and write status; with
        leader election, keep the lease or exit (LeadershipLost) so that a restart comes back as a standby."""
        if elector is not None:
            log.info("standby: keeping the log current; waiting for the lease", identity=elector.identity)
            await elector.elected()
        self._leading = True
        await self._register_webhooks(client, opts)
        await jobs_synced.wait()
        admit.notify(None)
        resumed = actuate.resume()
        log.info("leading: deciding and acting", outbox_resumed=resumed)
        if elector is None:
            await status.run(started=jobs_synced)
            return
        await asyncio.gather(elector.keep(), status.run(started=jobs_synced))


class CountedCycles:
    """The admit stage, each step timed and counted as one admission attempt (`kueue_admission_attempts_total`,
    `_duration_seconds`): `success` when the step appended a WorkloadAdmitted, `inadmissible` otherwise. Wraps
    the stage from the outside, so that daemon.stages knows no metrics."""

    def __init__(self, admit: Admit, recorder: Recorder, attempt: Callable[[bool, float], None]) -> None:
        self.admit = admit
        self.name = admit.name
        self.wake = admit.wake
        self._attempt = attempt
        self._admitted = 0
        recorder.listeners.append(self._count)

    def _count(self, event: Event, _seq: int) -> None:
        if isinstance(event, WorkloadAdmitted):
            self._admitted += 1

    def has_work(self) -> bool:
        return self.admit.has_work()

    async def step(self) -> None:
        before, started = self._admitted, time.perf_counter()
        await self.admit.step()
        self._attempt(self._admitted > before, time.perf_counter() - started)


def _identity() -> str:
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


def _suspender(actuate: Actuate) -> Callable[[str, str, str], None]:
    """A queued Job found running unsuspended (the webhook was bypassed, or down with failurePolicy Ignore) is
    suspended at once, by the actuate stage, so that it never races an admission of the same job."""

    def started_unsuspended(key: str, uid: str, kind: str) -> None:
        log.warning("a queued job started unsuspended; suspending it", job=key, kind=kind)
        actuate.submit(
            Order(
                job=key,
                kind=kind,
                uid=uid,
                decision=0,
                action=Action.SUSPEND,
                cluster_queue="",
                placements=(),
                reason="StartedUnsuspended",
            )
        )

    return started_unsuspended


async def run_daemon(options: RunOptions) -> int:
    try:
        return await Daemon(options).run()
    except (StartupError, KubeError) as e:
        log.error("cannot start", error=str(e))
        raise


__all__ = ["Daemon", "KubeCluster", "RunOptions", "StartupError", "run_daemon"]
