"""Property: at every moment of a random log, the fast path (nearest kept snapshot + tail) equals a plain fold.

Real: the simulator's driver writing snapshots as the daemon does (compressed bodies, the keep rule), the SQLite
event log, `state_at` and `replay(upto=)`. Faked: the cluster (virtual clock); scenarios drawn by hypothesis (the
same strategy as the reproduce property). Snapshots are taken every few events, and the keep ratio is drawn, so
moments fall on, just after and far after kept and pruned snapshots.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain.state import STATE_VERSION, State
from daemon.eventlog import LogReader, codec, replay
from daemon.eventlog import store as eventlog_store
from daemon.eventlog.replay import SNAPSHOT_ZJSON
from daemon.query.moment import state_at
from daemon.sim import run as sim_run
from daemon.sim.scenario import Scenario
from daemon.stages import recorder as stages_recorder
from tests.integration.test_reproduce_property import scenarios


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), every=st.integers(2, 9), ratio=st.sampled_from([0.05, 0.3, 1.0, 5.0]))
def test_every_past_moment_equals_a_plain_fold_to_it(scenario: Scenario, every: int, ratio: float) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(sim_run, "SNAPSHOT_EVERY", every),
        mock.patch.object(stages_recorder, "_CATCH_UP_EVERY", 1),
        mock.patch.object(eventlog_store, "SNAPSHOT_KEEP_RATIO", ratio),
    ):
        db = Path(tmp) / "sim.db"
        asyncio.run(sim_run.run_simulation(scenario, db_path=db, until=600_000))
        conn = sqlite3.connect(db)
        bodies = conn.execute("SELECT seq, body FROM snapshots ORDER BY seq").fetchall()
        conn.close()
        assert all(bytes(b).startswith(SNAPSHOT_ZJSON) for _, b in bodies)
        with LogReader(db) as reader:
            plain = State()
            for event in reader.iter_events():
                plain.apply(codec.decode(event.type, event.version, event.payload, seq=event.seq), event.seq)
                truth = plain.to_snapshot()
                assert state_at(reader, event.seq).to_snapshot() == truth, event.seq
                assert replay(reader, upto=event.seq).to_snapshot() == truth, event.seq
            # The snapshots the fast path started from are the log's, and each decodes to the fold at its seq.
            for seq, _ in bodies:
                found = reader.snapshot_at_or_before(STATE_VERSION, seq)
                assert found is not None and found[0] == seq
            assert reader.check().snapshots == len(bodies)
