"""Search speed: layouts searched, wall time and layouts per second for a 405B dense and a 671B MoE model.

Run: python bench/search_speed.py [GPUS ...] [--root CHECKOUT]
--root times the engine of another checkout (for example a `git worktree` of an older commit) with this script's
cases, so a change's cost in search time is measured against its base on the same machine, alternating the two.
Targets (issue #9, part 4), one core: Llama 3.1 405B on 16,384 H100 in at most 0.3 s; DeepSeek-V3-size 671B MoE
(256 experts, top-8) on 16,384 H800 with FP8 in at most 1.5 s. Pinned to one core by limiting numpy's thread
pools before it is imported. Each figure is the best of REPEATS runs after a warm-up (the machine is shared).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
ROOT = Path(__file__).resolve().parent.parent
if "--root" in sys.argv:  # before the engine is imported: the checkout whose engine is timed
    at = sys.argv.index("--root")
    if at + 1 >= len(sys.argv) or not (Path(sys.argv[at + 1]) / "planner" / "__init__.py").is_file():
        sys.exit("--root needs a checkout of this repository (a folder holding planner/__init__.py)")
    ROOT = Path(sys.argv[at + 1]).resolve()
    del sys.argv[at:at + 2]
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from planner import parse_spec, plan  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner import constants  # noqa: E402

REPEATS = 5
DENSE = ("Llama 3.1 405B", "H100 SXM5 80GB", "DGX H100", "NDR InfiniBand rail-optimized (DGX SuperPOD)", "bf16", 2048)
MOE = ("DeepSeek-V3 671B (MLA approximated as MHA)", "H800 SXM5 80GB", "HGX H800",
       "NDR InfiniBand rail-optimized (DGX SuperPOD)", "fp8", 15360)


def spec_for(case: tuple, gpus: int, catalog):
    model, gpu, node, fabric, precision, batch = case
    return parse_spec({
        "model": dict(catalog["model"][model]),
        "training": {"global_batch": batch, "precision": precision},
        "cluster": {"num_gpus": gpus, "gpu": gpu, "node": node, "fabric": fabric},
    }, catalog)


def run(case: tuple, sizes: tuple[int, ...], catalog) -> None:
    model, gpu, node, fabric, precision, batch = case
    print(f"{model}, global batch {batch}, {precision}, {gpu} / {node} / {fabric}, one core, best of {REPEATS}")
    print(f"{'GPUs':>8} {'searched':>9} {'feasible':>9} {'best s':>9} {'wall s':>8} {'layouts/s':>10}  best layout")
    for gpus in sizes:
        spec = spec_for(case, gpus, catalog)
        plan(spec, top=1)  # warm caches and imports
        walls = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            answer = plan(spec, top=10)
            walls.append(time.perf_counter() - started)
        wall = min(walls)
        best = answer["plans"][0] if answer["plans"] else None
        print(f"{gpus:>8} {answer['searched']:>9} {answer['feasible']:>9} "
              f"{best['step_time_s'] if best else float('nan'):>9.2f} {wall:>8.3f} {answer['searched'] / wall:>10.0f}"
              f"  {best['label'] if best else 'none feasible'}")


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    catalog = load_catalog()
    version = getattr(constants, "ENGINE_VERSION", "(unversioned)")  # older checkouts had none
    print(f"engine {version} of {Path(planner.__file__).parent}")
    sizes = tuple(int(a) for a in sys.argv[1:]) or (1024, 16384, 131072)
    run(DENSE, sizes, catalog)
    run(MOE, tuple(s for s in sizes if s <= 16384), catalog)


if __name__ == "__main__":
    main()
