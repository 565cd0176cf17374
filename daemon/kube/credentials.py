"""Credentials that rotate: a token file re-read as client-go re-reads it, and a kubeconfig's `exec` plugin.

kubernetes_asyncio reads a kubeconfig's `tokenFile` once and runs an `exec` plugin without caching or a clear error;
a daemon that runs for months outlives both. Each source here is a `Configuration.refresh_api_key_hook`: the client
awaits it before every request (`get_api_key_with_prefix`), it sets `api_key["BearerToken"]` and is cheap when
nothing is due. On a 401 the client calls `invalidate()` and, when that says a fresh credential may help, sends the
request once more.

- `TokenFile`: the projected service-account token in the cluster (the kubelet rewrites it well before it expires)
  or a kubeconfig user's `tokenFile`; re-read when the last read is a minute old (client-go's cached file token
  source) or after a 401.
- `ExecPlugin`: a `users[].user.exec` stanza (client.authentication.k8s.io/v1 or v1beta1 ExecCredential), run at
  start and again when the token it gave reaches its `expirationTimestamp` (none: kept until a 401). Its failure is
  one line naming the kubeconfig, the user and the command.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import Configuration

from daemon.kube.errors import Temporary

TOKEN_FILE_REFRESH_S = 60.0  # client-go's cachedFileTokenSource re-reads the file after a minute
EXEC_TIMEOUT_S = 60.0
EXEC_API_VERSIONS = frozenset({"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"})
_STDERR_CHARS = 300


class CredentialError(Temporary):
    """A credential could not be had (an unreadable token file, a failing exec plugin). Temporary: mid-run, the caller
    retries it with backoff as any unreachable API server; at start-up it is the one line `admitd run` exits 2 on."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__("CREDENTIALS", where, None, message)


def _set_token(cfg: Configuration, token: str) -> None:
    cfg.api_key["BearerToken"] = f"Bearer {token}"
    cfg.api_key_prefix.pop("BearerToken", None)


class TokenFile:
    """A bearer token read from `path`, re-read when `refresh_s` have passed since the last read or after a 401."""

    def __init__(
        self, path: Path, *, refresh_s: float = TOKEN_FILE_REFRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path, self.refresh_s, self.clock = path, refresh_s, clock
        self._read_at: float | None = None
        self._token = ""
        self.reads = 0

    async def __call__(self, cfg: Configuration) -> None:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.refresh_s:
            try:
                token = self.path.read_text(encoding="utf-8").strip()
            except OSError as e:
                raise CredentialError(str(self.path), f"cannot read the token file: {e.strerror or e}") from e
            if not token:
                raise CredentialError(str(self.path), "the token file is empty")
            self._token, self._read_at = token, now
            self.reads += 1
        _set_token(cfg, self._token)

    def invalidate(self) -> bool:
        """After a 401: read the file again before the next request. True: the retry may get a different token."""
        self._read_at = None
        return True


class ExecPlugin:
    """A kubeconfig user's `exec` credential plugin, run when there is no cached token or the cached one expired."""

    def __init__(
        self,
        exec_config: Mapping[str, Any],
        *,
        user: str,
        kubeconfig: Path,
        cluster: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.user, self.kubeconfig, self.clock = user, kubeconfig, clock
        self.where = f"{kubeconfig}: user {user!r}"
        command = exec_config.get("command")
        if not isinstance(command, str) or not command:
            raise CredentialError(self.where, "exec: no command")
        # As client-go: a command with a path separator is relative to the kubeconfig's directory; a bare name is
        # looked up on PATH.
        if os.sep in command and not os.path.isabs(command):
            command = str(kubeconfig.parent / command)
        args = exec_config.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise CredentialError(self.where, "exec: args must be a list of strings")
        self.argv = [command, *args]
        self.shown = shlex.join(self.argv)
        self.api_version = str(exec_config.get("apiVersion") or "")
        if self.api_version not in EXEC_API_VERSIONS:
            raise CredentialError(
                self.where,
                f"exec: apiVersion {self.api_version or '(none)'!r} of {self.shown!r} is not one of "
                f"{', '.join(sorted(EXEC_API_VERSIONS))}",
            )
        if exec_config.get("interactiveMode") == "Always":
            raise CredentialError(
                self.where, f"exec: {self.shown!r} has interactiveMode Always, and admitd never has a terminal"
            )
        self.env = dict(os.environ)
        for item in exec_config.get("env") or []:
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise CredentialError(self.where, f"exec: an env entry of {self.shown!r} has no name: {item!r}")
            self.env[item["name"]] = str(item.get("value", ""))
        spec: dict[str, Any] = {"interactive": False}
        if exec_config.get("provideClusterInfo") and cluster is not None:
            spec["cluster"] = {
                k2: cluster[k1]
                for k1, k2 in (
                    ("server", "server"),
                    ("certificate-authority-data", "certificate-authority-data"),
                    ("tls-server-name", "tls-server-name"),
                    ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
                )
                if k1 in cluster
            }
        self.env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        )
        self._token: str | None = None
        self._expires_at: float | None = None  # seconds since the epoch; None: no expiry given
        self._lock = asyncio.Lock()
        self.runs = 0

    def _fresh(self) -> bool:
        return self._token is not None and (self._expires_at is None or self.clock() < self._expires_at)

    async def __call__(self, cfg: Configuration) -> None:
        if not self._fresh():
            async with self._lock:  # many requests at the expiry: one run
                if not self._fresh():
                    await self._run()
        assert self._token is not None
        _set_token(cfg, self._token)

    def invalidate(self) -> bool:
        self._token = None
        return True

    def _fail(self, what: str) -> CredentialError:
        return CredentialError(self.where, f"exec plugin {self.shown!r} {what}")

    async def _run(self) -> None:
        self.runs += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise self._fail(f"cannot be started: {e.strerror or e}") from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(), EXEC_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise self._fail(f"did not answer within {EXEC_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            said = " ".join(err.decode(errors="replace").split())[:_STDERR_CHARS]
            raise self._fail(f"failed with exit status {proc.returncode}" + (f": {said}" if said else ""))
        try:
            doc = json.loads(out)
        except ValueError as e:
            raise self._fail(f"did not write an ExecCredential (not JSON: {e})") from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise self._fail("did not write an ExecCredential (no kind: ExecCredential)")
        if doc.get("apiVersion") != self.api_version:
            raise self._fail(f"answered with apiVersion {doc.get('apiVersion')!r}, asked for {self.api_version!r}")
        status = doc.get("status")
        if not isinstance(status, dict):
            raise self._fail("wrote an ExecCredential without status")
        token = status.get("token")
        if not isinstance(token, str) or not token:
            if "clientCertificateData" in status:
                raise self._fail("returned a client certificate; admitd takes only a token from an exec plugin")
            raise self._fail("wrote an ExecCredential without status.token")
        expires = status.get("expirationTimestamp")
        self._expires_at = None if expires is None else self._timestamp(expires)
        self._token = token

    def _timestamp(self, text: object) -> float:
        try:
            when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            raise self._fail(f"wrote status.expirationTimestamp {text!r}, not an RFC 3339 time") from None
        if when.tzinfo is None:
            raise self._fail(f"wrote status.expirationTimestamp {text!r} without a time zone")
        return when.timestamp()


Rotating = TokenFile | ExecPlugin
