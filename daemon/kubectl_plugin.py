"""`kubectl admitd ...`: the kubectl plugin (the `kubectl-admitd` command on PATH), in kubectl's words.

    kubectl admitd explain job/NAME [-n NS] [--at TIME] [-o json]
    kubectl admitd history job/NAME [-n NS] [-o json]
    kubectl admitd pending [clusterqueue/NAME | localqueue/NAME -n NS] [--at TIME] [-o json]
    kubectl admitd queues [--at TIME] [-o json]
    kubectl admitd replay --at TIME | --seq N

Each becomes `admitd <command> ... --kube`: asked of the daemon through the API server's service proxy with the
kubeconfig's credentials (kubectl's `--kubeconfig` and `--context` pass on; the namespace defaults to the context's,
else `default`), so RBAC on `services/proxy` decides who may ask. `--server URL` asks a daemon directly instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from daemon.cli import main as admitd_main

COMMANDS = ("explain", "history", "pending", "queues", "replay")
KINDS = {"job": "job", "jobs": "job", "job.batch": "job"}
QUEUE_KINDS = {
    "clusterqueue": "cq",
    "clusterqueues": "cq",
    "cq": "cq",
    "localqueue": "lq",
    "localqueues": "lq",
    "lq": "lq",
}


class PluginError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubectl admitd", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("command", choices=COMMANDS)
    p.add_argument("object", nargs="?", help="job/NAME (explain, history); clusterqueue/NAME or localqueue/NAME")
    p.add_argument("-n", "--namespace")
    p.add_argument("-o", "--output", choices=["json", "text"], default="text")
    p.add_argument("--kubeconfig")
    p.add_argument("--context")
    p.add_argument("--server", metavar="URL", help="ask the daemon at URL directly instead of through the API server")
    p.add_argument("--at", metavar="TIME")
    p.add_argument("--seq", metavar="N")
    p.add_argument("--queue", metavar="NAME", help="as `admitd pending --queue`: a ClusterQueue, or NS/NAME")
    p.add_argument("--service", metavar="NS/[SCHEME:]NAME[:PORT]", help="the daemon's Service, if not the default")
    return p


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (current) context, as kubectl takes it; `default` when it names none."""
    files = [kubeconfig] if kubeconfig else (os.environ.get("KUBECONFIG") or "").split(os.pathsep)
    files = [f for f in files if f] or [str(Path.home() / ".kube" / "config")]
    docs = []
    for f in files:
        try:
            docs.append(yaml.safe_load(Path(f).read_text()) or {})
        except (OSError, yaml.YAMLError):
            continue
    name = context or next((d.get("current-context") for d in docs if d.get("current-context")), None)
    for d in docs:
        for entry in d.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                ns = (entry.get("context") or {}).get("namespace")
                return str(ns) if ns else "default"
    return "default"


def translate(argv: Sequence[str]) -> list[str]:
    """`kubectl admitd ...` as the `admitd` command line it stands for."""
    a = _parser().parse_intermixed_args(argv)
    namespace = a.namespace or context_namespace(a.kubeconfig, a.context)
    out = [a.command]
    kind, _, name = (a.object or "").partition("/")
    if a.command in ("explain", "history"):
        if not a.object:
            raise PluginError(f"{a.command} needs a job: kubectl admitd {a.command} job/NAME [-n NAMESPACE]")
        if not name:
            kind, name = "job", kind  # a bare NAME is a Job, as `kubectl get job NAME`
        if KINDS.get(kind.lower()) != "job" or "/" in name:
            raise PluginError(f"{a.object!r}: expected job/NAME (admitd explains batch/v1 Jobs and its job kinds)")
        out.append(f"{namespace}/{name}")
    elif a.object:
        if a.command != "pending":
            raise PluginError(f"{a.command} takes no object, got {a.object!r}")
        which = QUEUE_KINDS.get(kind.lower())
        if which is None or not name:
            raise PluginError(f"{a.object!r}: expected clusterqueue/NAME or localqueue/NAME")
        out += ["--queue", name if which == "cq" else f"{namespace}/{name}"]
    if a.queue:
        out += ["--queue", a.queue]
    for flag, value in (("--at", a.at), ("--seq", a.seq)):
        if value is not None:
            out.append(f"{flag}={value}")
    if a.output == "json" and a.command != "replay":
        out.append("--json")
    if a.server:
        out += ["--server", a.server]
    else:
        out.append("--kube")
        if a.kubeconfig:
            out += ["--kubeconfig", a.kubeconfig]
        if a.context:
            out += ["--context", a.context]
        if a.service:
            out += ["--service", a.service]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    try:
        words = translate(sys.argv[1:] if argv is None else argv)
    except PluginError as e:
        print(f"kubectl admitd: {e}", file=sys.stderr)
        return 2
    return admitd_main(words)


if __name__ == "__main__":
    sys.exit(main())
