"""Validation as a product feature: the figures, their JSON shape, the search gain, the cohort statement a plan
quotes, and the stored snapshot kept current with the engine."""
from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

import pytest

from planner import accuracy, parse_spec, plan
from planner.catalog import load_catalog
from planner.holdout import is_holdout
from planner.published import load_overlays, load_rows, row_to_spec_doc
from planner.spec import section_as_read
from planner.validation import DEFAULT_CONFIGS, DEFAULT_RUNS, validate

from .conftest import DATA, example

# Megatron-LM's 2020 README runs on V100 and A100: two held out of every fit (planner/holdout.py), two not.
SMALL = ("meg2020_v100_1B", "meg2020_a100_1B", "meg2020_v100_4B", "meg2020_a100_dp128_4B")
PUBLISHED_STEP_S = {"meg2020_v100_1B": 1.121, "meg2020_a100_1B": 1.076, "meg2020_v100_4B": 1.238,
                    "meg2020_a100_dp128_4B": 1.242}


def published(*ids: str) -> list[dict]:
    rows = {r["id"]: r for r in load_rows(DATA / "published_runs.json")}
    return [copy.deepcopy(rows[i]) for i in ids]


@pytest.fixture
def small_file(tmp_path) -> Path:
    """Four real rows, one that cannot become a spec (no vocabulary) and one that states no throughput."""
    rows = published(*SMALL)
    broken = dict(published("meg2020_a100_2B")[0], id="no_vocab", vocab=None)
    silent = published("meg2020_a100_8B")[0]
    for key in ("step_time_s", "tflops_per_gpu", "mfu_percent", "tokens_per_sec_per_gpu", "derived"):
        silent.pop(key, None)
    silent["id"] = "no_throughput"
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"cases": [*rows, broken, silent]}))
    return path


@pytest.fixture
def small(small_file, catalog) -> dict:
    return validate([small_file], catalog=catalog)


def test_each_row_is_compared_with_its_published_step_time(small):
    rows = {r["id"]: r for r in small["rows"]}
    for run_id, measured in PUBLISHED_STEP_S.items():
        r = rows[run_id]
        assert r["measured_s"] == pytest.approx(measured, rel=1e-3)
        assert r["err"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1, abs=1e-5)
        assert r["layout"].startswith("TP")
    assert rows["meg2020_v100_1B"]["generation"] == "V100" and rows["meg2020_a100_1B"]["generation"] == "A100"
    assert {r["precision"] for r in small["rows"]} == {"fp16"}  # "16-bit" on V100/A100: Megatron trained FP16
    assert rows["no_vocab"]["predicted_s"] is None and rows["no_vocab"]["why"].startswith("no spec: model.vocab")
    assert rows["no_throughput"]["measured_s"] is None and "no step time" in rows["no_throughput"]["why"]


def test_a_row_of_the_wrong_shape_is_reported_on_its_row(tmp_path, catalog):
    """Fields of the wrong kind, anywhere in a row, are named on that row; the other rows are still measured."""
    good = published("meg2020_v100_1B")[0]
    odd = [dict(good, id="bad_precision", precision=16), dict(good, id="bad_notes", notes={"a": 1}),
           dict(good, id="bad_group", group=7)]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"cases": [good, *odd]}))
    out = validate([path], catalog=catalog)
    by_id = {r["id"]: r for r in out["rows"]}
    assert by_id["meg2020_v100_1B"]["predicted_s"] is not None
    assert by_id["bad_precision"]["why"] == "no spec: precision: must be text, not 16"
    assert by_id["bad_notes"]["why"] == "no spec: notes: must be text, not {'a': 1}"
    assert by_id["bad_group"]["why"] == "no spec: group: must be text, not 7"
    assert by_id["bad_group"]["group"] == "odd"
    assert out["summary"]["rows"] == 4 and out["summary"]["modelled"] == 1


def test_the_figures_summarise_the_modelled_rows(small):
    errs = [r["err"] for r in small["rows"] if r["id"] in PUBLISHED_STEP_S]
    s = small["summary"]
    assert (s["rows"], s["measured"], s["modelled"]) == (6, 5, 4)
    assert s["median_abs_err"] == pytest.approx(statistics.median(abs(e) for e in errs), abs=1e-6)
    assert s["max_abs_err"] == pytest.approx(max(abs(e) for e in errs), abs=1e-6)
    assert s["within_10pct"] == pytest.approx(sum(abs(e) <= 0.10 for e in errs) / 4)
    assert s["too_fast"] == sum(e < 0 for e in errs)
    assert "median_search_gain" not in s


def test_held_out_rows_are_summarised_apart(small):
    held = [r for r in small["rows"] if r["holdout"]]
    assert {r["id"] for r in held} == {"meg2020_v100_4B", "meg2020_a100_dp128_4B"}
    assert all(r["holdout"] == is_holdout(r["id"]) for r in small["rows"])
    errs = [abs(r["err"]) for r in held]
    assert small["holdout"]["modelled"] == 2
    assert small["holdout"]["median_abs_err"] == pytest.approx(statistics.median(errs), abs=1e-6)


def test_figures_by_group_and_by_gpu_generation_and_precision(small):
    assert set(small["groups"]) == {"A3_megatron_readme_2020"}
    assert small["groups"]["A3_megatron_readme_2020"]["modelled"] == 4
    assert small["summary"]["groups"] == small["groups"]  # the summary carries them too
    cohorts = small["by_generation_precision"]
    assert set(cohorts) == {"V100 fp16", "A100 fp16"}
    assert cohorts["V100 fp16"]["modelled"] == 2 and cohorts["A100 fp16"]["modelled"] == 2
    v100 = [abs(r["err"]) for r in small["rows"] if r["generation"] == "V100"]
    assert cohorts["V100 fp16"]["max_abs_err"] == pytest.approx(max(v100), abs=1e-6)


def test_the_answer_is_plain_json_with_the_constants_and_their_sources(small):
    text = json.dumps(small, allow_nan=False)  # no NaN, no numpy scalars
    assert json.loads(text) == small
    assert set(small) >= {"engine", "summary", "holdout", "groups", "by_generation_precision", "rows", "constants"}
    row = small["rows"][0]
    assert set(row) >= {"id", "group", "file", "generation", "precision", "gpus", "measured_s", "predicted_s",
                        "err", "layout", "why", "holdout"}
    assert row["file"] == "small.json"
    engine = {c["name"]: c for c in small["constants"]["engine"]}
    assert "Rajbhandari" in engine["ADAM_OTHER_BYTES"]["source"]
    assert engine["ADAM_OTHER_BYTES"]["module"] == "planner.constants"
    # One comment, two constants: written once, the second pointing to it (a paragraph stood on eight rows).
    assert engine["GEMM_TILE_M"]["source"].startswith("Output tile")
    assert engine["GEMM_TILE_N"]["source"] == "See GEMM_TILE_M."
    assert engine["CP_GRAD_KV_BYTES_PYTORCH"]["source"] == "See CP_MERGE_BYTES_TE."
    assert engine["CP_ONCE_FWD_BYTES_PYTORCH"]["source"] == "See CP_MERGE_BYTES_TE; per query element, per key element"
    assert "busbw" in engine["NVLINK_RING_EFF"]["source"]  # the collectives' efficiencies too
    assert [c["name"] for c in engine.values() if not c["source"]] == []
    gpus = {g["name"]: g for g in small["constants"]["gpus"]}
    assert gpus["H100 SXM5 80GB"]["peak_tflops"] > 900 and "datasheet" in gpus["H100 SXM5 80GB"]["source"].lower()


def test_search_gain_is_the_published_layouts_step_over_the_best_unpinned_one(tmp_path, catalog):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(published("meg2020_a100_1B")))
    result = validate([path], search=True, catalog=catalog)
    [row] = result["rows"]
    doc = row_to_spec_doc(published("meg2020_a100_1B")[0], catalog)
    del doc["layout"]
    best = plan(parse_spec(doc, catalog), top=1)["plans"][0]
    assert row["search_layout"] == best["label"]
    assert row["search_gain"] == pytest.approx(row["predicted_s"] / best["step_time_s"] - 1, abs=1e-5)
    assert row["search_gain"] >= 0  # the published layout is one the unpinned search also costs
    assert result["summary"]["median_search_gain"] == row["search_gain"] and result["summary"]["searched"] == 1


def test_the_second_search_keeps_the_runs_own_options(tmp_path, catalog):
    """search_gain_same_options: the row's recomputation, ZeRO stage and sequence parallelism pinned, the parallel
    layout, micro-batch and virtual stages searched. Megatron's 2020 runs recomputed every layer; the unpinned
    search drops that, the second search may not, so its gain is the smaller."""
    path = tmp_path / "one.json"
    path.write_text(json.dumps(published("meg2020_a100_8B")))
    [row] = validate([path], search=True, catalog=catalog)["rows"]
    doc = row_to_spec_doc(published("meg2020_a100_8B")[0], catalog)
    assert doc["layout"]["recompute"] == "full" and doc["layout"]["tp"] == 8
    doc["layout"] = {"recompute": "full", "zero": doc["layout"].get("zero", 0),
                     "sequence_parallel": doc["layout"].get("sequence_parallel", False)}
    best = plan(parse_spec(doc, catalog), top=1)["plans"][0]
    assert best["layout"]["recompute"] == "full" and best["layout"]["zero"] == 0
    assert row["search_layout_same_options"] == best["label"] and "full recompute" in best["label"]
    assert row["search_gain_same_options"] == pytest.approx(row["predicted_s"] / best["step_time_s"] - 1, abs=1e-5)
    assert 0 < row["search_gain_same_options"] < row["search_gain"]
    assert "full recompute" not in row["search_layout"]


def test_a_search_that_finds_the_published_step_claims_no_gain(tmp_path, catalog):
    """A row's predicted_s is kept to 6 significant digits, and the search's best step is compared at the same
    precision, so the search finding the published layout reports exactly 0, not a gain or a loss of a few parts
    in a million."""
    path = tmp_path / "one.json"
    path.write_text(json.dumps(published("meg2020_a100_1B")))
    [row] = validate([path], search=True, catalog=catalog)["rows"]
    assert row["search_layout_same_options"] == row["layout"] and row["search_gain_same_options"] == 0.0


@pytest.mark.parametrize("text, generation", [
    ("H100-80GB (table: h100_80gb; MFU computed with H100-SXM peak)", "H100"), ("GB300 (Blackwell Ultra)", "GB300"),
    ("GB200", "GB200"), ("B200", "B200"), ("B300 (Blackwell Ultra)", "B300"), ("V100 (DGX-2)", "V100"),
    ("A100 (DGX-A100 cluster)", "A100"), ("H800", "H800"), ("H200 SXM 141GB", "H200"), ("MI300X", None), (None, None)])
def test_the_gpu_generation_is_read_from_free_text(text, generation):
    assert accuracy.generation(text) == generation


@pytest.mark.parametrize("text, gpu, prec", [
    ("MXFP8 (fp8_format e4m3, fp8_recipe mxfp8; with bf16: true)", "GB200", "fp8"),
    ("FP8 linear layers via torchao Float8Linear; attention and other ops BF16", "H100", "fp8"),
    ("BF16 (FSDP MixedPrecision bfSixteen: param/reduce/buffer bf16)", "H100", "bf16"),
    ("FP16/BF16 (paper: 312 TFLOP/s FP16/BF16 matmul peak; repo trains bf16 by default)", "A100", "bf16"),
    ("mixed (16-bit)", "A100", "fp16"), (None, "V100", "fp16"), (None, "H100", "bf16"), ("fp16", "H100", "fp16")])
def test_the_precision_is_read_from_free_text(text, gpu, prec):
    assert accuracy.precision(text, gpu) == prec


def test_a_plan_quotes_the_error_on_runs_of_its_gpu_generation_and_precision(small):
    a100 = small["by_generation_precision"]["A100 fp16"]
    found = accuracy.for_gpu("A100 SXM4 80GB", "fp16", small)
    assert found["runs"] == 2 and found["median_abs_err"] == a100["median_abs_err"]
    assert found["statement"].startswith(f"±{a100['median_abs_err']:.1%}: median over 2 published A100 FP16 runs")
    assert found["measured_with"]["stale"] is False
    none = accuracy.for_gpu("B200", "fp8", small)
    assert none["runs"] == 0 and none["statement"].startswith("No comparable published runs")
    assert "B200 FP8" in none["statement"]


def test_a_gpu_is_the_catalog_row_whose_figures_it_has_not_the_name_it_has(small):
    """The published runs were costed with the shipped catalog's figures: a GPU is judged by the figures it holds.
    An admin's A100 with another peak, or a 500 TFLOP/s row renamed "H100  SXM5 80GB", was quoted the A100's or
    the H100's error by its name."""
    a100 = section_as_read("cluster.gpu", load_catalog()["gpu"]["A100 SXM4 80GB"])
    assert accuracy.catalog_gpu(a100) == ("A100 SXM4 80GB", {})
    assert accuracy.catalog_gpu({**a100, "name": "Lab A100"}) == ("A100 SXM4 80GB", {})  # renamed, same figures
    h800 = section_as_read("cluster.gpu", load_catalog()["gpu"]["H800 SXM5 80GB"])
    assert accuracy.catalog_gpu(h800)[0] == "H800 SXM5 80GB"  # its own row, though the H100's figures are alike
    faster = {**a100, "name": "A100 SXM4 80GB (modified)", "peak_tflops": 500.0}
    assert accuracy.catalog_gpu(faster) == ("A100 SXM4 80GB", {"peak_tflops": (500.0, 312.0)})
    found = accuracy.for_gpu("A100 SXM4 80GB (modified)", "fp16", small, gpu=faster)
    assert found["runs"] == 0 and found["ranking"]["tie_within"] == round(small["summary"]["median_abs_err"], 3)
    assert found["statement"] == (
        "No comparable published runs: the model was checked with the catalog's figures for A100 SXM4 80GB, and "
        "this GPU's differ (peak_tflops 500, not 312).")
    renamed = accuracy.for_gpu("H100  SXM5 80GB", "fp16", small, gpu={**faster, "name": "H100  SXM5 80GB"})
    assert renamed["runs"] == 0 and "match none of them" in renamed["statement"]
    # Capacity alone does not move a layout's step time: the row's error stands, and the difference is said.
    bigger = accuracy.for_gpu("A100 SXM4 80GB", "fp16", small, gpu={**a100, "memory_gib": 192.0})
    assert bigger["runs"] == 2 and bigger["statement"].endswith(
        "; this GPU differs from the catalog's A100 SXM4 80GB only in memory_gib 192, not 80, which a layout's "
        "step time does not depend on.")


def test_one_run_is_said_as_one_run(small):
    one = dict(small, by_generation_precision={
        "GB200 bf16": {"modelled": 1, "measured": 2, "median_abs_err": 0.031, "max_abs_err": 0.031}})
    assert accuracy.for_gpu("GB200", "bf16", one)["statement"] == \
        "±3.1%: median over 1 published GB200 BF16 run (worst 3%); 1 more such run could not be modelled."


def test_a_lean_one_way_is_said():
    """A ±6% that is -6% on the median tells a planner which way to read the number; a balanced error says no more."""
    def stated(signed: float, fast: int) -> str:
        cohort = {"modelled": 95, "measured": 95, "median_abs_err": 0.062, "max_abs_err": 0.25,
                  "median_err": signed, "too_fast": fast}
        snapshot = {"engine": {"fingerprint": accuracy.fingerprint()}, "by_generation_precision": {"H100 bf16": cohort}}
        return accuracy.for_gpu("H100 SXM5 80GB", "bf16", snapshot)["statement"]

    assert stated(-0.062, 82) == ("±6.2%: median over 95 published H100 BF16 runs (worst 25%); predicted 6% too fast "
                                  "on the median (82 of 95 runs too fast).")
    assert stated(0.031, 20).endswith("; predicted 3% too slow on the median (75 of 95 runs too slow).")
    assert stated(0.004, 47).endswith("(worst 25%).")


def test_figures_from_another_engine_build_are_flagged(small):
    other = dict(small, engine={"version": "0.9", "fingerprint": "0000000000000000"})
    found = accuracy.for_gpu("V100 SXM3 32GB", "fp16", other)
    assert found["measured_with"]["stale"] is True and "earlier build of the engine" in found["statement"]


def test_the_order_is_trusted_as_far_as_the_error_and_the_claimed_gains_say():
    """Layouts within the cohort's median error of the best are not reliably ordered; the search's claimed gain over
    published layouts is given per source (the median of the groups' medians) beside the pooled median, which one
    large source dominates."""
    snapshot = {"summary": {"median_search_gain": 0.05},
                "groups": {"a": {"median_search_gain": 0.1}, "b": {"median_search_gain": 0.3},
                           "c": {"median_search_gain": 0.2}, "d": {"median_search_gain": None}}}
    order = accuracy.ranking(snapshot, 0.04)
    assert (order["tie_within"], order["search_gain_by_source"], order["search_gain_pooled"], order["sources"]) == \
        (0.04, 0.2, 0.05, 3)
    assert order["search_gain_same_options_by_source"] is None and "kept" not in order["statement"]
    assert order["statement"].startswith("Layouts within 4.0% of the best step time")
    assert "its own pick 20% faster than the published layout (median over 3 sources; 5% pooled over all runs)" \
        in order["statement"]
    for name, kept in (("a", 0.02), ("b", 0.09), ("c", 0.04)):
        snapshot["groups"][name]["median_search_gain_same_options"] = kept
    order = accuracy.ranking(snapshot, 0.04)
    assert order["search_gain_same_options_by_source"] == 0.04
    assert ("5% pooled over all runs), and 4% with each run's recomputation, ZeRO stage and sequence parallelism "
            "kept, though") in order["statement"]
    unsearched = accuracy.ranking({"groups": {"a": {"median_search_gain": None}}}, 0.04)
    assert unsearched["search_gain_by_source"] is None and "pick" not in unsearched["statement"]
    assert accuracy.ranking({}, None)["statement"] is None


def test_ties_are_the_plans_within_the_error_of_the_best():
    plans = [{"rank": r, "step_time_s": t} for r, t in ((1, 10.0), (2, 10.3), (3, 10.4), (4, 10.5), (5, 11.0))]
    assert accuracy.ties(plans, 0.04) == [2, 3]
    assert accuracy.ties(plans, None) == [] and accuracy.ties([], 0.04) == []
    # A plan stored without its rank (an early answer) is numbered by its place; one without a step time is no tie.
    stored = [{"step_time_s": 10.0}, {"step_time_s": 10.1}, {"rank": 3}, {"step_time_s": 12.0}]
    assert accuracy.ties(stored, 0.04) == [2]
    assert accuracy.ties([{"rank": 1}, {"rank": 2, "step_time_s": 1.0}], 0.04) == []


def test_a_plan_states_how_far_to_trust_its_order(small):
    found = accuracy.for_gpu("A100 SXM4 80GB", "fp16", small)
    # To the tenth of a percent the statement writes: marks past "within 3%" (3.42%) had read as contradictions.
    assert found["ranking"]["tie_within"] == round(found["median_abs_err"], 3)
    assert found["ranking"]["statement"].startswith(f"Layouts within {found['median_abs_err']:.1%} of the best")
    assert accuracy.ranking({}, 0.0342)["tie_within"] == 0.034
    assert accuracy.ranking({}, 0.0342)["statement"].startswith("Layouts within 3.4% of the best step time")
    # No comparable runs: the error over all runs, at least, with the order said to be less sure still.
    unchecked = accuracy.for_gpu("B200", "fp8", small)["ranking"]
    assert unchecked["tie_within"] == round(small["summary"]["median_abs_err"], 3)
    assert unchecked["statement"].startswith(
        f"Layouts within {small['summary']['median_abs_err']:.1%} of the best step time are not reliably ordered, "
        "and more may not be: that is the median error over all the published runs, and none like this plan's was "
        "measured")


def test_every_answer_states_how_far_to_trust_its_step_time(catalog):
    answer = plan(parse_spec(example("llama3-70b-h100-512-pinned"), catalog), top=1)
    stated = answer["accuracy"]
    assert (stated["generation"], stated["precision"]) == ("H100", "bf16")
    snapshot = accuracy.load_snapshot()
    assert stated["runs"] == snapshot["by_generation_precision"]["H100 bf16"]["modelled"] > 0
    assert "published H100 BF16 runs" in stated["statement"]
    # Without the catalog, its inline "H100 SXM5 80GB" takes the engine's default efficiencies and clock, not the
    # catalog's with which the published runs were costed: no error of theirs is its own.
    bare = plan(parse_spec(example("llama3-70b-h100-512-pinned")), top=1)["accuracy"]
    assert bare["runs"] == 0 and "gemm_efficiency 0.8, not 0.803" in bare["statement"]


def test_the_stored_validation_is_measured_with_this_engine(catalog):
    """planner/data/validation.json feeds the /validation/ page and every plan's error statement. When the
    engine, its data or the catalog change, run `make validation` to measure again."""
    snapshot = accuracy.load_snapshot()
    assert snapshot is not None, "no planner/data/validation.json: run `make validation`"
    assert snapshot["engine"]["fingerprint"] == accuracy.fingerprint(), "stale: run `make validation`"
    assert snapshot["files"] == ["planner/data/published_runs.json", "planner/data/calibration_runs.json"]
    assert snapshot["search"] is True
    again = validate(DEFAULT_RUNS, configs=DEFAULT_CONFIGS, catalog=catalog)
    keep = ("id", "measured_s", "predicted_s", "err", "layout")
    assert [{k: r[k] for k in keep} for r in again["rows"]] == [{k: r[k] for k in keep} for r in snapshot["rows"]]
    assert load_overlays(DEFAULT_CONFIGS)  # the launch-script details the snapshot used


def test_a_copy_of_the_reference_files_gets_the_same_figures(tmp_path, catalog):
    """The launch-script details are keyed by run id, not by file: validating a copy (as the shared
    reference set is) must not give other numbers than validating the package's own files."""
    copy_path = tmp_path / "published_copy.json"
    copy_path.write_text((DATA / "published_runs.json").read_text())
    ours = validate([DATA / "published_runs.json"], catalog=catalog)
    theirs = validate([copy_path], catalog=catalog)
    assert [r["err"] for r in theirs["rows"]] == [r["err"] for r in ours["rows"]]
    row = next(r for r in theirs["rows"] if r["id"] == "sc21_t1_18.4B")
    assert "mb8 " in row["layout"]  # run_table_1.sh's MBS for 18.4B, which the row leaves null
    bare = validate([copy_path], configs=None, catalog=catalog)
    assert "mb8 " not in next(r for r in bare["rows"] if r["id"] == "sc21_t1_18.4B")["layout"]


def test_a_row_that_states_a_launch_detail_keeps_it(tmp_path, catalog):
    row = dict(published("sc21_t1_18.4B")[0], micro_batch=4)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps({"cases": [row]}))
    (entry,) = validate([path], catalog=catalog)["rows"]
    assert "mb4 " in entry["layout"] and entry["err"] is not None
