"""What only makes a call cheaper, each switchable: the engine decides exactly the same without them
(tests/unit/test_optimisations_invisible.py checks it on random scenarios)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Optimisations:
    idle: bool = True
    """No cycle at all when nothing waits and nothing drains (`engine.nothing_to_decide`)."""
    memo: bool = True
    """`AdmissionEngine`'s caches across calls: the inadmissible memo per class and the unchanged-queue skip."""
    runs: bool = True
    """Walk a BestEffortFIFO queue through the fold's `PendingIndex`, stepping over runs whose members would all
    be NoFit and write nothing (`walk.Runs`), instead of one workload at a time."""
    lone_holds: bool = True
    """A queue alone in its quota tree (every other queue of the tree offers nothing more in this call) whose head
    was found without candidates in a pass that changed nothing else: every member of that class would, one pass
    each, hold the same room in the same state, seen by nobody, and write the same reason. They step aside
    together in one pass (`Nominator.lone`). Kueue's issue 9715 pattern: a ClusterQueue 10,000 deep whose head does
    not fit took 10,000 passes per call."""


ALL_OPTIMISATIONS = Optimisations()
NO_OPTIMISATIONS = Optimisations(idle=False, memo=False, runs=False, lone_holds=False)
