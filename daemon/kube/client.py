"""A thin client for the Kubernetes API: raw JSON in and out, decoded with msgspec, never into generated models.

kubernetes_asyncio loads the configuration (a kubeconfig, or the pod's service account in the cluster) and gives
the TLS settings; requests go through one aiohttp session. Watch streams are read line by line and decoded as raw
dicts, which costs microseconds an object where the generated model classes cost milliseconds (STYLE: state and
speed). Every failure is raised as a `daemon.kube.errors` error naming the request.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration

from daemon.kube.errors import KubeError, Temporary, from_status

Obj = dict[str, Any]

_decode = msgspec.json.Decoder().decode
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def pointer_token(key: str) -> str:
    """`key` as one reference token of a JSON pointer (RFC 6901): `~` and `/` escaped, e.g. for an annotation."""
    return key.replace("~", "~0").replace("/", "~1")


def resolve_pointer(obj: Any, pointer: str) -> Any:
    """The value at the JSON pointer `pointer` (RFC 6901) in `obj`, or None where the path does not exist."""
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, Mapping):
            obj = obj.get(token)
        elif isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        else:
            return None
    return obj


async def load_configuration(kubeconfig: Path | None, context: str | None = None) -> Configuration:
    """From `kubeconfig` if given, else $KUBECONFIG or ~/.kube/config, else the in-cluster service account."""
    cfg = Configuration()
    try:
        if kubeconfig is not None:
            await kube_config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=cfg)
        else:
            try:
                await kube_config.load_kube_config(context=context, client_configuration=cfg)
            except (kube_config.ConfigException, FileNotFoundError, TypeError):
                kube_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (kube_config.ConfigException, OSError) as e:
        where = kubeconfig or "the default kubeconfig or the in-cluster service account"
        raise KubeError("CONFIG", str(where), None, f"cannot load the Kubernetes configuration: {e}") from e
    return cfg


def _ssl_context(cfg: Configuration) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class KubeClient:
    """Requests against one API server. `request` for single calls, `stream` for a watch."""

    def __init__(self, cfg: Configuration, *, user_agent: str = "admitd") -> None:
        self.cfg = cfg
        self.host = str(cfg.host or "").rstrip("/")
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self.requests = 0  # every request sent, for the requests-per-job figure

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=_ssl_context(self.cfg), limit=64)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        # kubernetes_asyncio keeps a kubeconfig's or the service account's token (already "Bearer ...") under
        # "BearerToken"; "authorization" is where older releases kept it.
        token = await self.cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        deadline_s: float = 30.0,
    ) -> Obj:
        """One call; the decoded JSON body. Raises a `daemon.kube.errors` error for any failure."""
        data = None if body is None else json.dumps(body).encode()
        headers = await self._headers(content_type if data is not None else None)
        self.requests += 1
        try:
            async with self.session.request(
                method,
                self.host + path,
                params=params,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=deadline_s),
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise from_status(method, path, resp.status, _status_message(raw))
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise Temporary(method, path, None, f"API server unreachable: {type(e).__name__}: {e}") from e
        decoded = _decode(raw) if raw else {}
        if not isinstance(decoded, dict):
            raise Temporary(method, path, None, "the API server answered with something other than an object")
        return decoded

    async def stream(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        server_timeout_s: float,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """A watch: (type, object) per line until the server closes the stream after `server_timeout_s` seconds.
        `on_open` is called once the API server has accepted the watch (a quiet stream may send nothing for long)."""
        headers = await self._headers(None)
        self.requests += 1
        try:
            async with self.session.get(
                self.host + path,
                params={**params, "watch": "true"},
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=server_timeout_s + 30),
            ) as resp:
                if resp.status >= 400:
                    raise from_status("WATCH", path, resp.status, _status_message(await resp.read()))
                if on_open is not None:
                    on_open()
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            event = _decode(line)
                            yield event.get("type", ""), event.get("object") or {}
        except (aiohttp.ClientError, TimeoutError, OSError, asyncio.IncompleteReadError) as e:
            raise Temporary("WATCH", path, None, f"stream broke: {type(e).__name__}: {e}") from e


def _status_message(raw: bytes) -> str:
    try:
        body = _decode(raw)
    except msgspec.DecodeError:
        return raw[:200].decode(errors="replace")
    if isinstance(body, dict):
        reason, message = body.get("reason", ""), body.get("message", "")
        return f"{reason}: {message}" if reason else str(message)
    return str(body)[:200]
