"""admitd under systemd: the notifications daemon/obs/systemd.py sends, and systemd/admitd.service itself.

Real: a Unix datagram socket standing in for systemd's NOTIFY_SOCKET (what arrives there is exactly what systemd
would read), the `sdnotify` package that sends, and, when the machine has it, `systemd-analyze` checking the unit
file (verify, and its offline security assessment). Faked: systemd itself (no service manager runs here), so
WATCHDOG_USEC is set by the test, as systemd would set it. The last test runs the real `admitd run` against the
local control plane (marker `cluster`) and reads READY, WATCHDOG and STOPPING from the socket.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.obs import systemd
from tests.integration.conftest import REPO, KubeCluster

UNIT = REPO / "systemd" / "admitd.service"


@pytest.fixture
def notify_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A bound datagram socket as NOTIFY_SOCKET (in a short /tmp path: sun_path holds 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="admitd-notify-"))
    path = folder / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    systemd.notifier.cache_clear()
    yield sock
    if systemd.notifier.cache_info().currsize:
        systemd.notifier().close()
    systemd.notifier.cache_clear()
    sock.close()
    shutil.rmtree(folder)


def received(sock: socket.socket, *, wait: float = 0.0) -> list[str]:
    """Every datagram waiting on the socket (after `wait` seconds)."""
    time.sleep(wait)
    out: list[str] = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.settimeout(5)


def test_ready_watchdog_and_stopping_arrive_as_systemd_reads_them(notify_socket: socket.socket) -> None:
    assert systemd.ready() is True
    assert systemd.watchdog() is True
    assert systemd.stopping() is True
    assert received(notify_socket) == ["READY=1", "WATCHDOG=1", "STOPPING=1"]


def test_an_abstract_socket_address_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"admitd-test-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        n = systemd.Notifier()
        assert n.ready() is True
        n.close()
        assert sock.recv(4096) == b"READY=1"


def test_without_notify_socket_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    n = systemd.Notifier()
    assert not n.enabled
    assert (n.ready(), n.watchdog(), n.stopping()) == (False, False, False)
    asyncio.run(asyncio.wait_for(n.watchdog_loop(), 1))  # returns at once instead of pinging nobody


def test_a_socket_that_went_away_is_logged_not_raised(notify_socket: socket.socket) -> None:
    n = systemd.Notifier()
    notify_socket.close()  # systemd gone: the send fails with ECONNREFUSED
    assert n.ready() is False
    n.close()


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        pytest.param("2000000", None, 1.0, id="WatchdogSec=2s pings every second"),
        pytest.param("30000000", "self", 15.0, id="WATCHDOG_PID names this process"),
        pytest.param("30000000", "1", None, id="WATCHDOG_PID names another process"),
        pytest.param(None, None, None, id="no WatchdogSec"),
        pytest.param("0", None, None, id="WatchdogSec=0 disables it"),
        pytest.param("soon", None, None, id="not a number"),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
) -> None:
    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(os.getpid()) if value == "self" else value)
    assert systemd.watchdog_interval() == expected


async def test_the_watchdog_loop_pings_at_half_the_interval_while_it_runs(
    notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # WatchdogSec=0.2s: a ping every 0.1 s
    task = asyncio.create_task(systemd.watchdog_loop())
    await asyncio.sleep(0.55)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pings = received(notify_socket)
    assert set(pings) == {"WATCHDOG=1"}
    assert 5 <= len(pings) <= 7, pings
    await asyncio.sleep(0.3)
    assert received(notify_socket) == [], "a stopped loop must not ping"


# -- the unit file ------------------------------------------------------------------------------------------------


def _unit_with_local_admitd(tmp_path: Path) -> Path:
    """The unit with ExecStart's program pointed at this checkout's admitd: verify checks that it exists."""
    text, n = re.subn(r"/opt/admitd/bin/admitd", str(REPO / ".venv" / "bin" / "admitd"), UNIT.read_text())
    assert n == 1, "ExecStart should name /opt/admitd/bin/admitd once"
    unit = tmp_path / "admitd.service"
    unit.write_text(text)
    return unit


def test_the_unit_asks_for_what_the_daemon_does() -> None:
    lines = {line.strip() for line in UNIT.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for wanted in (
        "Type=notify",
        "StateDirectory=admitd",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",  # bad input (the CLI's exit 2) is not retried forever
        "KillSignal=SIGTERM",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DynamicUser=yes",
        "SystemCallFilter=@system-service",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    ):
        assert wanted in lines, wanted
    assert any(line.startswith("WatchdogSec=") for line in lines)
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert " run " in exec_start and "--db" not in exec_start, "the log must default to $STATE_DIRECTORY/admitd.db"


@pytest.mark.parametrize(
    ("config_text", "problem"),
    [
        pytest.param(None, "cannot read", id="missing"),
        pytest.param("fairSharing: [", "invalid YAML", id="bad YAML"),
        pytest.param(
            "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing: 3\n",
            "fairSharing",
            id="bad field",
        ),
    ],
)
def test_a_bad_configuration_exits_with_the_status_the_unit_does_not_restart_on(
    tmp_path: Path, config_text: str | None, problem: str
) -> None:
    prevent = {
        line.strip().partition("=")[2]
        for line in UNIT.read_text().splitlines()
        if line.strip().startswith("RestartPreventExitStatus=")
    }
    config = tmp_path / "admitd.yaml"
    if config_text is not None:
        config.write_text(config_text)
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "admitd"), "run", "--db", str(tmp_path / "a.db"), "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert str(done.returncode) in prevent, (done.returncode, prevent, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and problem in lines[0], done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_systemd_analyze_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    unit = _unit_with_local_admitd(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == "", "every warning (an unknown key, a bad value) counts as a failure"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_systemd_analyze_rates_the_hardening_ok(tmp_path: Path) -> None:
    unit = _unit_with_local_admitd(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for admitd\.service: ([0-9.]+) (\w+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    # systemd's scale: 0 (all restricted) .. 10 (none); a unit with no hardening at all rates 9.6 UNSAFE.
    assert float(found.group(1)) <= 2.0 and found.group(2) == "OK", found.group(0)


# -- the real daemon ----------------------------------------------------------------------------------------------


@pytest.mark.cluster
def test_the_daemon_notifies_ready_pings_and_stops(
    kube_cluster: KubeCluster, notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.integration.daemon_harness import Daemon, install_crds, kubectl  # noqa: PLC0415 - cluster tests only

    install_crds(kube_cluster)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # the daemon's environment is copied from ours
    daemon = Daemon(kube_cluster, tmp_path)
    try:
        daemon.start()  # returns once /readyz answers 200
        first = received(notify_socket)
        assert first.count("READY=1") == 1 and set(first) <= {"READY=1", "WATCHDOG=1"}, first
        pings = received(notify_socket, wait=2.2)  # WatchdogSec=1s: a ping every 0.5 s
        assert 3 <= pings.count("WATCHDOG=1") <= 6 and "READY=1" not in pings, pings
        assert daemon.stop() == 0, daemon.stderr.read_text()[-3000:]
        assert "STOPPING=1" in received(notify_socket)
    finally:
        if daemon.proc is not None:
            daemon.kill()
        kubectl(
            kube_cluster,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
