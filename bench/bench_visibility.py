"""Kueue's visibility API (issue 25): the pendingworkloads list of a ClusterQueue 10,000 deep, target under 200 ms.

Usage: python -m bench.bench_visibility [--depth 10000] [--runs 9] [--local-queues 10]

The state is a live fold (`State.apply`) of one ClusterQueue with `--local-queues` LocalQueues and `--depth` pending
Jobs (three priorities, creation times spread), plus 29 other ClusterQueues with 100 pending each so that the fold
is not that one queue alone. Measured, each the median (and max) of `--runs`, after one uncounted warm-up:

- `answer`: `daemon.kube.visibility.pending_json` on `State.view()`, the body the server sends, what it does per
  request (each row assembled from its metadata's JSON, kept from one request to the next); also "cold", with
  `visibility._REFS` emptied before each run (every row's metadata made and encoded afresh), which the daemon
  avoids by making each row's metadata when its Job is observed (`remember_us_per_row`: that cost per Job);
  `cpu_ms` beside each: the process's CPU time of the same requests (the machine is shared; wall time is not);
- `https`: the whole round trip to an aiohttp HTTPS server with `daemon.kube.visibility_http`'s routes (TLS trusting
  a front-proxy CA, the client presenting its certificate and X-Remote-User, the SubjectAccessReview answered from
  the Authorizer's cache, as after the first request) in this process, a client on the same loop;
- for the whole list (`limit=depth`), Kueue's default page (no limit: 1,000) and a deep page (`offset=depth-100,
  limit=100`), and one LocalQueue's list (a tenth of the rows, the whole queue walked).

With `--baseline FILE` (another commit's visibility module: `git show REV:daemon/kube/visibility.py > FILE`), the
whole list cold and kept is also answered by that module's `encode_json(cluster_queue_pending(...))`, the two
alternating, CPU time per request, and the two bodies checked equal (`baseline`).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import importlib.util
import json
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from daemon.domain import events as ev
from daemon.domain.model import ClusterQueue, LabelSelector, LocalQueue, PodSet, PriorityClass, Workload
from daemon.domain.state import State
from daemon.eventlog.codec import encode_json
from daemon.kube import certs
from daemon.kube import visibility as vis
from daemon.kube import visibility_http as vh

CQ = "deep"


def fold(depth: int, local_queues: int) -> State:
    state = State()
    seq = 0

    def apply(e: ev.Event) -> None:
        nonlocal seq
        seq += 1
        state.apply(e, seq)

    for name, value in (("high", 1000), ("mid", 100)):
        apply(ev.PriorityClassObserved(priority_class=PriorityClass(name=name, value=value)))
    queues = [(CQ, depth), *((f"other-{i}", 100) for i in range(29))]
    for cq, count in queues:
        apply(ev.ClusterQueueObserved(cluster_queue=ClusterQueue(name=cq, namespace_selector=LabelSelector())))
        lqs = local_queues if cq == CQ else 1
        for q in range(lqs):
            apply(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=f"ns-{cq}", name=f"q{q}", cluster_queue=cq)))
        for i in range(count):
            apply(
                ev.JobObserved(
                    workload=Workload(
                        namespace=f"ns-{cq}",
                        name=f"job-{i:05d}",
                        uid=f"uid-{cq}-{i}",
                        created_at=1_700_000_000_000 + i * 1_000,
                        queue_name=f"q{i % lqs}",
                        priority_class=("high", "mid", None)[i % 3],
                        pod_sets=(PodSet(name="main", count=1, requests={"nvidia.com/gpu": 1000, "cpu": 4000}),),
                    )
                )
            )
    assert len(state.view().pending_by_cq[CQ]) == depth
    return state


def timed(work: Callable[[], object], runs: int) -> dict[str, float]:
    work()  # warm-up, not counted
    times, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        work()
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return {
        "median_ms": round(statistics.median(times), 2),
        "max_ms": round(max(times), 2),
        "cpu_median_ms": round(statistics.median(cpu), 2),
        "cpu_max_ms": round(max(cpu), 2),
    }


def _ca_and_client(at: Path) -> tuple[bytes, tuple[str, str]]:
    """A front-proxy CA and its client certificate (files in `at`)."""
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-front-proxy-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    client = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "front-proxy-client")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = at / "client.crt", at / "client.key"
    cert_file.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca.public_bytes(serialization.Encoding.PEM), (str(cert_file), str(key_file))


class Allow(vh.Authorizer):
    """The API server's SubjectAccessReview answer (allowed); cached by the real Authorizer after the first."""

    def __init__(self) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        self.client = self  # type: ignore[assignment]

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        return {"status": {"allowed": True}}


async def over_https(state: State, paths: dict[str, str], runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-vis-") as tmp:
        ca_pem, client = _ca_and_client(Path(tmp))
        proxy = vh.FrontProxy(ca_pem, frozenset({"front-proxy-client"}), ("X-Remote-User",), ("X-Remote-Group",), ())
        serving = certs.make_serving_cert(["127.0.0.1"])
        tls = certs.ServingTLS(serving, ca_pem)
        app = web.Application()
        vh.add_routes(app, state.view, proxy, Allow())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        context = ssl.create_default_context(cadata=serving.cert_pem.decode())
        context.load_cert_chain(*client)
        out: dict[str, Any] = {}
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
                headers = {"X-Remote-User": "bench", "X-Remote-Group": "system:authenticated"}
                for label, path in paths.items():
                    times, size = [], 0
                    for i in range(runs + 1):
                        t0 = time.perf_counter()
                        async with session.get(f"https://127.0.0.1:{port}{path}", headers=headers) as r:
                            body = await r.read()
                            assert r.status == 200, body[:300]
                        if i:  # the first (connection, SubjectAccessReview) is not counted
                            times.append((time.perf_counter() - t0) * 1000)
                        size = len(body)
                    out[label] = {
                        "median_ms": round(statistics.median(times), 2),
                        "max_ms": round(max(times), 2),
                        "items": len(json.loads(body)["items"]),
                        "bytes": size,
                    }
        finally:
            await runner.cleanup()
        return out


def against(path: Path, state: State, depth: int, runs: int) -> dict[str, Any]:
    """The whole list by this module and by the one at `path`, cold and kept, alternating: CPU ms per request."""
    spec = importlib.util.spec_from_file_location("baseline_visibility", path)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)

    def cpu(work: Callable[[], object]) -> float:
        c0 = time.process_time()
        work()
        return (time.process_time() - c0) * 1000

    def old_cold() -> bytes:
        old._REFS.clear()
        return encode_json(old.cluster_queue_pending(state.view(), CQ, limit=depth))

    def new_cold() -> bytes:
        vis._REFS.clear()
        return vis.cluster_queue_pending_json(state.view(), CQ, limit=depth)

    def old_kept() -> bytes:
        return encode_json(old.cluster_queue_pending(state.view(), CQ, limit=depth))

    def new_kept() -> bytes:
        return vis.cluster_queue_pending_json(state.view(), CQ, limit=depth)

    assert old_cold() == new_cold() and old_kept() == new_kept()  # the same bytes
    cases = {"baseline_cold": old_cold, "cold": new_cold, "baseline_kept": old_kept, "kept": new_kept}
    got: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(runs):
        for k, work in cases.items():
            got[k].append(cpu(work))
    return {
        k: {"cpu_median_ms": round(statistics.median(v), 1), "cpu_max_ms": round(max(v), 1)} for k, v in got.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--local-queues", type=int, default=10)
    parser.add_argument("--baseline", type=Path, help="another commit's daemon/kube/visibility.py, to pair with")
    args = parser.parse_args()
    t0 = time.perf_counter()
    state = fold(args.depth, args.local_queues)
    folded_s = time.perf_counter() - t0
    depth = args.depth
    cases: dict[str, Callable[[], bytes]] = {
        "whole list (limit=depth)": lambda: vis.cluster_queue_pending_json(state.view(), CQ, limit=depth),
        "default page (1,000)": lambda: vis.cluster_queue_pending_json(state.view(), CQ),
        "deep page (last 100)": lambda: vis.cluster_queue_pending_json(state.view(), CQ, limit=100, offset=depth - 100),
        "one LocalQueue (whole)": lambda: vis.local_queue_pending_json(state.view(), f"ns-{CQ}", "q0", limit=depth),
    }

    def cold() -> bytes:
        vis._REFS.clear()  # as for a queue's first request: every row's metadata made afresh
        return vis.cluster_queue_pending_json(state.view(), CQ, limit=depth)

    result: dict[str, Any] = {
        "depth": depth,
        "local_queues": args.local_queues,
        "pending_in_fold": sum(len(v) for v in state.view().pending_by_cq.values()),
        "fold_s": round(folded_s, 1),
        "runs": args.runs,
        "answer": {k: timed(f, args.runs) for k, f in cases.items()},
    }
    result["answer"]["whole list, cold (no metadata cached)"] = timed(cold, args.runs)
    vis._REFS.clear()
    gc.disable()
    result["answer"]["whole list, cold, collector paused (how much is GC)"] = timed(cold, args.runs)
    gc.enable()
    vis._REFS.clear()
    t0 = time.perf_counter()
    prepared = vh.remember_pending(state.view())  # what admitd run --visibility does at start (and per Job observed)
    result["remember_us_per_row"] = round((time.perf_counter() - t0) * 1e6 / prepared, 1)
    root = f"{vis.ROOT}/clusterqueues/{CQ}/pendingworkloads"
    paths = {
        "whole list (limit=depth)": f"{root}?limit={depth}",
        "default page (1,000)": root,
        "deep page (last 100)": f"{root}?limit=100&offset={depth - 100}",
        "one LocalQueue (whole)": f"{vis.ROOT}/namespaces/ns-{CQ}/localqueues/q0/pendingworkloads?limit={depth}",
    }
    result["https"] = asyncio.run(over_https(state, paths, args.runs))
    if args.baseline is not None:
        result["baseline"] = against(args.baseline, state, depth, args.runs)
    result["target"] = "whole list under 200 ms"
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
