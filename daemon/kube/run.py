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
import hashlib
import itertools
import random
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from daemon import metrics
from daemon.answers import http as answers_http
from daemon.answers.answer import PREFIX as ANSWERS_PREFIX
from daemon.answers.answer import Answers, LiveSeqs
from daemon.answers.windows import Windows
from daemon.buildinfo import build_info
from daemon.domain import events as ev
from daemon.domain import trust
from daemon.domain.actuation import Action, Order, inherited_unsuspensions
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.events import Event, WorkloadAdmitted
from daemon.domain.state import State
from daemon.domain.view import ClusterView
from daemon.eventlog import EventStore, LogReader, replay
from daemon.eventlog.errors import ChainBroken, LogNotTrusted
from daemon.kube import certs, guard, visibility_http, webhook
from daemon.kube import status_objects as so
from daemon.kube.actuate import JobActuator, Signer
from daemon.kube.admission_key import AdmissionKeyError, load_or_make_key
from daemon.kube.client import KubeClient, Obj, load_configuration
from daemon.kube.errors import Conflict, KubeError, NotFound, Temporary
from daemon.kube.jobkinds import JOB, JobWatches, served_distributed_kinds
from daemon.kube.leader import LeaderElector, LeadershipLost, LeaseHeld
from daemon.kube.metricsauth import MetricsAuth
from daemon.kube.observe import Observer
from daemon.kube.status import StatusWriter
from daemon.kube.watch import Reflector, Resource, backoff_s
from daemon.manifests.conversion import review
from daemon.obs import systemd
from daemon.obs.logging import get_logger
from daemon.stages.actuate import Actuate, renounce
from daemon.stages.admit import Admit
from daemon.stages.estimate import Estimator
from daemon.stages.ingest import Ingest
from daemon.stages.ports import Inbox, Observed, Outcome, WallClock
from daemon.stages.recorder import Recorder
from daemon.stages.runner import StageCrashed, run_concurrently
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries

if TYPE_CHECKING:
    from daemon.query.moment import Timeline
    from daemon.web.server import WebView

log = get_logger("admitd.run")


def _ui_timeline(budget_bytes: int | None) -> Timeline:
    """The web view's timeline of the past (`--ui`), within `budget_bytes` (None: the web view's default)."""
    from daemon.query.moment import Timeline  # noqa: PLC0415  (only with --ui)
    from daemon.web.server import DAEMON_PAST_BUDGET_BYTES  # noqa: PLC0415

    return Timeline(budget_bytes=DAEMON_PAST_BUDGET_BYTES if budget_bytes is None else budget_bytes)


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
    webhook_host: str = "127.0.0.1"  # the CLI's default: the pod's IP in a pod ($POD_IP), else loopback
    webhook_port: int = 9443
    webhook_url: str | None = None  # register by URL (outside the cluster), e.g. https://127.0.0.1:9443
    webhook_service: tuple[str, str, int] | None = ("admitd-system", "admitd-webhook", 443)
    webhook_failure_policy: str = "Fail"
    register_webhook: bool = True
    create_webhook_configurations: bool = False  # outside the cluster only: create them when missing
    cert_dir: Path = Path("certs")  # self-made certificate kept here, or the operator's tls.crt/tls.key/ca.crt
    cert_secret: tuple[str, str] | None = None  # namespace, name: the replicas' shared kubernetes.io/tls Secret
    cert_reload_s: float = 5.0  # how often the operator's files or the shared Secret are read again
    health_host: str = "127.0.0.1"
    metrics_auth: bool = False  # /metrics on the webhook's HTTPS port, for callers RBAC allows (TokenReview + SAR)
    health_port: int = 8080
    local_queue_metrics: bool = False  # Kueue's kueue_local_queue_* on /metrics
    ui: bool = False  # the read-only web view (daemon.web) at /ui/ beside the answers, for callers RBAC allows
    ui_past_bytes: int | None = None  # what its timeline of the past may take (None: DAEMON_PAST_BUDGET_BYTES)
    actuation_parallelism: int = 16  # the actuator's API calls in flight at once
    actuation_lanes: int = 512  # jobs whose orders are carried out at once, each in its own lane
    cert_check_s: float = 12 * 3600  # how often the webhook's certificate is checked for renewal
    leader_elect: bool = False
    leader_election_lease: tuple[str, str] = ("admitd-system", "admitd")  # namespace, name of the Lease
    identity: str | None = None  # this replica's name in the Lease (default: host name and a random suffix)
    workload_objects: bool = True  # a kueue.x-k8s.io Workload per managed Job (off for the largest clusters)
    status_qps: float = 50.0  # status writes (Workloads, queue status, Events): sustained rate ...
    status_burst: int = 100  # ... and burst, one token bucket
    status_parallelism: int = 4  # status writes in flight at once
    estimate_every_ms: int = (
        60_000  # recorded start-time estimates (daemon.stages.estimate): a round at most this often; 0: none
    )
    accept_chain_breaks: frozenset[int] = frozenset()  # seqs at which a broken hash chain is accepted (recorded)
    admission_key_file: Path | None = None  # signs admission notes (`daemon.domain.trust`); default: beside db
    admitd_usernames: tuple[str, ...] = ()  # besides admitd's own (a SelfSubjectReview): may write admission state
    visibility: bool = False  # Kueue's visibility API on the webhook's HTTPS port, for the aggregation layer


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

    def __init__(self, client: KubeClient, sign: Signer | None = None, *, requests_in_flight: int = 16) -> None:
        self.client = client
        self.actuator = JobActuator(client, sign, requests_in_flight=requests_in_flight)
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
        self._tls: certs.ServingTLS | None = None
        self._cert_names: list[str] = []
        self._secret: certs.SharedSecret | None = None
        self._hooks: tuple[webhook.Hook, ...] = (webhook.MUTATING,)
        self._leading = False
        self._new_jobs: webhook.NewJobPolicy | None = None
        self._scrape: Callable[[web.Request], Awaitable[web.Response]] | None = None
        self._elector_is_leader: Callable[[], bool] | None = None  # with --leader-elect, once the elector exists
        self._validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._admitd_users: frozenset[str] = frozenset()
        self._answers: Answers | None = None
        self._client: KubeClient | None = None  # for the web view's TokenReviews and SubjectAccessReviews (--ui)
        self._front_proxy: visibility_http.FrontProxy | None = None  # with --visibility
        self._view: Callable[[], ClusterView] | None = None
        self._feed: CatchingUp | None = None  # the views counting from the log's first event, fed live once caught up
        self._series: QueueSeries | None = None  # with --ui: the web view's plots' series, one of them
        self._timeline: Timeline | None = None  # with --ui: the records over the log (its pages at past moments)
        self._web_view: WebView | None = None

    async def run(self) -> int:
        opts = self.options
        clock = WallClock()
        state, accepting = self._replay(opts.db, opts.accept_chain_breaks)
        cfg = await load_configuration(opts.kubeconfig, opts.context)
        status_client = KubeClient(cfg, user_agent="admitd-status")  # its own count of requests, and its own pool
        async with KubeClient(cfg) as client, status_client, await EventStore.open(opts.db) as store:
            store.observer = metrics.write_observer()
            metrics.build_info_is(build_info())
            cert = await self._first_cert(client, opts)  # a bad one stops the daemon before anything serves
            recorder = Recorder(store, state, clock, wait_durable=True)
            if accepting:  # before anything else is appended on top of the break
                await self._record_acceptance(recorder, accepting, clock)
            if opts.leader_elect and (renounced := renounce(state.outbox, clock.now())):
                # Every replica starts as a standby: what its log left undone was decided in an earlier term, on a
                # view another leader may have overtaken since; the cluster says what became of it.
                await recorder.append(renounced)
                log.info("starting as a standby: gave up the log's unsettled orders", orders=len(renounced))
            version = await check_crds(client)
            try:
                key = load_or_make_key(opts.admission_key_file or opts.db.parent / "admission.key")
            except AdmissionKeyError as e:
                raise StartupError(str(e)) from e
            own = await _own_username(client, opts.admitd_usernames)
            admitd_users = frozenset(name for name in (own, *opts.admitd_usernames) if name)
            if not admitd_users:
                raise StartupError(
                    "the API server's SelfSubjectReview named no user for admitd: pass --admitd-username"
                )
            log.info("admission state is admitd's to write", users=sorted(admitd_users))
            self._admitd_users = admitd_users
            status = StatusWriter(
                status_client,
                state,
                clock,
                workload_objects=opts.workload_objects,
                qps=opts.status_qps,
                burst=opts.status_burst,
                parallelism=opts.status_parallelism,
                synced=metrics.status_synced,
                dropped=metrics.status_event_dropped,
                queues=Queues.of(state),  # the replayed state's figures, then fed live
            )
            # What counts from the log's first event (Kueue's counters on /metrics; with --ui the plots' series) is
            # folded from the log once, in a worker thread, then fed by the recorder on the daemon's own state and
            # queue figures: one fold in the process (views.follow.CatchingUp). The feed feeds the status writer's
            # queues too, after its parts, so that the series reads the usage as of each event.
            feed = CatchingUp(opts.db, state, status.queues)
            assert feed.state is not None and feed.queues is not None
            fed = metrics.FedMetrics(
                opts.db,
                feed.state,
                feed.queues,
                self._replica_role,
                local_queue_metrics=opts.local_queue_metrics,
                fair_sharing=opts.engine.fair_sharing,
            )
            feed.add(fed)
            if opts.ui:
                self._series = QueueSeries(feed.state, feed.queues)
                feed.add(self._series)
                # The pages at a past moment from memory: every record's versions over the log, told of each event
                # after the fold applied it (the catch-up's state, then the daemon's own after the hand-over).
                self._timeline = _ui_timeline(opts.ui_past_bytes)
                feed.add_folded(self._timeline.observe)
                recorder.listeners.insert(0, feed.folded)
            recorder.projections.insert(0, feed.apply)
            recorder.batches.append(feed.tick)
            self._feed = feed
            metrics.status_backlog_is(status.backlog)
            recorder.listeners.append(status.listener)
            cluster = KubeCluster(client, partial(trust.sign, key), requests_in_flight=opts.actuation_parallelism)
            cluster.actuator.assume_unsuspending(inherited_unsuspensions(state.outbox))
            actuate = Actuate(recorder, cluster, clock, parallelism=opts.actuation_lanes)
            pods_ready = opts.engine.wait_for_pods_ready
            admit = Admit(recorder, AdmissionEngine(opts.engine), clock, actuate.submit, pods_ready=pods_ready)
            ingest = Ingest(recorder, admit.notify)
            cluster.connect(ingest)
            namespace, name = opts.leader_election_lease
            if opts.leader_elect:
                elector = LeaderElector(client, namespace=namespace, name=name, identity=opts.identity or _identity())
            else:
                # One daemon per cluster: take the Lease before anything is watched or acted on, or refuse.
                identity = opts.identity or _own_identity(opts.db)
                elector = LeaderElector(client, namespace=namespace, name=name, identity=identity)
                try:
                    await elector.claim()
                except LeaseHeld as e:
                    raise StartupError(str(e)) from None
            admit.gate = actuate.gate = elector.is_leader
            metrics.leader_is(elector.is_leader)
            self._elector_is_leader = elector.is_leader if opts.leader_elect else None
            starter = _suspender(actuate)
            observer = Observer(
                state,
                cluster.deliver,
                clock,
                on_started_unsuspended=starter,
                is_leader=elector.is_leader if opts.leader_elect else lambda: True,
                unsuspending=cluster.actuator.unsuspending,
                pods_ready=pods_ready is not None,
                jobs=opts.engine.jobs,
                admission_key=key,
            )
            # What the API server answers to a suspension is observed like a watch event (see JobActuator).
            cluster.actuator.on_suspended = partial(observer.job_event, "MODIFIED")
            cluster.actuator.on_suspended_unsent = observer.suspended_unsent
            cluster.actuator.on_suspending = observer.suspending

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
            # The Job controller's FailedCreate Events: an admitted Job whose pods cannot be created (a missing
            # PriorityClass or ServiceAccount) is recorded, so that explain and history say why it does not run.
            # Workloads: a user's `spec.active: false` (kubectl kueue stop workload) and its undoing, once the
            # Jobs are listed (a Workload names its Job).
            workloads = watch(
                Resource("workloads", f"/apis/{so.GROUP}/{so.VERSION}/workloads"),
                observer.workload_event,
                observer.workloads_listed,
            )
            failed_create = watch(
                Resource("events", "/api/v1/events", "involvedObject.kind=Job,reason=FailedCreate"),
                observer.pod_event,
                observer.pods_events_listed,
            )
            all_jobs = JobWatches(  # Jobs, and the distributed kinds this cluster serves
                [
                    watch(Resource(k.plural, k.list_path), *job_callbacks(observer, cluster.actuator, k.kind))
                    for k in (JOB, *await served_distributed_kinds(client))
                ]
            )
            # waitForPodsReady: no timeout is decided before the Jobs are listed and what was observed is in the
            # fold (a Job that became ready while admitd was down must not be evicted on its restart).
            admit.deadlines_gate = lambda: all_jobs.synced.is_set() and not ingest.has_work()
            # The answers API (daemon.answers): the live fold at the present, the file for past moments.
            live_seqs = LiveSeqs()
            recorder.listeners.append(live_seqs.apply)
            # Preemptions and usage over the log's last 8 days: a part of the one catch-up fold (from where their
            # retention begins), then fed live with the rest of the feed.
            windows = Windows()
            feed.add_late(windows)
            self._answers = Answers(
                opts.db, state=state, settle=recorder.catch_up, live_seqs=live_seqs, windows=windows
            )
            estimator = Estimator(
                recorder,
                clock,
                lambda: windows.durations() if windows.runtimes is not None else None,
                every_ms=opts.estimate_every_ms,
                config=opts.engine,
            )
            estimator.gate = elector.is_leader
            self._client = client
            if opts.visibility:  # the front proxy's CA before the HTTPS server starts: its TLS trusts it
                try:
                    self._front_proxy = await visibility_http.load_front_proxy(client)
                except visibility_http.VisibilityConfigError as e:
                    raise StartupError(str(e)) from e
                self._view = state.view  # the live fold, as the answers at the present
                # Each pending row's metadata made before any list asks for it: the replayed ones now, then each
                # Job as it is observed.
                kept = visibility_http.remember_pending(state.view())
                recorder.listeners.append(visibility_http.remember_observed)
                log.info("visibility API: pending rows prepared", rows=kept)
            web_runner = await self._serve_health(opts, fed)
            self._new_jobs = webhook.new_job_policy(opts.engine.jobs, state)
            self._validate = partial(
                guard.validation_response, admitd=admitd_users, policy=self._new_jobs, held=state.workloads.__contains__
            )
            webhook_runner = await self._serve_webhook(client, opts, cert)
            main = asyncio.current_task()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop, main)
            role = self._replica_role

            def attempt(admitted: bool, seconds: float) -> None:
                metrics.admission_attempt(admitted, seconds, role())

            stages = (ingest, actuate, CountedCycles(admit, recorder, attempt))
            try:
                others = [(f"watch-{r.resource.name}", r.run()) for r in queue_reflectors]
                others.append(("startup", self._startup(queue_reflectors, all_jobs)))
                others.append(("watch-events", self._after(all_jobs.synced, failed_create.run)))
                if opts.workload_objects:
                    others.append(("watch-workloads", self._after(all_jobs.synced, workloads.run)))
                others.append(("lead", self._lead(client, opts, elector, admit, actuate, status, all_jobs)))
                others.append(("certificate", self._renew_certificate(client, opts)))
                others.append(("systemd-watchdog", systemd.watchdog_loop()))  # pings only while the loops run
                others.append(("views", self._keep_views(feed, fed)))
                if opts.estimate_every_ms > 0:
                    others.append(("estimate", estimator.run()))
                due = {"actuate": actuate.next_due, "admit": admit.next_due}
                await run_concurrently(stages, clock, others=others, due=due)
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
                log.info("stopping: committing the batch in flight")
            except StageCrashed as e:
                if isinstance(e.error, LeadershipLost):
                    log.warning("lost the lease; exiting so that a restart comes back as a standby")
                if isinstance(e.error, webhook.RegistrationError | certs.CertError):
                    raise StartupError(str(e.error)) from None
                return 1
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
                with contextlib.suppress(asyncio.CancelledError):
                    await recorder.catch_up()
                if self.stopping:  # a clean stop gives the Lease up: the next daemon need not wait for it
                    with contextlib.suppress(asyncio.CancelledError):
                        await elector.release()
                feed.stop()
                await web_runner.cleanup()
                await webhook_runner.cleanup()
                self._answers.close()
                fed.close()
        log.info("stopped", seq=state.seq, api_requests=client.requests, status_requests=status_client.requests)
        return 0

    def _stop(self, task: asyncio.Task[Any] | None) -> None:
        self.stopping = True
        systemd.stopping()
        if task is not None:
            task.cancel()

    @staticmethod
    def _replay(db: Path, accept: frozenset[int]) -> tuple[State, list[ChainBroken]]:
        """The state the log holds, every row folded checked against the hash chain from the snapshot used. A
        break stops the start (LogNotTrusted, exit 2) unless the log already records it as accepted or the
        operator names its seq in `accept`; the breaks accepted now are returned, to be recorded."""
        if not db.exists():
            return State(), []
        started = time.perf_counter()
        accepting: list[ChainBroken] = []
        with LogReader(db) as reader:
            recorded = reader.accepted_breaks()
            while True:
                try:
                    state = replay(reader, verify=True, accepted=recorded | {b.seq for b in accepting})
                    break
                except ChainBroken as e:
                    if e.seq not in accept or any(b.seq == e.seq for b in accepting):
                        raise LogNotTrusted(e) from e
                    accepting.append(e)
        for seq in sorted(accept - {b.seq for b in accepting} - recorded):
            log.warning("--accept-chain-break: the hash chain is not broken there; nothing accepted", seq=seq)
        metrics.replayed(time.perf_counter() - started)
        log.info(
            "replayed and verified the log",
            seq=state.seq,
            workloads=len(state.workloads),
            outbox=len(state.outbox),
            accepted_breaks=sorted(recorded | {b.seq for b in accepting}),
        )
        return state, accepting

    async def _record_acceptance(self, recorder: Recorder, breaks: list[ChainBroken], clock: WallClock) -> None:
        """The operator's acceptance of each break, as a fact in the log, before anything else is appended."""
        by = self.options.identity or _identity()
        now = clock.now()
        for b in breaks:
            log.warning("running on a broken hash chain, as the operator accepted", seq=b.seq, problem=b.problem)
        await recorder.append(
            [(ev.ChainBreakAccepted(seq=b.seq, problem=b.problem, by=by, at=now), None) for b in breaks]
        )

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

    def _replica_role(self) -> str:
        """Kueue's replica_role: standalone without leader election, else leader or follower as it is now."""
        if not self.options.leader_elect:
            return "standalone"
        is_leader = self._elector_is_leader
        return "leader" if is_leader is not None and is_leader() else "follower"

    @staticmethod
    async def _after(event: asyncio.Event, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """`work` once `event` is set (a watch that reads the fold's Jobs starts after they are listed)."""
        await event.wait()
        await work()

    async def _keep_views(self, feed: CatchingUp, fed: metrics.FedMetrics) -> None:
        """Catch the feed's views up with the log in a worker thread (the metrics' first render with them), hand
        them over to the live state, then render the metrics' text as events come, every METRICS_REFRESH_S, so
        that a scrape only renders the last moments' queues and joins the text."""
        started = time.perf_counter()

        def catch_up() -> int:
            n = feed.catch_up()
            with feed.lock:
                fed.refresh()  # everything rendered here, not on the event loop
                for part in feed.late:
                    if isinstance(part, Windows):
                        part.warm_kept()  # the preemptions' rows encoded: the first answer is then fast
            return n

        folded = await asyncio.to_thread(catch_up)
        feed.hand_over()
        if self._web_view is not None:
            self._web_view.series_ready.set()
        log.info(
            "views caught up: fed live from now on",
            events=folded,
            seq=feed.live_state.seq,
            seconds=round(time.perf_counter() - started, 3),
        )
        paused = self._timeline_paused(False)
        while True:
            await asyncio.sleep(METRICS_REFRESH_S)
            fed.refresh()
            paused = self._timeline_paused(paused)

    def _timeline_paused(self, was: bool) -> bool:
        """Whether the web view's timeline is paused, said in the log when that changes (`Timeline.observe`: its
        next span would take more than a quarter of --ui-past-memory; the pages at moments from then on read the
        file, seconds each on a large log, until it starts again)."""
        timeline = self._timeline
        now = timeline is not None and timeline.paused
        if timeline is not None and now != was:
            if now:
                log.warning(
                    "web view: the timeline of the past paused (the live workloads need more than a quarter of "
                    "--ui-past-memory for a new span): pages at later moments read the file",
                    covered_to_seq=timeline.seq,
                    budget_mib=timeline.budget_bytes // 2**20,
                )
            else:
                log.info("web view: the timeline of the past kept again", from_seq=timeline.seq)
        return now

    async def _serve_health(self, opts: RunOptions, fed: metrics.FedMetrics) -> web.AppRunner:
        async def scrape_fed() -> tuple[int, bytes, str]:
            try:
                parts = fed.parts()  # where the state is folded: on the event loop
            except Exception as e:  # a scrape must answer, and say why it failed
                return metrics.failed(e)
            return await asyncio.to_thread(metrics.scrape, partial(fed.finish, parts))

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            return web.Response(text="ready" if self.ready else "not ready", status=200 if self.ready else 503)

        async def answer(_: web.Request) -> web.Response:
            status, body, content_type = await scrape_fed()
            return web.Response(body=body, status=status, headers={"Content-Type": content_type})

        self._scrape = answer
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        if not opts.metrics_auth:  # with it, /metrics and the answers are served on the webhook's HTTPS port only
            app.router.add_get("/metrics", answer)
            if self._answers is not None:
                answers_http.add_routes(app, self._answers)
                if opts.ui and self._client is not None:
                    self._mount_ui(app, opts)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, opts.health_host, opts.health_port).start()
        log.info(
            "serving /healthz, /readyz" + ("" if opts.metrics_auth else f", /metrics and {ANSWERS_PREFIX}"),
            host=opts.health_host,
            port=opts.health_port,
        )
        return runner

    def _mount_ui(self, app: web.Application, opts: RunOptions) -> None:
        """The web view (`--ui`) at /ui/, reading the daemon's answers; each viewer's token checked by the API
        server (daemon.kube.webauth)."""
        from daemon.kube.webauth import KubePolicy  # noqa: PLC0415  (only with --ui)
        from daemon.web.server import WebView  # noqa: PLC0415

        assert self._answers is not None and self._client is not None
        assert self._feed is not None
        view = WebView(
            opts.db,
            self._answers,
            KubePolicy(self._client),
            root="/ui",
            background_every_s=UI_BACKGROUND_S,
            series=self._series,  # fed by the recorder (`_keep_views` sets series_ready at the hand-over)
            series_lock=self._feed.lock,
            timeline=self._timeline,  # fed by the catch-up, then by the recorder
        )
        if self._feed.live:
            view.series_ready.set()
        self._web_view = view
        view.add_routes(app)
        log.info("serving the web view at /ui/", https=opts.metrics_auth)

    @staticmethod
    def _guarded_scrape(
        auth: MetricsAuth, inner: Callable[[web.Request], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """/metrics for callers the API server vouches for (`--metrics-auth`)."""

        async def scrape(request: web.Request) -> web.Response:
            verdict = await auth.check(request.headers.get("Authorization"))
            if verdict.status != 200:
                return web.Response(text=verdict.reason + "\n", status=verdict.status)
            return await inner(request)

        return scrape

    async def _first_cert(self, client: KubeClient, opts: RunOptions) -> certs.ServingCert:
        self._cert_names = certs.serving_names(opts.webhook_url, opts.webhook_service)
        if opts.cert_secret is not None:
            self._secret = certs.SharedSecret(client, *opts.cert_secret, self._cert_names)
        try:
            return await self._read_cert(opts)
        except certs.CertError as e:
            raise StartupError(str(e)) from None

    async def _serve_webhook(self, client: KubeClient, opts: RunOptions, cert: certs.ServingCert) -> web.AppRunner:
        app = webhook.routes(
            {webhook.CONVERT_PATH: review}, self._new_jobs, self._validate, requested=metrics.webhook_requested
        )
        if opts.metrics_auth and self._scrape is not None:  # the health server (started first) made it
            auth = MetricsAuth(client)
            app.router.add_get("/metrics", self._guarded_scrape(auth, self._scrape))
            if self._answers is not None:
                answers_http.add_routes(app, self._answers, guard=_answers_guard(auth))
                if opts.ui:
                    self._mount_ui(app, opts)
        client_ca = None
        if self._front_proxy is not None and self._view is not None:
            authorizer = visibility_http.Authorizer(client)
            visibility_http.add_routes(
                app, self._view, self._front_proxy, authorizer, requested=metrics.webhook_requested
            )
            client_ca = self._front_proxy.ca_pem
        served = {r.canonical for r in app.router.resources()}
        # The validating configuration is patched once this daemon serves its path (the tenant guard).
        self._hooks = tuple(h for h in (webhook.MUTATING, webhook.VALIDATING) if h.path in served)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            self._tls = certs.ServingTLS(cert, client_ca)
        except certs.CertError as e:
            raise StartupError(str(e)) from None
        await web.TCPSite(runner, opts.webhook_host, opts.webhook_port, ssl_context=self._tls.context).start()
        log.info(
            "webhook serving",
            host=opts.webhook_host,
            port=opts.webhook_port,
            certificate=self._cert_source(opts),
            metrics=opts.metrics_auth,
            visibility=self._front_proxy is not None,
        )
        return runner

    def _cert_source(self, opts: RunOptions) -> str:
        if self._secret is not None:
            return f"Secret {self._secret.where}"
        return str(opts.cert_dir / certs.TLS_CERT) if certs.given_by_operator(opts.cert_dir) else "self-made"

    async def _read_cert(self, opts: RunOptions) -> certs.ServingCert:
        """The certificate to serve now: the shared Secret's (renewed first by the leader when due), the
        operator's files as they are, or the self-made one (renewed when due)."""
        if self._secret is not None:
            if self._leading:
                renewed = await self._secret.renew()
                if renewed is not None:
                    return renewed
            return await self._secret.current()
        if certs.given_by_operator(opts.cert_dir):
            return certs.load_operator_cert(opts.cert_dir)
        return certs.load_or_make_cert(opts.cert_dir, self._cert_names)

    async def _renew_certificate(self, client: KubeClient, opts: RunOptions) -> None:
        """Follow the serving certificate while running: new TLS handshakes use a changed one, and the leader
        writes its CA into the caBundles. The operator's files and the shared Secret are read every
        `cert_reload_s`; the self-made certificate is checked every `cert_check_s` (renewed 30 days before its end).
        A certificate that turns bad is logged and the one in use kept."""
        own = self._secret is None and not certs.given_by_operator(opts.cert_dir)
        while True:
            await asyncio.sleep(opts.cert_check_s if own else opts.cert_reload_s)
            if self._tls is None:
                continue
            try:
                cert = await self._read_cert(opts)
            except certs.CertError as e:
                log.error("the serving certificate cannot be used; keeping the one loaded", error=str(e))
                continue
            except (Temporary, Conflict) as e:
                log.warning("reading the serving certificate failed; retrying", error=str(e))
                continue
            old = self._tls.cert
            if cert == old:
                continue
            new_ca = cert.ca_bundle != old.ca_bundle
            if new_ca and self._leading and self._secret is not None:
                # The Secret's CA trusts the old and the new certificate: the caBundles first, then the switch.
                await self._register_webhooks(client, opts)
            self._tls.load(cert)
            log.info("webhook certificate loaded", not_after=cert.not_after.isoformat(), source=self._cert_source(opts))
            if new_ca and self._leading and self._secret is None:
                await self._register_webhooks(client, opts)

    async def _register_webhooks(self, client: KubeClient, opts: RunOptions) -> None:
        """Point the API server's webhooks and the CRDs' conversion at this daemon, with the caBundle of the
        certificate served now (the leader's job). A configuration that config/ did not install stops the daemon."""
        if not opts.register_webhook or self._tls is None:
            return
        service = None if opts.webhook_url else opts.webhook_service
        ca_bundle = self._tls.cert.ca_bundle
        rng = random.Random()
        for attempt in itertools.count():
            try:
                for hook in self._hooks:
                    await webhook.register(
                        client,
                        hook,
                        ca_bundle,
                        url=opts.webhook_url,
                        service=service,
                        failure_policy=opts.webhook_failure_policy,
                        namespaces=opts.engine.jobs.namespace_selector,  # every job there (the default LocalQueue)
                        create=opts.create_webhook_configurations,
                        match_conditions=webhook.not_admitd(self._admitd_users) if hook is webhook.VALIDATING else (),
                    )
                await webhook.point_conversion(client, ca_bundle, url=opts.webhook_url, service=service)
                if opts.visibility:
                    await visibility_http.register_apiservice(client, ca_bundle)
                return
            except (Temporary, Conflict) as e:
                delay = backoff_s(attempt, rng)
                log.warning("registering the webhooks failed; retrying", error=str(e), retry_in_s=round(delay, 2))
                await asyncio.sleep(delay)

    async def _lead(
        self,
        client: KubeClient,
        opts: RunOptions,
        elector: LeaderElector,
        admit: Admit,
        actuate: Actuate,
        status: StatusWriter,
        jobs: JobWatches,
    ) -> None:
        """Wait for the lease (held already without leader election: `claim`), then decide, actuate and write
        status; keep the lease or exit (LeadershipLost) so that a restart comes back as a standby (or, without
        leader election, refuses to start beside the daemon that took the Lease over)."""
        if opts.leader_elect:
            log.info("standby: keeping the log current; waiting for the lease", identity=elector.identity)
        await elector.elected()
        self._leading = True
        await self._register_webhooks(client, opts)
        await jobs.synced.wait()
        if opts.leader_elect:
            # Its watches may lag, or be down: a job the old leader started just before is to be seen running (and
            # adopted) before this replica decides, not admitted a second time.
            await jobs.relist()
        admit.notify(None)
        resumed = actuate.resume()
        log.info("leading: deciding and acting", outbox_resumed=resumed)

        def regained() -> None:  # a lease that lapsed (the API server out of reach) and was renewed: act again
            admit.notify(None)
            actuate.wake.set()

        elector.on_elected = regained
        await asyncio.gather(elector.keep(lapse_is_loss=opts.leader_elect), status.run(started=jobs.synced))


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


async def _own_username(client: KubeClient, configured: tuple[str, ...]) -> str:
    """Who the API server knows admitd by; the first configured name when it cannot say and some are configured."""
    try:
        return await guard.own_username(client)
    except KubeError as e:
        if configured:
            log.warning("no SelfSubjectReview; only the configured users write admission state", error=str(e))
            return configured[0]
        raise StartupError(
            f"cannot ask the API server who admitd is (a SelfSubjectReview): {e}; pass --admitd-username instead"
        ) from e


METRICS_REFRESH_S = 2.0  # the metrics' text rendered as events come, at most this long after them
UI_BACKGROUND_S = 600.0  # the web view's whole-log answers (estimates, preemptions): at most every 10 min in a daemon


def answer_path(path: str) -> str:
    """The non-resource URL RBAC decides an answer by: `/answers/v1/<command>` (a job's name is not part of it), so
    that a ClusterRole grants commands (`nonResourceURLs: ["/answers/v1/*"]` for all)."""
    parts = path.split("/")
    return "/".join(parts[:4]) if len(parts) > 4 else path


def _answers_guard(auth: MetricsAuth) -> answers_http.Guard:
    """The answers for callers whose bearer token the API server authenticates and authorizes (`--metrics-auth`)."""

    async def guard(request: web.Request) -> web.StreamResponse | None:
        verdict = await auth.check(request.headers.get("Authorization"), answer_path(request.path))
        if verdict.status == 200:
            return None
        body = {"error": {"status": verdict.status, "parameter": None, "message": verdict.reason}}
        return web.json_response(body, status=verdict.status)

    return guard


def _identity() -> str:
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


def _own_identity(db: Path) -> str:
    """Without leader election, the same daemon (this host, this log) is the same holder across restarts: a daemon
    that crashed takes its Lease back at once, while a second daemon with its own log is another holder."""
    return f"{socket.gethostname()}_{hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:8]}"


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
