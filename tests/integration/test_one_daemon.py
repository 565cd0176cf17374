"""One daemon per cluster, on the real local control plane (marker `cluster`); nothing is faked.

Two `admitd run` processes without --leader-elect, each with its own log, against one cluster: the first takes the
Lease, the second refuses to start (exit 2, one line naming the holder) while the first renews it. A clean stop
gives the Lease up (the next daemon starts at once); a daemon killed and restarted on its own log is the same holder
and takes its Lease back at once.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, install_crds, kubectl


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.mark.timeout(180)
def test_a_second_daemon_without_leader_election_refuses_to_start(crds: KubeCluster, tmp_path: Path) -> None:
    name = f"admitd-one-{uuid.uuid4().hex[:8]}"
    lease = ("--leader-election-lease", f"default/{name}")
    first = Daemon(crds, tmp_path / "first", extra=lease).start()
    try:
        holder = json.loads(kubectl(crds, "get", "lease", "-n", "default", name, "-o", "json"))["spec"]
        assert holder["holderIdentity"], "the first daemon holds the Lease although it runs without --leader-elect"
        second = Daemon(crds, tmp_path / "second", extra=lease)
        started = time.monotonic()
        with pytest.raises(AssertionError, match="the daemon exited with 2"):
            second.start()
        assert time.monotonic() - started < 30, "refused within a renewal or two"
        lines = [line for line in second.stderr.read_text().splitlines() if line.startswith("admitd: ")]
        expected = (
            rf"admitd: another admitd \({re.escape(holder['holderIdentity'])}\) holds the Lease default/{name} and "
            r"renews it \(last at [0-9T:.Z-]+\): one daemon per cluster; stop it, or run both with --leader-elect"
        )
        assert len(lines) == 1 and re.fullmatch(expected, lines[0]), lines
        assert "Traceback" not in second.stderr.read_text()
        assert not second.db.exists() or second.events() == [], "the refused daemon appended nothing"
        assert first.ready(), "the first daemon runs on"
        # Killed, then restarted on its own log: the same holder, back at once (no wait for the Lease to expire).
        first.kill()
        started = time.monotonic()
        first.start()
        assert time.monotonic() - started < 12, "the restarted daemon waited for its own Lease"
        # A clean stop gives the Lease up: a daemon with another log starts at once.
        assert first.stop() == 0
        released = json.loads(kubectl(crds, "get", "lease", "-n", "default", name, "-o", "json"))["spec"]
        assert released.get("holderIdentity", "") == ""
        third = Daemon(crds, tmp_path / "third", extra=lease)
        started = time.monotonic()
        third.start()
        assert time.monotonic() - started < 12
        assert third.stop() == 0
    finally:
        if first.proc is not None:
            first.kill()
        kubectl(crds, "delete", "lease", "-n", "default", name, "--ignore-not-found")
