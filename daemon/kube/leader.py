"""Leader election with a coordination.k8s.io/v1 Lease: only the leader decides and actuates.

Every replica watches the cluster and keeps its own log current, so a standby takes over within one lease
duration. The holder renews every `renew_s`; a replica takes the Lease when it has not been renewed for
`duration_s`. Writes use the Lease's resourceVersion, so two replicas can never both win one round (the loser gets
409). A leader that cannot renew stops acting `margin_s` before its lease could be taken, so the two never act at
the same time even when the network splits them (as client-go's leader election does, we trust the clocks to be
roughly in step).

Without leader election the daemon takes the same Lease all the same (`claim`), so that two daemons, each with its
own log, never act on one cluster side by side: the second refuses to start while the first renews it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable

from daemon.kube.client import KubeClient, Obj
from daemon.kube.errors import Conflict, KubeError, NotFound, Permanent
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
        self.seen: tuple[str, str] | None = None  # (holder, renewTime) of another holder, as the last round read it
        self.error: KubeError | None = None  # why the last round failed, if it did

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
        self.seen, self.error = None, None
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
                    self.seen = (str(holder), str(spec.get("renewTime")))
                    return self._lost(holder)
                await self.client.request("PUT", f"{self.path}/{self.name}", body=self._body(current, acquire=True))
        except Conflict:
            return self._lost("another replica")
        except KubeError as e:
            self.error = e
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

    async def keep(self, *, lapse_is_loss: bool = True) -> None:
        """Renew for as long as possible; raise LeadershipLost when the lease is lost or cannot be renewed in time,
        so the process exits and restarts as a standby (its log replays; nothing is acted on twice). With
        `lapse_is_loss` False (one daemon, no standby), a lease that lapsed only because the API server could not
        be reached is renewed when it can be: `is_leader` is False meanwhile, so nothing is acted on; only another
        holder ends the run."""
        while True:
            await asyncio.sleep(self.renew_s)
            if await self.try_once() and self.is_leader():
                continue
            if not lapse_is_loss and self.seen is None:
                continue
            raise LeadershipLost(f"lost the lease {self.namespace}/{self.name}; exiting to restart as a standby")

    async def claim(self) -> None:
        """One daemon per cluster (`admitd run` without leader election): take the Lease now, or refuse. A holder
        that no longer renews it (a daemon that was killed) is waited for, at most one lease duration, and the
        Lease taken when it expires; a holder that renews it meanwhile is another daemon at work: LeaseHeld."""
        first: tuple[str, str] | None = None
        deadline = time.monotonic() + self.duration_s + self.renew_s
        while not await self.try_once():
            if isinstance(self.error, Permanent):  # RBAC, a missing namespace: waiting changes nothing
                raise LeaseHeld(
                    f"cannot take the Lease {self.namespace}/{self.name}: {self.error} (one daemon per cluster: "
                    f"create the namespace {self.namespace}, or name another with --leader-election-lease NS/NAME)"
                )
            if self.seen is not None:
                first = first or self.seen
                if self.seen != first or time.monotonic() > deadline:
                    holder, renewed = self.seen
                    raise LeaseHeld(
                        f"another admitd ({holder}) holds the Lease {self.namespace}/{self.name} and renews it "
                        f"(last at {renewed}): one daemon per cluster; stop it, or run both with --leader-elect"
                    )
            elif time.monotonic() > deadline:
                raise LeaseHeld(f"cannot take the Lease {self.namespace}/{self.name}: {self.error}")
            await asyncio.sleep(min(1.0, self.renew_s / 2))

    async def release(self) -> None:
        """Give the Lease up on a clean stop, so that the next daemon takes it at once (client-go's
        ReleaseOnCancel: no holder, a duration of 1 s)."""
        if not self.is_leader():
            return
        self._valid_until = 0.0
        try:
            current = await self.client.request("GET", f"{self.path}/{self.name}")
            if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body = self._body(current, acquire=False)
            body["spec"].update({"holderIdentity": "", "leaseDurationSeconds": 1})
            await self.client.request("PUT", f"{self.path}/{self.name}", body=body)
        except KubeError as e:
            log.warning("could not release the lease; it expires on its own", error=str(e))


class LeadershipLost(RuntimeError):
    pass


class LeaseHeld(RuntimeError):
    """`admitd run` without leader election found another daemon holding the Lease (or could not take it)."""
