"""`admitd explain|history|queues|pending|replay|preemptions|usage|eta --server URL` or `--kube`: the same answer
asked of a running daemon instead of read from a file.

`--server URL` asks the daemon directly (`http://127.0.0.1:8080`, its health port; or its HTTPS port under
`--metrics-auth`, with `--token-file` and `--certificate-authority`). `--kube` asks it through the Kubernetes API
server's service proxy with the kubeconfig's credentials (`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/
answers/v1/...`), so RBAC on `services/proxy` decides who may ask. The body is printed as the daemon sent it: the
JSON `--json` prints, or the text the CLI prints (`format=text`). Loaded only for these options: the Kubernetes
client only for `--kube`.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from daemon.answers.answer import JOB_COMMANDS, PREFIX

DEFAULT_SERVICE = "admitd-system/http:admitd-metrics:metrics"
"""config/manager/services.yaml's Service in front of the health port, where `admitd run` serves the answers."""

EXIT_REFUSED = 2  # the daemon or the API server refused the question (4xx): as the CLI's bad input
EXIT_UNREACHABLE = 1  # nobody answered, or the answer failed (5xx)


def _service(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    parts = name.split(":")
    if not sep or not namespace or not name or len(parts) not in (1, 2, 3) or not all(parts):
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/[SCHEME:]NAME[:PORT], got {text!r}")
    return namespace, name


def _server(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise argparse.ArgumentTypeError(f"expected http[s]://HOST[:PORT] (a daemon's answers port), got {text!r}")
    return text.rstrip("/")


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """`--server` / `--kube` and their options on a read command's parser."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        type=_server,
        metavar="URL",
        help="ask a running daemon instead of reading --db: its answers port, e.g. http://127.0.0.1:8080",
    )
    where.add_argument(
        "--kube",
        action="store_true",
        help="ask the daemon through the Kubernetes API server's service proxy, with the kubeconfig's credentials "
        "(RBAC: get on services/proxy, the ClusterRole admitd-answers-viewer)",
    )
    parser.add_argument("--kubeconfig", type=Path, help="with --kube: the kubeconfig (default $KUBECONFIG, ~/.kube)")
    parser.add_argument("--context", help="with --kube: the kubeconfig context")
    parser.add_argument(
        "--service",
        type=_service,
        default=_service(DEFAULT_SERVICE),
        metavar="NS/[SCHEME:]NAME[:PORT]",
        help=f"with --kube: the daemon's Service (default {DEFAULT_SERVICE})",
    )
    parser.add_argument("--token-file", type=Path, metavar="FILE", help="with --server: a bearer token to send")
    parser.add_argument(
        "--certificate-authority", type=Path, metavar="FILE", help="with --server https://...: the CA to trust"
    )


def add_simulate_server_options(parser: argparse.ArgumentParser) -> None:
    """`admitd simulate --server URL -f JOB.yaml`: the dry run on a running daemon's state."""
    parser.add_argument(
        "--server",
        type=_server,
        metavar="URL",
        help="dry run (-f) on a running daemon's state instead of --against LOG: its answers port, e.g. "
        "http://127.0.0.1:8080",
    )
    parser.add_argument("--token-file", type=Path, metavar="FILE", help="with --server: a bearer token to send")
    parser.add_argument(
        "--certificate-authority", type=Path, metavar="FILE", help="with --server https://...: the CA to trust"
    )


def remote(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "server", None) or getattr(args, "kube", False))


def request_of(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The answers API path and query parameters for a parsed read command."""
    command: str = args.command
    path = f"{PREFIX}/{command}"
    if command in JOB_COMMANDS:
        namespace, sep, name = str(args.job).partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"{args.job!r}: expected NAMESPACE/JOB, e.g. research/train-a")
        path += f"/{urllib.parse.quote(namespace, safe='')}/{urllib.parse.quote(name, safe='')}"
    params: dict[str, str] = {}
    for name in ("at", "seq", "queue", "since", "by"):
        value = getattr(args, name, None)
        if value is not None:
            params[name] = str(value)
    if command != "replay" and not args.json:
        params["format"] = "text"
    return path, params


def run_remote(args: argparse.Namespace) -> int:
    """Ask, print the answer, and return the exit status (0; 2 refused; 1 unreachable or failed)."""
    if not args.kube and (args.kubeconfig or args.context):
        return _fail("--kubeconfig and --context go with --kube", EXIT_REFUSED)
    try:
        path, params = request_of(args)
    except ValueError as e:
        return _fail(str(e), EXIT_REFUSED)
    if args.kube:
        import asyncio  # noqa: PLC0415

        status, kind, body, where = asyncio.run(_via_kube(args, path, params))
    else:
        status, kind, body, where = _direct(args, path, params)
    return _printed(status, kind, body, where)


def _printed(status: int | None, kind: str, body: bytes, where: str) -> int:
    """The answer on stdout (exit 0), or why there is none on stderr (refused, or the server unreachable)."""
    if status is None:
        return _fail(body.decode(errors="replace"), EXIT_UNREACHABLE)
    if status == 200:
        out = sys.stdout.buffer
        out.write(body if body.endswith(b"\n") else body + b"\n")
        out.flush()
        return 0
    return _fail(f"{where}: {status} {_message(kind, body)}", EXIT_REFUSED if status < 500 else EXIT_UNREACHABLE)


def _fail(message: str, code: int) -> int:
    print(f"admitd: {message}", file=sys.stderr)
    return code


def _message(kind: str, body: bytes) -> str:
    """The daemon's `{"error": {...}}`, the API server's Status, or the first line of whatever came back."""
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip().splitlines()[0] if body.strip() else "(no body)"
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        return str(err.get("message")) + (f" (parameter {err['parameter']})" if err.get("parameter") else "")
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return f"the API server says: {doc.get('reason', '')}: {doc.get('message', '')}"
    return str(doc)[:300]


def post_file(args: argparse.Namespace, command: str, file: Path, *, json_out: bool) -> int:
    """`admitd simulate --server URL -f JOB.yaml`: POST the file to `PREFIX/command`, print the answer, and return
    the exit status (as `run_remote`)."""
    try:
        data = file.read_bytes()
    except OSError as e:
        return _fail(f"{file}: {e.strerror or e}", EXIT_REFUSED)
    params = {"name": file.name} | ({} if json_out else {"format": "text"})
    status, kind, body, where = _direct(args, f"{PREFIX}/{command}", params, data=data)
    return _printed(status, kind, body, where)


def _direct(
    args: argparse.Namespace, path: str, params: dict[str, str], *, data: bytes | None = None
) -> tuple[int | None, str, bytes, str]:
    """GET `path` of the daemon at `args.server` (POST `data` when given)."""
    url = args.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
    headers = {"Accept": "application/json, text/plain"}
    if data is not None:
        headers["Content-Type"] = "application/yaml"
    if args.token_file is not None:
        try:
            headers["Authorization"] = "Bearer " + args.token_file.read_text().strip()
        except OSError as e:
            return None, "", f"{args.token_file}: {e.strerror or e}".encode(), url
    context = None
    if url.startswith("https://"):
        try:
            context = ssl.create_default_context(cafile=args.certificate_authority)
        except (OSError, ssl.SSLError) as e:
            return None, "", f"{args.certificate_authority}: {e}".encode(), url
    try:
        request = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
        with urllib.request.urlopen(request, timeout=60, context=context) as r:
            return r.status, r.headers.get_content_type(), r.read(), args.server
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), e.read(), args.server
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return None, "", f"cannot reach the daemon at {args.server}: {reason}".encode(), url


async def _via_kube(args: argparse.Namespace, path: str, params: dict[str, str]) -> tuple[int | None, str, bytes, str]:
    from daemon.kube.client import KubeClient, load_configuration  # noqa: PLC0415
    from daemon.kube.errors import KubeError  # noqa: PLC0415

    namespace, service = args.service
    proxied = f"/api/v1/namespaces/{namespace}/services/{service}/proxy{path}"
    try:
        cfg = await load_configuration(args.kubeconfig, args.context)
        async with KubeClient(cfg, user_agent="admitd-cli") as client:
            status, kind, body = await client.get_raw(proxied, params=params)
            return status, kind, body, f"{client.host} (Service {namespace}/{service})"
    except KubeError as e:
        return None, "", str(e).encode(), proxied
