"""Fit the few compute constants of the engine on the published runs, and print the fit.

Run: python bench/calibrate.py            (prints the error table with the constants in planner/constants.py)
     python bench/calibrate.py --fit      (coordinate search of the FITTED constants within their physical
                                           ranges, minimising the worst and the median error; prints the result)
The constants it may move, and their ranges, are the ones marked FITTED in planner/constants.py. It never
writes files: copy the printed values into constants.py by hand, so every change is reviewed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import constants as C  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner.published import compare, error_table, load_overlays, load_rows  # noqa: E402

RUNS = Path(__file__).resolve().parents[1] / "planner" / "data" / "published_runs.json"
OVERLAYS = Path(__file__).resolve().parents[1] / "tests" / "engine" / "data" / "published_run_configs.json"
FITTED = {  # name: candidate values within the physical range stated in constants.py
    "GEMM_EFFICIENCY": [0.66, 0.68, 0.70, 0.72, 0.74, 0.76, 0.78, 0.80, 0.82, 0.84],
    "GEMM_K_HALF": [32, 48, 64, 96, 128, 160, 192, 256],
    "HBM_EFFICIENCY": [0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.92],
    "KERNEL_OVERHEAD_S": [2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6, 10e-6],
}


def score(rows, catalog) -> tuple[float, float]:
    errors = [abs(c.error) for c in compare(rows, catalog, OVERLAYS_DATA) if c.error is not None]
    return max(errors), statistics.median(errors)


OVERLAYS_DATA = load_overlays(OVERLAYS)


def fit(rows, catalog) -> None:
    best = score(rows, catalog)
    for sweep in range(3):
        improved = False
        for name, values in FITTED.items():
            current = getattr(C, name)
            for value in values:
                setattr(C, name, value)
                s = score(rows, catalog)
                if (s[0] + s[1]) < (best[0] + best[1]) - 1e-6:
                    best, current, improved = s, value, True
            setattr(C, name, current)
            print(f"sweep {sweep}: {name} = {current}  max {best[0]:.1%} median {best[1]:.1%}", flush=True)
        if not improved:
            break
    print({name: getattr(C, name) for name in FITTED})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--runs", default=str(RUNS))
    args = parser.parse_args()
    rows, catalog = load_rows(args.runs), load_catalog()
    if args.fit:
        fit(rows, catalog)
    print(error_table(compare(rows, catalog, OVERLAYS_DATA)))


if __name__ == "__main__":
    main()
