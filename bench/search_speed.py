"""Search speed: layouts searched, wall time and layouts per second for a 405B-class model.

Run: python bench/search_speed.py
Target (issue #2): the full search on 16,384 GPUs in at most 1 s on one core. Pinned to one core by
limiting numpy's thread pools before it is imported.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import parse_spec, plan  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402

REPEATS = 3


def spec_for(gpus: int, catalog):
    return parse_spec({
        "model": dict(catalog["model"]["Llama 3.1 405B"]),
        "training": {"global_batch": 2048, "precision": "bf16"},
        "cluster": {"num_gpus": gpus, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                    "fabric": "NDR InfiniBand rail-optimized (DGX SuperPOD)"},
    }, catalog)


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    catalog = load_catalog()
    print("Llama 3.1 405B, global batch 2048 x 8192 tokens, H100 / DGX H100 / NDR rail-optimized, one core")
    print(f"{'GPUs':>8} {'searched':>9} {'feasible':>9} {'best s':>9} {'wall s':>8} {'layouts/s':>10}  best layout")
    for gpus in (1024, 16384, 131072):
        spec = spec_for(gpus, catalog)
        plan(spec, top=1)  # warm caches and imports
        walls = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            answer = plan(spec, top=10)
            walls.append(time.perf_counter() - started)
        wall = sorted(walls)[len(walls) // 2]
        best = answer["plans"][0] if answer["plans"] else None
        print(f"{gpus:>8} {answer['searched']:>9} {answer['feasible']:>9} "
              f"{best['step_time_s'] if best else float('nan'):>9.2f} {wall:>8.3f} {answer['searched'] / wall:>10.0f}"
              f"  {best['label'] if best else 'none feasible'}")


if __name__ == "__main__":
    main()
