"""The engine's memory across calls (Kueue's inadmissible set and its equivalence hashing): a class of alike
workloads found unfitting in a ClusterQueue against an untouched tree at generation g is not assessed again while
the tree stays at g; a queue that offered and wrote nothing is skipped while nothing it depends on changes.

Only results computed against a tree untouched in their call are stored, and one generation per queue is kept, so
the memo does not grow with the number of workloads ever seen. An optimisation (`Optimisations.memo`): the engine
decides the same without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.domain.admission.outcome import Outcome
from daemon.domain.model import ClusterQueue, Millis, PreemptionPolicy

ClassKey = tuple[object, ...]
"""(shape, who): what makes two workloads of a queue alike for the flavor assigner and the preemption search."""


@dataclass(slots=True)
class _QueueMemo:
    generation: int
    pending_version: int
    config: ClusterQueue


class InadmissibleMemo:
    __slots__ = ("classes", "queues")

    def __init__(self) -> None:
        # Per ClusterQueue: the tree generation, and the NoFit / NoTargets result of each class then.
        self.classes: dict[str, tuple[int, dict[ClassKey, Outcome]]] = {}
        self.queues: dict[str, _QueueMemo] = {}

    def known(self, cq: str, generation: int, cls: ClassKey) -> Outcome | None:
        memo = self.classes.get(cq)
        return memo[1].get(cls) if memo is not None and memo[0] == generation else None

    def store(self, cq: str, generation: int, cls: ClassKey, outcome: Outcome) -> None:
        memo = self.classes.get(cq)
        if memo is None or memo[0] != generation:
            memo = self.classes[cq] = (generation, {})
        memo[1][cls] = outcome

    def queue_unchanged(self, cq: str, config: ClusterQueue, generation: int, pending_version: int) -> bool:
        """This queue offered nothing and wrote nothing last time, and nothing it depends on changed (the caller
        checks that the tree is untouched in this call)."""
        hit = self.queues.get(cq)
        return (
            hit is not None
            and hit.generation == generation
            and hit.pending_version == pending_version
            and hit.config is config
        )

    def record_queue(self, cq: str, config: ClusterQueue, generation: int, pending_version: int) -> None:
        self.queues[cq] = _QueueMemo(generation, pending_version, config)

    def forget_queue(self, cq: str) -> None:
        self.queues.pop(cq, None)


def who(cq: ClusterQueue, priority: int, queue_order_at: Millis) -> tuple[int, ...]:
    """What of a workload besides its shape the preemption search reads: its priority when the queue may preempt,
    also its age under LowerOrNewerEqualPriority; nothing when it never preempts."""
    pre = cq.preemption
    if pre.within_cluster_queue is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return (priority, queue_order_at)
    if (
        pre.within_cluster_queue is not PreemptionPolicy.NEVER
        or pre.reclaim_within_cohort is not PreemptionPolicy.NEVER
    ):
        return (priority,)
    return ()
