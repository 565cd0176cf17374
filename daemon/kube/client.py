"""A thin client for the Kubernetes API: raw JSON in and out, decoded with msgspec, never into generated models.

kubernetes_asyncio loads the configuration (a kubeconfig, or the pod's service account in the cluster) and gives
the TLS settings; requests go through one aiohttp session. Watch streams are read line by line and decoded as raw
dicts, which costs microseconds an object where the generated model classes cost milliseconds (STYLE: state and
speed). Every failure is raised as a `daemon.kube.errors` error naming the request.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from daemon.kube.credentials import CredentialError, ExecPlugin, Rotating, TokenFile
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


SERVICE_TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
SERVICE_CA_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


def _kubeconfig_files(kubeconfig: Path | None) -> list[Path]:
    """`kubeconfig`, else the files $KUBECONFIG lists (that exist), else ~/.kube/config if it exists."""
    if kubeconfig is not None:
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p and Path(p).expanduser().exists()]
    default = Path("~/.kube/config").expanduser()
    return [default] if default.exists() else []


def _named(doc: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any] | None:
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            inner = entry.get(section[:-1])
            return inner if isinstance(inner, Mapping) else {}
    return None


def _merged(files: list[Path]) -> tuple[dict[str, Any], dict[tuple[str, str], Path]]:
    """The kubeconfig `files` as one (the first file that names an entry wins, as in kubectl), and which file named
    each (section, name)."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    origin: dict[tuple[str, str], Path] = {}
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict):
            raise kube_config.ConfigException(f"{path}: not a kubeconfig (a mapping)")
        if not merged.get("current-context"):
            merged["current-context"] = doc.get("current-context")
        for section in ("clusters", "users", "contexts"):
            for entry in doc.get(section) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if isinstance(name, str) and (section, name) not in origin:
                    origin[section, name] = path
                    merged[section].append(entry)
    return merged, origin


def _relative_to(kubeconfig: Path, name: str) -> Path:
    """A file a kubeconfig names: relative names are relative to the kubeconfig's directory, as in kubectl."""
    path = Path(name).expanduser()
    return path if path.is_absolute() else kubeconfig.parent / path


async def _with_rotating_credentials(
    files: list[Path], context: str | None, cfg: Configuration
) -> Configuration | None:
    """When the context's user has an `exec` plugin or a `tokenFile`: the configuration with that credential as a
    refresh hook (run now, so that a failing plugin stops the start). None: the user has neither."""
    merged, origin = _merged(files)
    name = context or merged.get("current-context")
    ctx = _named(merged, "contexts", name) if isinstance(name, str) else None
    user_name = ctx.get("user") if ctx else None
    user = _named(merged, "users", user_name) if isinstance(user_name, str) else None
    if user is None or not ("exec" in user or "tokenFile" in user):
        return None
    assert isinstance(user_name, str) and ctx is not None
    user_file = origin["users", user_name]
    cluster_name = ctx.get("cluster")
    cluster = _named(merged, "clusters", cluster_name) if isinstance(cluster_name, str) else None
    hook: Rotating
    if "exec" in user:
        if not isinstance(user["exec"], Mapping):
            raise CredentialError(f"{user_file}: user {user_name!r}", "exec: not a mapping")
        hook = ExecPlugin(user["exec"], user=user_name, kubeconfig=user_file, cluster=cluster)
    else:
        hook = TokenFile(_relative_to(user_file, str(user["tokenFile"])))
    # kubernetes_asyncio loads the rest (server, TLS) from the same document without the rotating credential: it
    # would read a tokenFile once, and run an exec plugin with no cache and no clear error.
    stripped = {k: v for k, v in user.items() if k not in {"exec", "tokenFile"}}
    merged["users"] = [
        {**e, "user": stripped} if isinstance(e, dict) and e.get("name") == user_name else e for e in merged["users"]
    ]
    base = origin.get(("clusters", cluster_name), user_file) if isinstance(cluster_name, str) else user_file
    loader = KubeConfigLoader(config_dict=merged, active_context=name, config_base_path=str(base.parent))
    await loader.load_and_set(cfg)
    cfg.refresh_api_key_hook = hook
    await hook(cfg)
    return cfg


async def load_configuration(kubeconfig: Path | None, context: str | None = None) -> Configuration:
    """From `kubeconfig` if given, else $KUBECONFIG or ~/.kube/config, else the in-cluster service account.

    Credentials that rotate are reloaded (daemon.kube.credentials): the in-cluster token file and a kubeconfig
    user's `tokenFile` are re-read every minute and after a 401; an `exec` plugin runs again when its token expires.
    """
    cfg = Configuration()
    files = _kubeconfig_files(kubeconfig)
    try:
        if files:
            if await _with_rotating_credentials(files, context, cfg) is None:
                paths = os.pathsep.join(map(str, files))  # kubernetes_asyncio merges a list as kubectl does
                await kube_config.load_kube_config(config_file=paths, context=context, client_configuration=cfg)
        else:
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg,
                token_filename=str(SERVICE_TOKEN_FILE),
                cert_filename=str(SERVICE_CA_FILE),
            )
            token = TokenFile(SERVICE_TOKEN_FILE)  # instead of kubernetes_asyncio's hook: also re-read after a 401
            cfg.refresh_api_key_hook = token
            await token(cfg)
    except CredentialError as e:
        raise KubeError("CONFIG", e.path, None, e.message) from e
    except (kube_config.ConfigException, OSError, yaml.YAMLError) as e:
        where = kubeconfig or (
            os.pathsep.join(map(str, files)) if files else "the default kubeconfig or the in-cluster service account"
        )
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

    def _credential_rotated(self) -> bool:
        """After a 401: True when the credential rotates and will be fetched again for the next request."""
        hook = self.cfg.refresh_api_key_hook
        return isinstance(hook, TokenFile | ExecPlugin) and hook.invalidate()

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
        """One call; the decoded JSON body. Raises a `daemon.kube.errors` error for any failure. A 401 with a
        credential that rotates (a token file, an exec plugin) fetches it again and sends the call once more."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
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
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                raise Temporary(method, path, None, f"API server unreachable: {type(e).__name__}: {e}") from e
            if status == 401 and attempt == 0 and self._credential_rotated():
                continue
            if status >= 400:
                raise from_status(method, path, status, _status_message(raw))
            break
        decoded = _decode(raw) if raw else {}
        if not isinstance(decoded, dict):
            raise Temporary(method, path, None, "the API server answered with something other than an object")
        return decoded

    async def get_raw(
        self, path: str, *, params: Mapping[str, str] | None = None, deadline_s: float = 30.0
    ) -> tuple[int, str, bytes]:
        """One GET whose answer is passed on as it is, whatever its status: (status, content type, body). For what
        the API server relays (a service proxy's answer). Raises Temporary only when the API server is unreachable."""
        for attempt in (0, 1):
            headers = await self._headers(None)
            headers["Accept"] = "application/json, text/plain"
            self.requests += 1
            try:
                async with self.session.get(
                    self.host + path, params=params, headers=headers, timeout=aiohttp.ClientTimeout(total=deadline_s)
                ) as resp:
                    raw, status, kind = await resp.read(), resp.status, resp.content_type
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                raise Temporary("GET", path, None, f"API server unreachable: {type(e).__name__}: {e}") from e
            if status == 401 and attempt == 0 and self._credential_rotated():
                continue
            break
        return status, kind, raw

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
        except KubeError as e:
            if e.status == 401:  # the watch is opened again after a backoff, with the credential fetched anew
                self._credential_rotated()
            raise


def _status_message(raw: bytes) -> str:
    try:
        body = _decode(raw)
    except msgspec.DecodeError:
        return raw[:200].decode(errors="replace")
    if isinstance(body, dict):
        reason, message = body.get("reason", ""), body.get("message", "")
        return f"{reason}: {message}" if reason else str(message)
    return str(body)[:200]
