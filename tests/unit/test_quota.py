"""The quota tree's arithmetic: nominal, borrowingLimit, lendingLimit, hierarchical cohorts, saturation.

Real: `daemon.domain.quota` on trees built from builder objects. Faked: nothing; usage is loaded directly per
ClusterQueue instead of through admitted workloads.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.domain.quota import (
    UNLIMITED,
    QuotaTree,
    add_usage,
    any_child_over,
    available,
    count_over,
    cq_available,
    is_within_nominal_in,
    potential_available,
    remove_usage,
    sat_add,
    sat_sub,
)
from tests.unit.builders import M, cohort, cq, flavor, world

GPU = ("h100", "gpu")


def build(*items: object, usage: dict[str, int] | None = None) -> QuotaTree:
    w = world(*items)
    tree = QuotaTree.build(w.cluster_queues, w.cohorts, w.flavors)
    tree.load_usage({name: {GPU: u * M} for name, u in (usage or {}).items()})
    return tree


def avail(tree: QuotaTree, name: str) -> int:
    return cq_available(tree.cqs[name], GPU) // M


def potential(tree: QuotaTree, name: str) -> int:
    return potential_available(tree.cqs[name], GPU) // M


CASES = [
    pytest.param([cq("a").flavor("h100", gpu=8)], {"a": 3}, "a", 5, 8, id="lone queue: nominal minus usage"),
    pytest.param(
        [cq("a").flavor("h100", gpu=8, borrow=4)], {}, "a", 8, 8, id="borrowingLimit without a cohort: cannot borrow"
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8), cq("b").cohort("c").flavor("h100", gpu=8)],
        {"b": 2},
        "a",
        14,
        16,
        id="cohort: borrow what the sibling does not use",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8, borrow=2), cq("b").cohort("c").flavor("h100", gpu=8)],
        {},
        "a",
        10,
        10,
        id="borrowingLimit caps borrowing",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8, borrow=2), cq("b").cohort("c").flavor("h100", gpu=8)],
        {"a": 9},
        "a",
        1,
        10,
        id="borrowingLimit counts what is already borrowed",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8), cq("b").cohort("c").flavor("h100", gpu=8, lend=4)],
        {},
        "a",
        12,
        12,
        id="lendingLimit keeps the rest of the lender's quota out of the cohort",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8), cq("b").cohort("c").flavor("h100", gpu=8, lend=4)],
        {"b": 6},
        "a",
        10,
        12,
        id="lender's usage bubbles up only beyond its local quota",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=8), cq("b").cohort("c").flavor("h100", gpu=8, lend=4)],
        {"a": 12},
        "b",
        4,
        16,
        id="lender keeps its local quota when the cohort is drained",
    ),
    pytest.param(
        [
            cohort("root").flavor("h100", gpu=4),
            cohort("c").parent("root"),
            cq("a").cohort("c").flavor("h100", gpu=8),
            cq("b").cohort("c").flavor("h100", gpu=8),
            cq("x").cohort("root").flavor("h100", gpu=2),
        ],
        {"x": 2, "b": 8},
        "a",
        12,
        22,
        id="hierarchical: the root cohort's own quota is a shared pool",
    ),
    pytest.param(
        [
            cohort("root"),
            cohort("c").parent("root").flavor("h100", gpu=0, borrow=3),
            cq("a").cohort("c").flavor("h100", gpu=8),
            cq("x").cohort("root").flavor("h100", gpu=10),
        ],
        {},
        "a",
        11,
        11,
        id="hierarchical: a cohort's borrowingLimit caps its whole subtree",
    ),
    pytest.param(
        [
            cohort("root"),
            cohort("c").parent("root").flavor("h100", gpu=0, lend=0),
            cq("a").cohort("c").flavor("h100", gpu=8),
            cq("x").cohort("root").flavor("h100", gpu=10),
        ],
        {},
        "x",
        10,
        10,
        id="hierarchical: a cohort's lendingLimit 0 lends nothing of its subtree",
    ),
]


@pytest.mark.parametrize(("items", "usage", "target", "expected_available", "expected_potential"), CASES)
def test_available_and_potential(
    items: list[object], usage: dict[str, int], target: str, expected_available: int, expected_potential: int
) -> None:
    tree = build(*items, usage=usage)
    assert avail(tree, target) == expected_available
    assert potential(tree, target) == expected_potential


def test_cohort_named_only_by_a_queue_has_no_quota_of_its_own() -> None:
    tree = build(cq("a").cohort("ghost").flavor("h100", gpu=8), cq("b").cohort("ghost").flavor("h100", gpu=2))
    ghost = tree.cohorts["ghost"]
    assert ghost.quotas == {}
    assert ghost.subtree[GPU] == 10 * M


def test_cohort_cycle_disables_its_members_and_names_the_cycle() -> None:
    tree = build(
        cohort("x").parent("y"),
        cohort("y").parent("x"),
        cq("a").cohort("x").flavor("h100", gpu=8),
        cq("ok").flavor("h100", gpu=8),
        flavor("h100"),
    )
    assert "cycle" in tree.inactive["a"].message
    assert "ok" not in tree.inactive
    assert tree.cqs["a"].parent is None


def test_unknown_flavor_makes_the_queue_inactive() -> None:
    w = world(cq("a").flavor("nope", gpu=8))
    tree = QuotaTree.build(w.cluster_queues, w.cohorts, w.flavors)
    assert tree.inactive["a"].message == "flavor nope not found"


def test_unlimited_saturates() -> None:
    assert sat_add(UNLIMITED, 5) == UNLIMITED
    assert sat_sub(UNLIMITED, 5) == UNLIMITED
    assert sat_sub(5, UNLIMITED) == -UNLIMITED
    assert sat_sub(UNLIMITED, UNLIMITED) == 0
    huge = 2**70
    tree = build(cq("a").cohort("c").flavor("h100", gpu=huge), cq("b").cohort("c").flavor("h100", gpu=huge))
    assert tree.cohorts["c"].subtree[GPU] == UNLIMITED
    assert potential_available(tree.cqs["a"], GPU) == UNLIMITED
    assert available(tree.cqs["a"], GPU) == UNLIMITED


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["a", "b", "x"]), st.integers(min_value=1, max_value=12)), max_size=12),
    lend=st.integers(min_value=0, max_value=8),
)
def test_incremental_usage_equals_a_fresh_load_and_reverts_exactly(ops: list[tuple[str, int]], lend: int) -> None:
    """add_usage then remove_usage in reverse restores every node; and incremental equals load_usage."""
    items = [
        cohort("root").flavor("h100", gpu=2),
        cohort("c").parent("root").flavor("h100", gpu=1, lend=lend),
        cq("a").cohort("c").flavor("h100", gpu=4, lend=lend),
        cq("b").cohort("c").flavor("h100", gpu=4),
        cq("x").cohort("root").flavor("h100", gpu=3),
    ]
    tree = build(*items)
    for name, v in ops:
        add_usage(tree.cqs[name], GPU, v * M)
    totals: dict[str, int] = {}
    for name, v in ops:
        totals[name] = totals.get(name, 0) + v
    fresh = build(*items, usage=totals)
    for name in tree.cohorts:
        assert tree.cohorts[name].usage.get(GPU, 0) == fresh.cohorts[name].usage.get(GPU, 0), name
    for name, v in reversed(ops):
        remove_usage(tree.cqs[name], GPU, v * M)
    for node in [*tree.cqs.values(), *tree.cohorts.values()]:
        assert node.usage.get(GPU, 0) == 0, node.name


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.sampled_from(["a", "b", "x"]), st.integers(min_value=1, max_value=12)),
        max_size=16,
    ),
    lend=st.integers(min_value=0, max_value=8),
    start=st.dictionaries(st.sampled_from(["a", "b", "x"]), st.integers(min_value=0, max_value=12)),
)
def test_the_count_of_children_over_nominal_follows_every_usage_change(
    ops: list[tuple[bool, str, int]], lend: int, start: dict[str, int]
) -> None:
    """`Node.over` (children above their own quota, which lets preemption skip a cohort) equals a recount after
    load_usage and after any sequence of add_usage / remove_usage, and agrees with is_within_nominal_in."""
    items = [
        cohort("root").flavor("h100", gpu=2),
        cohort("c").parent("root").flavor("h100", gpu=1, lend=lend),
        cq("a").cohort("c").flavor("h100", gpu=4, lend=lend),
        cq("b").cohort("c").flavor("h100", gpu=4),
        cq("x").cohort("root").flavor("h100", gpu=3),
    ]
    tree = build(*items, usage=start)

    def check() -> None:
        for node in tree.cohorts.values():
            assert {fr: n for fr, n in node.over.items() if n} == count_over(node), node.name
            children = [*node.child_cohorts, *node.child_cqs]
            assert any_child_over(node, [GPU]) == any(not is_within_nominal_in(c, [GPU]) for c in children)

    check()
    held = dict(start)
    for add, name, v in ops:
        if add:
            add_usage(tree.cqs[name], GPU, v * M)
            held[name] = held.get(name, 0) + v
        elif held.get(name, 0) >= v:
            remove_usage(tree.cqs[name], GPU, v * M)
            held[name] -= v
        check()


@given(a=st.integers(-(2**66), 2**66), b=st.integers(-(2**66), 2**66))
def test_saturating_arithmetic_matches_its_min_max_definition(a: int, b: int) -> None:
    """sat_add / sat_sub compare instead of calling min / max (they are hot); the results must be Kueue's."""
    add = UNLIMITED if a >= UNLIMITED or b >= UNLIMITED else min(a + b, UNLIMITED)
    if a >= UNLIMITED:
        sub = 0 if b >= UNLIMITED else UNLIMITED
    elif b >= UNLIMITED:
        sub = -UNLIMITED
    else:
        sub = max(min(a - b, UNLIMITED), -UNLIMITED)
    assert (sat_add(a, b), sat_sub(a, b)) == (add, sub)
