"""The engine against the reference model of Kueue's cycle over the whole scenario space, longer than CI runs it.

Each named part of the space (tests/reference/differential.py's `Space`) draws random scenarios with hypothesis,
runs both sides and counts, per kind, the scenarios whose first difference is of that kind (evicted, admitted,
flavors, preemptor, order; see `first_difference`). A SPACE named with `+fair` runs the engine with fair sharing
on (the model has none: Kueue's fair sharing equals its classic cycle only where there are no Cohorts).

Usage: python -m bench.bench_model_diff [EXAMPLES_PER_SPACE] [SPACE[+fair] ...]   Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings

from daemon.domain.admission import EngineConfig
from tests.reference.differential import SPACES, Scenario, first_difference, run_engine, run_model, scenarios, trees


def measure(name: str, examples: int) -> dict[str, object]:
    kinds: Counter[str] = Counter()
    first: dict[str, str] = {}
    t0 = time.perf_counter()
    space, _, variant = name.partition("+")
    config = EngineConfig(fair_sharing=variant == "fair")

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(sc=scenarios(SPACES[space]))
    def run(sc: Scenario) -> None:
        d = first_difference(run_engine(sc, config), run_model(sc), trees(sc))
        kind = "same" if d is None else d.kind
        kinds[kind] += 1
        if d is not None and kind not in first:
            first[kind] = f"{sc.describe()}\n{d}"

    run()
    return {
        "examples": sum(kinds.values()),
        "same": kinds["same"],
        "differences": {k: v for k, v in sorted(kinds.items()) if k != "same"},
        "seconds": round(time.perf_counter() - t0, 1),
        "first_of_each_kind": first,
    }


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    names = sys.argv[2:] or list(SPACES)
    print(json.dumps({name: measure(name, examples) for name in names}, indent=2))


if __name__ == "__main__":
    main()
