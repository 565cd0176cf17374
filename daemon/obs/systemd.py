"""systemd's service notifications for `admitd run` under `Type=notify` (systemd/admitd.service).

READY=1 once the log is replayed and the cluster listed (when /readyz turns 200), WATCHDOG=1 at half of WatchdogSec
while the loops run, STOPPING=1 on SIGTERM. Without NOTIFY_SOCKET (not under systemd, or in a pod) every call does
nothing. The datagrams are sent by the `sdnotify` package; here is only when to send them.
"""

from __future__ import annotations

import asyncio
import functools
import os

from sdnotify import SystemdNotifier  # type: ignore[import-untyped]  # 59 lines of pure Python, no type hints

from daemon.obs.logging import get_logger

log = get_logger("admitd.systemd")


def watchdog_interval() -> float | None:
    """Seconds between two WATCHDOG=1 pings (half of WatchdogSec), or None when systemd set no watchdog for this
    process (sd_watchdog_enabled(3): WATCHDOG_USEC, and WATCHDOG_PID when set must be our PID)."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec.isdigit() or int(usec) == 0 or (pid is not None and pid != str(os.getpid())):
        return None
    return int(usec) / 2 / 1_000_000


class Notifier:
    """One connection to NOTIFY_SOCKET, or none at all. A failed send is logged, never raised: the daemon goes on,
    and systemd's own timeouts (start, watchdog) decide what a missing notification means."""

    def __init__(self) -> None:
        self.address = os.environ.get("NOTIFY_SOCKET") or None
        self._sd: SystemdNotifier | None = None
        if self.address is not None:
            try:
                self._sd = SystemdNotifier(debug=True)  # debug: raise instead of dropping errors silently
            except OSError as e:
                log.warning("cannot reach systemd's notify socket", socket=self.address, error=str(e))

    @property
    def enabled(self) -> bool:
        return self._sd is not None

    def send(self, state: str) -> bool:
        if self._sd is None:
            return False
        try:
            self._sd.notify(state)
        except OSError as e:
            log.warning("systemd notification not sent", state=state, error=str(e))
            return False
        return True

    def ready(self) -> bool:
        return self.send("READY=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        if self._sd is not None:
            self._sd.socket.close()
            self._sd = None

    async def watchdog_loop(self) -> None:
        """Ping at half of WatchdogSec for as long as this task runs (the daemon runs it beside its loops, so a
        crashed loop, which ends them all, or a blocked event loop stops the pings); returns at once without one."""
        interval = watchdog_interval()
        if interval is None or not self.enabled:
            return
        log.info("systemd watchdog on", ping_every_s=interval)
        while True:
            self.watchdog()
            await asyncio.sleep(interval)


@functools.cache
def notifier() -> Notifier:
    """The process's notifier, made on first use (NOTIFY_SOCKET is read then)."""
    return Notifier()


def ready() -> bool:
    return notifier().ready()


def watchdog() -> bool:
    return notifier().watchdog()


def stopping() -> bool:
    return notifier().stopping()


async def watchdog_loop() -> None:
    await notifier().watchdog_loop()
