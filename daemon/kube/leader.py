"""Leader election with a coordination.k8s.io/v1 Lease: only the leader decides and actuates.

Every replica watches the cluster and keeps its own log current, so a standby takes over within one lease
duration. The holder renews every `renew_s`; a replica takes the Lease when it has not been renewed for
`duration_s`. Writes use the Lease's resourceVersion, so two replicas can never both win one round (the loser gets
409). A leader that cannot renew stops acting `margin_s` before its lease could be taken, so the two never act at
the same time even when the network splits them (as client-go's leader election does, we trust the clocks to be
roughly in step).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable

from daemon.kube.client import KubeClient, Obj
from daemon.kube.errors import Conflict, KubeError, NotFound
from daemon.obs.logging import get_logger

log = get_logger("admitd.leader")


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: object) -> float | None:
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_s: float = 15.0,
        renew_s: float = 5.0,
        margin_s: float = 3.0,
        on_elected: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s, self.renew_s, self.margin_s = duration_s, renew_s, margin_s
        self.on_elected = on_elected
        self._valid_until = 0.0  # monotonic: while before this, we hold the lease
        self.transitions = 0

    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    def _body(self, current: Obj | None, acquire: bool) -> Obj:
        now = _now_rfc3339()
        spec = dict((current or {}).get("spec") or {})
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.duration_s),
                "renewTime": now,
            }
        )
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if current else 0)
        meta: Obj = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    async def try_once(self) -> bool:
        """One round: renew our lease or take a free or expired one. True while we lead."""
        started = time.monotonic()
        try:
            try:
                current: Obj | None = await self.client.request("GET", f"{self.path}/{self.name}")
            except NotFound:
                current = None
            spec = (current or {}).get("spec") or {}
            holder = spec.get("holderIdentity")
            if current is None:
                await self.client.request("POST", self.path, body=self._body(None, acquire=True))
            elif holder == self.identity:
                await self.client.request("PUT", f"{self.path}/{self.name}", body=self._body(current, acquire=False))
            else:
                renewed = _parse(spec.get("renewTime"))
                duration = float(spec.get("leaseDurationSeconds") or self.duration_s)
                if holder and renewed is not None and time.time() < renewed + duration:
                    return self._lost(holder)
                await self.client.request("PUT", f"{self.path}/{self.name}", body=self._body(current, acquire=True))
        except Conflict:
            return self._lost("another replica")
        except KubeError as e:
            log.warning("leader election round failed", error=str(e))
            return self.is_leader()
        was = self.is_leader()
        self._valid_until = started + self.duration_s - self.margin_s
        if not was:
            self.transitions += 1
            log.info("became the leader", identity=self.identity, lease=f"{self.namespace}/{self.name}")
            if self.on_elected is not None:
                self.on_elected()
        return True

    def _lost(self, holder: str) -> bool:
        if self.is_leader():
            log.warning("lost the lease", holder=holder)
        self._valid_until = 0.0
        return False

    async def elected(self) -> None:
        """Return once this replica holds the lease (a standby waits here, renewing its claim attempts)."""
        while True:
            if await self.try_once():
                return
            await asyncio.sleep(self.renew_s / 2)

    async def keep(self) -> None:
        """Renew for as long as possible; raise LeadershipLost when the lease is lost or cannot be renewed in time,
        so the process exits and restarts as a standby (its log replays; nothing is acted on twice)."""
        while True:
            await asyncio.sleep(self.renew_s)
            if not await self.try_once() or not self.is_leader():
                raise LeadershipLost(f"lost the lease {self.namespace}/{self.name}; exiting to restart as a standby")


class LeadershipLost(RuntimeError):
    pass
