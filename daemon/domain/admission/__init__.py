"""The admission engine: one pure function from a read-only `ClusterView` to decision events, Kueue v0.17's
scheduling cycle in numbered phases (`cycle`), each phase a module owning its own state:

    engine        decide(), AdmissionEngine: the caches across calls
    cycle         Kueue's schedule(): 1 route, 2 ledger, 3 passes (a nominate, b order, c process, d end), 4 memo
    routing       1: unrouted workloads, drains, stopped and inactive queues, prechecks
    ledger        2: the call's snapshot of the quota tree: claims, holds, real usage, admissions
    walk          3a: a ClusterQueue's heap, its sticky preemptors, the walk by runs
    nominate      3a: each queue's head for the pass
    evaluate      3a: flavors, preemption search, partial admission, waiting for evictions
    process       3c: admit, preempt, wait, hold
    memo          4: Kueue's inadmissible set across calls
    reasons, decisions, outcome, optimisations: what the phases write and share

Kueue's semantics unless a module says otherwise; tests/reference/kueue_model.py is the reference, and the
README's "The engine's contract with Kueue" lists where admitd deliberately differs.
"""

from daemon.domain.admission.engine import AdmissionEngine, decide
from daemon.domain.admission.optimisations import ALL_OPTIMISATIONS, NO_OPTIMISATIONS, Optimisations
from daemon.domain.config import EngineConfig

__all__ = ["ALL_OPTIMISATIONS", "NO_OPTIMISATIONS", "AdmissionEngine", "EngineConfig", "Optimisations", "decide"]
