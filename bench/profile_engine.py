"""Profile the engine on a scaled-down Kueue shape: python -m bench.profile_engine [divisor] [baseline|large-scale]
[nogc].

Runs `admitd simulate`'s driver under cProfile and prints the top functions by cumulative and by own time. With
`nogc` the cyclic garbage collector is off, so that its full collections (a large share of the run on big heaps)
are not charged to whichever function happened to allocate.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import pstats
import sys
import time
from dataclasses import replace

from bench.kueue_shapes import BASELINE, LARGE_SCALE, scenario
from daemon.obs.logging import configure
from daemon.sim.run import run_simulation


def main() -> None:
    configure(level="warning")
    div = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    base = LARGE_SCALE if len(sys.argv) > 2 and sys.argv[2] == "large-scale" else BASELINE
    shape = replace(base, classes=tuple(replace(c, count=max(1, c.count // div)) for c in base.classes))
    scen = scenario(shape)
    if "nogc" in sys.argv[3:]:
        gc.disable()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    result = asyncio.run(run_simulation(scen))
    prof.disable()
    print(
        f"wall {time.perf_counter() - t0:.2f}s engine {result.engine_seconds:.2f}s "
        f"cycles {result.cycles} decisions {result.decisions} end {result.end}"
    )
    stats = pstats.Stats(prof).strip_dirs()
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
