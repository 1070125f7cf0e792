"""How close a planner gets by naming its training stack (training.framework) instead of each option.

Run: python bench/stack_presets.py

For each stack of planner/data/stacks.json, the published rows of that stack (the groups its "rows" lists, layouts
pinned as `python -m planner validate` pins them) are costed three ways: with each run's own options (what validation
reads from the row), with the stack's settings in place of those the stack names, and with the engine's defaults
("generic") in their place. It prints the median absolute and the median signed error of each. The stack's
settings should land between the other two: nearer each run's own than the defaults are.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import stacks  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner.published import compare, load_overlays, load_rows  # noqa: E402
from planner.spec import SECTIONS  # noqa: E402

DATA = ROOT / "planner" / "data"
DEFAULTS = {f.name: f.default for f in SECTIONS["training"]}


def main() -> None:
    catalog = load_catalog()
    overlays = load_overlays(DATA / "published_run_configs.json")
    rows = [r for f in ("calibration_runs.json", "published_runs.json") for r in load_rows(DATA / f)]
    print(f"{'stack':<14} {'rows':>4}  {'own options':>18}  {'stack settings':>18}  {'engine defaults':>18}")
    for name, entry in stacks.STACKS.items():
        groups = set(entry["rows"])
        mine = [r for r in rows if r.get("group") in groups]
        ways = (None, entry["options"], {k: DEFAULTS[k] for k in entry["options"]})
        cells = []
        for training in ways:
            errors = [c.error for c in compare(mine, catalog, overlays, training) if c.error is not None]
            cells.append((len(errors), statistics.median(abs(e) for e in errors), statistics.median(errors)))
        counts = {n for n, _, _ in cells}
        text = "  ".join(f"{a:>8.1%} ({s:+6.1%})" for _, a, s in cells)
        print(f"{name:<14} {'/'.join(map(str, sorted(counts))):>4}  {text}")
    print("median |error| (median signed error) over the rows each way predicts")


if __name__ == "__main__":
    main()
