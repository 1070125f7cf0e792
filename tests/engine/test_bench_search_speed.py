"""bench/search_speed.py --root: the same cases timed on another checkout's engine, the base a change is measured
against (README, "Constants and how well it predicts")."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "search_speed.py"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, text=True, capture_output=True, timeout=300)


def test_root_times_the_other_checkouts_engine(tmp_path):
    other = tmp_path / "other"
    for part in ("planner", "fixtures"):  # the engine and the catalog it reads
        shutil.copytree(ROOT / part, other / part, ignore=shutil.ignore_patterns("__pycache__"))
    constants = other / "planner" / "constants.py"
    text = constants.read_text()
    assert 'ENGINE_VERSION = "' in text
    constants.write_text(text.replace('ENGINE_VERSION = "', 'ENGINE_VERSION = "0.0-other-', 1))
    out = bench("8", "--root", str(other))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("engine 0.0-other-") and lines[0].endswith(str(other / "planner"))
    # 8 GPUs hold neither model: each case prints its row, with what it searched, and "none feasible".
    rows = [line.split() for line in lines if line.strip().startswith("8 ")]
    assert len(rows) == 2 and all(r[-2:] == ["none", "feasible"] and int(r[1]) > 0 and r[2] == "0" for r in rows)


def test_this_checkout_by_default_and_a_bad_root_is_refused(tmp_path):
    out = bench("8")
    assert out.returncode == 0 and out.stdout.splitlines()[0].endswith(str(ROOT / "planner"))
    bad = bench("--root", str(tmp_path))
    assert bad.returncode == 1 and "--root needs a checkout of this repository" in bad.stderr
    assert bench("--root").returncode == 1
