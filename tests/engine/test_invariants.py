"""Physical invariants of the cost model, checked on real specs: the published runs' own clusters and models.

Better hardware never makes a plan slower, worse hardware or more work never makes it faster, and a bigger batch
never lowers the throughput. These hold for every layout the engine can cost, so a violation is a bug in the
model (a discontinuity in an algorithm choice, a unit slip, a cap applied the wrong way round), whichever way it
moves the validation figures. Each check runs twice: on the row's published layout pinned, and on the unpinned
search, whose best plan may change layout but must obey the same inequality (the edited cluster can still run the
original best layout).
"""
from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from planner import parse_spec, plan
from planner.published import load_rows, row_to_spec_doc

from .conftest import DATA

ROWS = load_rows(DATA / "calibration_runs.json") + load_rows(DATA / "published_runs.json")
PINNED_ROWS = ROWS[::6]     # about 60 runs of every group, step 6 (every group has more than 6 rows in a run)
SEARCHED_ROWS = ROWS[::25]  # about 14 unpinned searches, which cost far more than a pinned plan
RELATIVE = 1e-9             # float noise only


def _scale(section: str, key: str, factor: float) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["cluster"][section][key] *= factor
    return edit


def _scale_model(key: str, factor: int) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["model"][key] *= factor
    return edit


def _both_peaks(doc: dict) -> None:
    gpu = doc["cluster"]["gpu"]
    gpu["peak_tflops"] *= 2
    if gpu.get("fp8_peak_tflops"):
        gpu["fp8_peak_tflops"] *= 2


def _nic_speed(factor: float) -> Callable[[dict], None]:
    """Every NIC port and the fabric's links at `factor` times their speed (the fabric's port speed caps a
    NIC's). The NIC count stays: fewer NICs a node would also change how many nodes a leaf switch serves."""
    def edit(doc: dict) -> None:
        doc["cluster"]["node"]["nic_gbits_per_s"] *= factor
        if doc["cluster"]["fabric"].get("link_gbits_per_s"):
            doc["cluster"]["fabric"]["link_gbits_per_s"] *= factor
    return edit


# (name, edit): FASTER edits may only lower the best step time, SLOWER ones only raise it.
FASTER = [
    ("NIC and link speed x2", _nic_speed(2)),
    ("NVLink bandwidth x2", _scale("node", "nvlink_gbytes_per_s", 2)),
    ("HBM bandwidth x2", _scale("gpu", "memory_gbytes_per_s", 2)),
    ("BF16 and FP8 peaks x2", _both_peaks),
    ("fabric latency / 2", _scale("fabric", "latency_us", 0.5)),
    ("GPU memory x2", _scale("gpu", "memory_gib", 2)),
]
SLOWER = [
    ("NIC and link speed / 2", _nic_speed(0.5)),
    ("kernel launch cost x2 + 1 us", lambda d: d["cluster"]["gpu"].update(
        kernel_overhead_us=2 * d["cluster"]["gpu"]["kernel_overhead_us"] + 1)),
    ("twice the layers", _scale_model("layers", 2)),
    ("twice the vocabulary", _scale_model("vocab", 2)),
]


def _doc(row: dict, catalog, pinned: bool) -> dict:
    """The row's spec with its GPU, node and fabric spelled out as custom entries (so they can be edited)."""
    doc = row_to_spec_doc(row, catalog)
    for key in ("gpu", "node", "fabric"):
        if isinstance(doc["cluster"][key], str):
            doc["cluster"][key] = dict(catalog[key][doc["cluster"][key]])
    if not pinned:
        doc["layout"] = {}
    return doc


def _best(doc: dict, catalog) -> float | None:
    answer = plan(parse_spec(doc, catalog), top=1)
    return answer["plans"][0]["step_time_s"] if answer["plans"] else None


def _cases(rows: list[dict], catalog, pinned: bool) -> list[tuple[str, dict, float]]:
    """(run id, spec document, best step time) of each row that has a feasible plan."""
    out = []
    for row in rows:
        doc = _doc(row, catalog, pinned)
        base = _best(doc, catalog)
        if base is not None:
            out.append((row["id"], doc, base))
    return out


@pytest.fixture(scope="module")
def cases(catalog) -> dict[bool, list[tuple[str, dict, float]]]:
    """The sampled runs and their unedited plans, pinned (True) and searched (False), planned once for every
    test here; each test edits copies."""
    return {True: _cases(PINNED_ROWS, catalog, True), False: _cases(SEARCHED_ROWS, catalog, False)}


def _check(catalog, cases: list[tuple[str, dict, float]], edits, faster: bool) -> tuple[int, list[str]]:
    checked, broken = 0, []
    for run, doc, base in cases:
        for name, edit in edits:
            edited = copy.deepcopy(doc)
            edit(edited)
            t = _best(edited, catalog)
            if t is None:
                if faster:  # the same layout still fits a better GPU: nothing may become infeasible
                    broken.append(f"{run}: {name} leaves no feasible plan (was {base:.4g} s)")
                continue
            checked += 1
            if (t > base * (1 + RELATIVE)) if faster else (t < base * (1 - RELATIVE)):
                broken.append(f"{run}: {name} {base:.6g} s -> {t:.6g} s")
    return checked, broken


@pytest.mark.parametrize("pinned", [True, False], ids=["published layout", "unpinned search"])
def test_better_hardware_never_makes_a_plan_slower(catalog, cases, pinned):
    checked, broken = _check(catalog, cases[pinned], FASTER, faster=True)
    assert broken == []
    assert checked >= (300 if pinned else 70)  # the sample really ran: ~60 runs x 6 edits, or ~14 x 6


@pytest.mark.parametrize("pinned", [True, False], ids=["published layout", "unpinned search"])
def test_worse_hardware_or_more_work_never_makes_a_plan_faster(catalog, cases, pinned):
    checked, broken = _check(catalog, cases[pinned], SLOWER, faster=False)
    assert broken == []
    assert checked >= (150 if pinned else 35)


@pytest.mark.parametrize("pinned", [True, False], ids=["published layout", "unpinned search"])
def test_a_doubled_batch_never_lowers_the_throughput(catalog, cases, pinned):
    """Twice the sequences take at most twice the time: the pipeline bubble and the gradient reduction are
    shared by more micro-batches, never by fewer."""
    checked, broken = 0, []
    for run, doc, base in cases[pinned]:
        doc = copy.deepcopy(doc)
        doc["training"]["global_batch"] *= 2
        t = _best(doc, catalog)
        assert t is not None, f"{run}: twice the batch leaves no feasible plan"
        checked += 1
        if t > 2 * base * (1 + RELATIVE):
            broken.append(f"{run}: {2 * base:.6g} s for twice the batch at the old rate, {t:.6g} s predicted")
    assert broken == []
    assert checked >= (50 if pinned else 12)


def test_an_edit_that_breaks_an_invariant_is_caught(catalog, cases):
    """The checker itself can fail: a GPU whose memory bandwidth halves is slower on some run."""
    checked, broken = _check(catalog, cases[True][:5], [("HBM bandwidth / 2",
                             _scale("gpu", "memory_gbytes_per_s", 0.5))], faster=True)
    assert checked == 5 and broken
