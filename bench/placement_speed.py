"""Placement speed: place() calls per second on 1,024, 16,384 and 131,072 GPUs, to show it does not grow.

Run: python bench/placement_speed.py
Each row places every (tp, cp, pp, ep, rank order) combination a search would try, twice: "cold" with the
per-shape caches emptied first (graph windows built and routed), then "warm" (what the rest of a search pays).
Pinned to one core like bench/search_speed.py.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.catalog import load_catalog  # noqa: E402
from planner.placement import PlacementRejected, _route, _shape, _torus_ring_hops, place  # noqa: E402
from planner.spec import (FABRIC_FIELDS, GPU_FIELDS, NODE_FIELDS, RANK_ORDERS, ClusterSpec,  # noqa: E402
                          FabricSpec, GPUSpec, NodeSpec)
from planner.topology import levels  # noqa: E402

SIZES = (1024, 16384, 131072)
FABRICS = ("NDR InfiniBand rail-optimized (DGX SuperPOD)", "NDR InfiniBand fat tree 2:1 oversubscribed",
           "RoCEv2 400 GbE (Llama 3 style)", "Dragonfly 400 Gb/s (Slingshot-style)", "3D torus 400 Gb/s")
WARM_REPEATS = 5


def cluster(num_gpus: int, fabric: str, catalog: dict) -> ClusterSpec:
    def row(fields, section, name):
        return {**{f.name: f.default for f in fields}, **catalog[section][name]}
    return ClusterSpec(num_gpus, GPUSpec(**row(GPU_FIELDS, "gpu", "H100 SXM5 80GB")),
                       NodeSpec(**row(NODE_FIELDS, "node", "DGX H100")),
                       FabricSpec(**row(FABRIC_FIELDS, "fabric", fabric)))


def layouts(num_gpus: int) -> list[tuple]:
    """The degrees a 405B search tries: TP up to the domain, CP, PP dividing 126 layers' neighbours, EP."""
    out = []
    for tp in (1, 2, 4, 8, 16):
        for cp in (1, 2, 4, 8):
            for pp in (1, 2, 4, 8, 16, 32, 64):
                dp, rest = divmod(num_gpus, tp * cp * pp)
                for ep in (1, 8):
                    if not rest and dp >= ep and dp % ep == 0:
                        out.extend((tp, cp, dp, pp, ep, order) for order in RANK_ORDERS)
    return out


def run(c: ClusterSpec, combos: list[tuple]) -> float:
    start = time.perf_counter()
    for lay in combos:
        try:
            place(c, *lay)
        except PlacementRejected:
            pass
    return time.perf_counter() - start


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    catalog = load_catalog()
    print("place() on DGX H100 clusters, one core; us per call, calls per second")
    print(f"{'fabric':<46} {'GPUs':>7} {'calls':>6} {'cold us':>8} {'warm us':>8} {'warm calls/s':>13}")
    for fabric in FABRICS:
        for n in SIZES:
            c = cluster(n, fabric, catalog)
            combos = layouts(n)
            for cache in (_shape, _route, _torus_ring_hops, levels):
                cache.cache_clear()
            cold = run(c, combos) / len(combos)
            warm = min(run(c, combos) for _ in range(WARM_REPEATS)) / len(combos)
            print(f"{fabric:<46} {n:>7} {len(combos):>6} {cold * 1e6:>8.1f} {warm * 1e6:>8.1f} {1 / warm:>13,.0f}")


if __name__ == "__main__":
    main()
