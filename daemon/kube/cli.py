"""`admitd run [--kubeconfig F] [--db F] ...`: the daemon's command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from daemon.cliargs import whole_number
from daemon.domain.admission import EngineConfig
from daemon.kube.errors import KubeError
from daemon.manifests import ManifestError
from daemon.manifests.config import load_config


def _service(text: str) -> tuple[str, str, int]:
    try:
        namespace, name, port = text.split("/")
        return namespace, name, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME/PORT, got {text!r}") from None


def _lease(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _webhook_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme != "https" or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected https://HOST[:PORT], got {text!r}")
    return text


_positive_int = whole_number(1, "expected at least 1, got {value}")
_seq = whole_number(1, "a seq is at least 1, got {value}", 2**63 - 1, "a seq is at most 2^63 - 1, got {value}")


def add_run_parser(sub: Any, *, db_default: Path, db_help: str) -> None:
    listen = os.environ.get("POD_IP") or "127.0.0.1"  # never every interface unless asked: the pod's, or loopback
    p = sub.add_parser(
        "run",
        help="the daemon: watch the cluster, admit Jobs against quota, record every decision in the event log",
        description="Run admitd against a Kubernetes cluster (a kubeconfig, or the pod's service account).",
    )
    p.add_argument("--db", type=Path, default=db_default, help=db_help)
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--config", type=Path, metavar="FILE", help="admitd settings (a Kueue Configuration file)")
    p.add_argument("--webhook-port", type=int, default=9443, help="HTTPS port of the webhook server (default 9443)")
    p.add_argument(
        "--webhook-host",
        default=listen,
        help="address the webhook server binds (default: $POD_IP in a pod, else 127.0.0.1; 0.0.0.0 for every "
        "interface, e.g. on a host whose API server runs elsewhere)",
    )
    p.add_argument(
        "--webhook-url",
        type=_webhook_url,
        help="register the webhook by URL, for running outside the cluster (e.g. https://admitd.example.com:9443); "
        "the self-made certificate names its host",
    )
    p.add_argument(
        "--webhook-service",
        type=_service,
        default=("admitd-system", "admitd-webhook", 443),
        metavar="NS/NAME/PORT",
        help="the Service in front of the webhook inside the cluster (default admitd-system/admitd-webhook/443)",
    )
    p.add_argument(
        "--webhook-failure-policy",
        choices=["Fail", "Ignore"],
        default="Fail",
        help="while admitd is down: Fail refuses new Jobs in the managed namespaces (default, as Kueue); Ignore "
        "creates them unsuspended and admitd suspends the managed ones when it is back",
    )
    p.add_argument(
        "--no-register-webhook",
        action="store_true",
        help="do not patch the webhook configurations and the CRDs' conversion (caBundle, URL or Service)",
    )
    p.add_argument(
        "--create-webhook-configurations",
        action="store_true",
        help="outside the cluster, for development: create the Mutating- and ValidatingWebhookConfiguration admitd "
        "when missing (needs create on them; config/ ships them and its RBAC does not grant it)",
    )
    p.add_argument(
        "--cert-dir",
        type=Path,
        default=Path("certs"),
        help="where the self-made webhook certificate is kept; holding tls.crt and tls.key (and ca.crt), as "
        "cert-manager's Secret mounted, the operator's certificate: used as is and reloaded when it changes",
    )
    p.add_argument(
        "--cert-secret",
        type=_lease,
        metavar="NS/NAME",
        help="share one serving certificate between replicas in this kubernetes.io/tls Secret: created when "
        "missing, renewed by the leader, reloaded by every replica (the HA overlay, config/ha)",
    )
    p.add_argument(
        "--visibility",
        action="store_true",
        help="serve Kueue's visibility API (visibility.kueue.x-k8s.io pendingworkloads) on the webhook's HTTPS port "
        "for the API server's aggregation layer (config/components/visibility); also featureGates.VisibilityOnDemand "
        "in --config. Off by default",
    )
    p.add_argument("--health-port", type=int, default=8080, help="port of /healthz, /readyz and /metrics (8080)")
    p.add_argument(
        "--health-host",
        default=listen,
        help="address of the health server (default: $POD_IP in a pod, else 127.0.0.1)",
    )
    p.add_argument(
        "--metrics-auth",
        action="store_true",
        help="serve /metrics on the webhook's HTTPS port instead, only to callers whose bearer token the API server "
        "authenticates and authorizes (get on the non-resource URL /metrics), as Kueue's metrics endpoint",
    )
    p.add_argument(
        "--ui",
        action="store_true",
        help="serve the read-only web view at /ui/ beside the answers (health port; the HTTPS port with "
        "--metrics-auth); each viewer's bearer token is checked by the API server: queue figures to those who may "
        "list clusterqueues, a namespace's jobs to those who may get its workloads; also webUI.enable in --config. "
        "Off by default",
    )
    p.add_argument(
        "--ui-past-memory",
        type=_past_mib,
        default=None,
        metavar="MIB",
        help="memory the web view's timeline of the past (its pages at past moments, from memory instead of the "
        "log's snapshots) may take, in MiB (default 128); with less it covers fewer moments (the others read the file)",
    )
    p.add_argument(
        "--local-queue-metrics",
        action="store_true",
        help="also serve Kueue's kueue_local_queue_* metrics (off by default, as Kueue's LocalQueueMetrics)",
    )
    p.add_argument(
        "--no-workload-objects",
        action="store_true",
        help="write no kueue.x-k8s.io Workload per Job (saves 2 to 4 API requests a Job, see bench/RESULTS.md; "
        "queue status and Events stay); for the largest clusters",
    )
    p.add_argument("--status-qps", type=float, default=50.0, help="status writes per second, sustained (default 50)")
    p.add_argument("--status-burst", type=int, default=100, help="status writes in a burst (default 100)")
    p.add_argument(
        "--status-parallelism",
        type=_positive_int,
        default=4,
        help="status writes in flight at once (default 4); what the writer can do when the API server is slow",
    )
    p.add_argument(
        "--estimate-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="record every pending workload's estimated start (workload.estimated, when new or moved) at most once "
        "per SECONDS (default 60; 0: never), for admitd eta-report to score",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of a coordination.k8s.io Lease decides and acts",
    )
    p.add_argument(
        "--leader-election-lease",
        type=_lease,
        default=("admitd-system", "admitd"),
        metavar="NS/NAME",
        help="the Lease (default admitd-system/admitd)",
    )
    p.add_argument("--identity", help="this replica's name in the Lease (default: host name and a random suffix)")
    p.add_argument(
        "--accept-chain-break",
        type=_seq,
        action="append",
        default=[],
        metavar="SEQ",
        help="run on a log whose hash chain is broken at SEQ (the seq the refusal names; repeat for several): the "
        "acceptance is recorded in the log, and later starts accept that break without the flag",
    )
    p.add_argument(
        "--admission-key-file",
        type=Path,
        metavar="FILE",
        help="the key admitd signs its admission notes with (made on first start when missing; default: "
        "admission.key beside --db). Replicas must share it: mount one Secret in each",
    )
    p.add_argument(
        "--admitd-username",
        action="append",
        default=[],
        metavar="USER",
        help="a user name the validating webhook lets change a queued job's admission state, besides the one the "
        "API server knows admitd by (a SelfSubjectReview); repeatable",
    )
    p.set_defaults(func=_cmd_run)


_past_mib = whole_number(1, "--ui-past-memory must be at least 1 (MiB), got {value}")


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        engine, warnings = (EngineConfig(), ()) if args.config is None else load_config(args.config)
    except ManifestError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"admitd: warning: {line}", file=sys.stderr)
    # The daemon (aiohttp, the Kubernetes client, cryptography) loads only for `run`: every other command's
    # start-up stays light (it cost `admitd explain` about 1.3 s).
    from daemon.kube.run import RunOptions, StartupError, run_daemon  # noqa: PLC0415

    options = RunOptions(
        db=args.db,
        kubeconfig=args.kubeconfig,
        context=args.context,
        engine=engine,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        webhook_url=args.webhook_url,
        webhook_service=args.webhook_service,
        webhook_failure_policy=args.webhook_failure_policy,
        register_webhook=not args.no_register_webhook,
        create_webhook_configurations=args.create_webhook_configurations,
        cert_dir=args.cert_dir,
        cert_secret=args.cert_secret,
        health_host=args.health_host,
        health_port=args.health_port,
        metrics_auth=args.metrics_auth,
        local_queue_metrics=args.local_queue_metrics,
        ui=args.ui or engine.web_ui,
        ui_past_bytes=None if args.ui_past_memory is None else args.ui_past_memory * 2**20,
        leader_elect=args.leader_elect,
        leader_election_lease=args.leader_election_lease,
        identity=args.identity,
        workload_objects=not args.no_workload_objects,
        status_qps=args.status_qps,
        status_burst=args.status_burst,
        status_parallelism=args.status_parallelism,
        estimate_every_ms=max(0, int(args.estimate_every * 1000)),
        accept_chain_breaks=frozenset(args.accept_chain_break),
        admission_key_file=args.admission_key_file or args.db.parent / "admission.key",
        admitd_usernames=tuple(args.admitd_username),
        visibility=args.visibility or engine.visibility_on_demand,
    )
    try:
        return asyncio.run(run_daemon(options))
    except (StartupError, KubeError) as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
