"""The engine reproduces its golden answers (tests/engine/golden.py) to a relative 1e-9: refactors such as the
vectorised collective model must not change a number, a ranking or a rejection count."""
from __future__ import annotations

import json
import math

import pytest

from tests.engine.golden import FIXTURE, answer

GOLDEN = json.loads(FIXTURE.read_text())
REL = 1e-9


def _diffs(got, want, path: str = "") -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{path}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"]
        return [d for k in want for d in _diffs(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in _diffs(g, w, f"{path}[{i}]")]
    if isinstance(want, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        return [] if math.isclose(got, want, rel_tol=REL, abs_tol=1e-300) else [f"{path}: {got!r} != {want!r}"]
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def test_the_fixture_says_how_to_regenerate_it():
    assert "python -m tests.engine.golden" in GOLDEN["header"]
    assert len(GOLDEN["cases"]) >= 10


@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_plan_reproduces_its_golden_answer(name):
    case = GOLDEN["cases"][name]
    diffs = _diffs(answer(case["spec"]), case["answer"])
    assert not diffs, f"{len(diffs)} differences, first: " + "; ".join(diffs[:5])


def test_the_comparison_catches_a_changed_number():
    want = GOLDEN["cases"]["example:gpt3-175b-a100-1024"]["answer"]["plans"][0]["time_s"]
    got = dict(want, dp_comm=want["dp_comm"] * (1 + 1e-8))
    assert _diffs(got, want) == [f".dp_comm: {got['dp_comm']!r} != {want['dp_comm']!r}"]
