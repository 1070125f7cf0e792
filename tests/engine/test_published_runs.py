"""Predict every published run with its published layout pinned, print the error table, and hold the targets:
median |error| of step time <= 8%, none above 17%. (Issue #2 set 5% and 15% when the constants were fitted on these
22 rows alone; since issue #8 they are fitted on 349 rows of two files, with A100 GEMMs at their measured 86.9% of
peak, and these 2020-21 Megatron rows came out at 7.4% and 16.4%.)"""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from planner.published import (WITHOUT_MARGIN, compare, error_table, load_overlays, load_rows, measured_step_time,
                               row_to_spec_doc)
from planner.accuracy import DEFAULT_CONFIGS
from planner.report import plan
from planner.spec import parse_spec

from .conftest import DATA

RUNS = DATA / "published_runs.json"
OVERLAYS = DEFAULT_CONFIGS


@pytest.fixture(scope="module")
def comparisons(catalog):
    return compare(load_rows(RUNS), catalog, load_overlays(OVERLAYS))


def test_every_published_run_is_predicted(comparisons):
    assert len(comparisons) == len(load_rows(RUNS))
    assert all(c.predicted_s is not None for c in comparisons), error_table(comparisons)


def test_step_time_errors_meet_the_targets(comparisons):
    print("\n" + error_table(comparisons))
    errors = [abs(c.error) for c in comparisons]
    assert statistics.median(errors) <= 0.03, error_table(comparisons)
    assert max(errors) <= 0.10, error_table(comparisons)


def test_the_published_layout_is_the_one_costed(comparisons):
    rows = {r["id"]: r for r in load_rows(RUNS)}
    for c in comparisons:
        row = rows[c.id]
        assert c.layout.startswith(f"TP{row['tp']} PP{row['pp']} DP{row['dp']}"), (c.id, c.layout)
    by_id = {c.id: c for c in comparisons}
    if "sc21_t1_145.6B" in by_id:  # the launch-script details (micro-batch 2, v = 2) are applied
        assert by_id["sc21_t1_145.6B"].layout.startswith("TP8 PP8 DP24 mb2 v2 full recompute")


def test_without_the_launch_script_details_the_search_fills_them(catalog):
    # The rows alone leave micro-batch and interleaving open; the engine still predicts every run.
    bare = compare(load_rows(RUNS), catalog)
    assert max(abs(c.error) for c in bare) <= 0.20, error_table(bare)


NEWER = Path(__file__).parent / "data" / "newer_runs.json"


def test_runs_on_newer_gpus_outside_the_fit(catalog):
    """Llama 3 405B on 8,192 and 16,384 H100s (Llama 3 paper, Table 4), never used for fitting: within 10% (+5.9%
    and +8.5%; +8.1% and +10.6% before the rows said that the paper's pipeline sends its hand-offs by asynchronous
    point-to-point communication, sec. 3.3.2, which hides them behind compute). Issue #8 had them 30-34% too slow: the rows left out the paper's optimizer sharding (ZeRO-1
    equivalent), and the search offered no selective recomputation under flash attention, so a stage that needs
    99 GiB without recomputation (ZeRO-1; 129 GiB with ZeRO-0) fell back to full recomputation: a whole repeated
    forward and its TP collectives, +3.8 s of 16.4 s at 8K GPUs. Selective keeps it at 57 GiB. DP and PP communication were under 0.5 s exposed each.
    The 128K-context stage is reported, not held (-2.6% today): its MFU convention for causal attention is not
    stated, and at 128K tokens attention is most of the FLOPs, so the measured step time is uncertain by ~1.4x."""
    comparisons = compare(load_rows(NEWER), catalog)
    print("\n" + error_table(comparisons))
    by_id = {c.id: c for c in comparisons}
    for run in ("llama3_405b_8k_gpus", "llama3_405b_16k_gpus"):
        assert abs(by_id[run].error) <= 0.10, error_table(comparisons)
    assert by_id["llama3_405b_16k_gpus_128k_context"].predicted_s is not None


def test_a_row_that_cannot_become_a_spec_is_reported_not_raised(catalog):
    row = dict(load_rows(RUNS)[0], id="broken", vocab=None)
    [c] = compare([row], catalog)
    assert c.predicted_s is None and c.why.startswith("no spec: model.vocab: is required")


@pytest.mark.parametrize("field, value", [("gpus", "lots"), ("tp", True), ("seq_len", -2048),
                                          ("tokens_per_sec_per_gpu", float("nan")), ("ib_gbps_per_port", "fast")])
def test_a_row_field_that_is_not_a_number_is_named(catalog, field, value):
    row = dict(load_rows(RUNS)[0], id="odd", **{field: value})
    [c] = compare([row], catalog)
    assert c.predicted_s is None
    assert c.why == f"no spec: {field}: must be a number of 0 or more, not {value!r}"


@pytest.mark.parametrize("field, value, message", [
    ("precision", 8, "precision: must be text, not 8"),
    ("notes", ["fsdp", "compile"], "notes: must be text, not ['fsdp', 'compile']"),
    ("recompute", ["full"], "recompute: must be text, not ['full']"),
    ("source", ["a paper"], "source: must be an object, not ['a paper']"),
    ("optimizer_sharding", {"stage": 3}, "optimizer_sharding: must be text or a ZeRO stage, not {'stage': 3}")])
def test_a_row_text_field_of_another_kind_is_named(catalog, field, value, message):
    """Every text field runtext reads (`.lower()`, regexes) must be text: a list or a number there had stopped the
    whole validation with an internal error instead of reporting the one row."""
    row = dict(load_rows(RUNS)[0], id="odd", **{field: value})
    [c] = compare([row], catalog)
    assert c.predicted_s is None and c.why == f"no spec: {message}"


def test_a_yes_no_sequence_parallel_column_is_read_as_said(catalog):
    """'no' is off (it had been truthy text, so on); a word that is neither is named."""
    base = dict(load_rows(RUNS)[0], tp=8, pp=4, dp=1, gpus=32)
    read = {v: row_to_spec_doc(dict(base, sequence_parallel=v), catalog)["layout"]["sequence_parallel"]
            for v in ("yes", "No", "false", 1, 0, True)}
    assert read == {"yes": True, "No": False, "false": False, 1: True, 0: False, True: True}
    [c] = compare([dict(base, id="odd", sequence_parallel="maybe")], catalog)
    assert c.why == "no spec: sequence_parallel: must be true or false, not 'maybe'"


def test_yes_no_recompute_and_a_bare_source_title_are_read(catalog):
    """A table's Activation Checkpointing column as a bool, and a source given as its title alone."""
    base = load_rows(RUNS)[0]
    as_text = {r: row_to_spec_doc(dict(base, recompute=r), catalog)["layout"]["recompute"]
               for r in ("full", "none")}
    assert row_to_spec_doc(dict(base, recompute=True), catalog)["layout"]["recompute"] == as_text["full"] == "full"
    assert row_to_spec_doc(dict(base, recompute=False), catalog)["layout"]["recompute"] == as_text["none"] == "none"
    [c] = compare([dict(base, source="Narayanan et al. 2021, Table 1")], catalog)
    [d] = compare([base], catalog)
    assert c.predicted_s == d.predicted_s is not None


def test_a_gpu_the_catalog_lacks_is_not_read_as_its_sxm_sibling(catalog):
    """An A800 is the A100 with NVLink cut to 400 GB/s; the H200 NVL is a catalog part of its own (4-GPU NVLink
    bridges); a GH200, a PCIe card or the H100 NVL is refused naming the field, not costed as the SXM part."""
    base = dict(load_rows(RUNS)[0], gpus_per_node=None, nvlink_domain_gpus=None, nvlink_gbytes_per_s_per_gpu=None)
    a800 = row_to_spec_doc(dict(base, gpu_type="A800 SXM4 80GB"), catalog)["cluster"]
    assert a800["gpu"] == "A100 SXM4 80GB" and a800["node"]["nvlink_gbytes_per_s"] == 400
    a100 = row_to_spec_doc(dict(base, gpu_type="A100 SXM4 80GB"), catalog)["cluster"]
    assert a100["node"]["nvlink_gbytes_per_s"] == 600
    nvl = row_to_spec_doc(dict(base, gpu_type="H200 NVL (141 GB)"), catalog)["cluster"]
    assert nvl["gpu"] == "H200 NVL" and nvl["node"]["name"] == "H200 NVL server (4-GPU NVLink bridges)"
    assert nvl["node"]["nvlink_domain_gpus"] == 4
    # NVLink and a PCIe host link named beside an SXM part are not those cards.
    for sxm in ("H100 NVLink 900 GB/s", "H100 SXM5 80GB (PCIe Gen5 host link)"):
        assert row_to_spec_doc(dict(base, gpu_type=sxm), catalog)["cluster"]["gpu"] == "H100 SXM5 80GB"
    for part in ("GH200 96GB", "NVIDIA A100 80GB PCIe", "H100-PCIe-80GB", "H100 NVL 94GB"):
        [c] = compare([dict(base, id="odd", gpu_type=part)], catalog)
        assert c.predicted_s is None and c.why.startswith(f"no spec: gpu_type: {part!r}: "), c.why
        assert c.why.endswith("give its figures as a custom GPU and node in a plan spec")


def test_an_mfu_is_read_against_the_peak_the_row_divided_by(catalog):
    """A run that quotes its MFU against FP8's peak (1,979 TFLOP/s on H100) ran twice the FLOP/s of one that quotes
    the same MFU against BF16's (989): its step is half as long. A row that states no peak gets the catalog's."""
    base = {k: v for k, v in load_rows(RUNS)[0].items() if k not in ("step_time_s", "derived", "tflops_per_gpu",
                                                                        "tokens_per_sec_per_gpu")}
    row = dict(base, gpu_type="H100 SXM5 80GB", mfu_percent=40.0)
    spec = parse_spec(row_to_spec_doc(row, catalog), catalog)
    unstated = measured_step_time(dict(row, peak_tflops_per_gpu_stated=None), spec)
    assert measured_step_time(dict(row, peak_tflops_per_gpu_stated=spec.cluster.gpu.peak_tflops), spec) == unstated
    fp8 = measured_step_time(dict(row, peak_tflops_per_gpu_stated=2 * spec.cluster.gpu.peak_tflops), spec)
    assert fp8 == pytest.approx(unstated / 2)


def test_the_batch_is_read_from_tokens_per_batch_and_dp_from_the_gpus(catalog):
    """A row that gives its batch in tokens (as Llama 3's '16M tokens') has that many sequences; one that gives
    neither a batch nor DP has one micro-batch on each of GPUs / (TP x PP x CP) replicas."""
    base = dict(load_rows(RUNS)[0], global_batch=None, derived=None)
    assert base["seq_len"] == 2048 and base["gpus"] == 32
    by_tokens = row_to_spec_doc(dict(base, tokens_per_batch=2048 * 512), catalog)
    assert by_tokens["training"]["global_batch"] == 512
    wide = dict(base, tp=8, pp=1, dp=None, cp=None, micro_batch=4, tokens_per_batch=None)
    assert row_to_spec_doc(wide, catalog)["training"]["global_batch"] == (32 // 8) * 4


def test_fewer_gpus_a_node_make_a_smaller_nvlink_domain_where_the_node_is_the_domain(catalog):
    """Four GPUs a node of a part whose usual node is an 8-GPU NVSwitch box: a 4-GPU domain with 4 NICs, not an
    8-GPU domain spanning two nodes; a GB200 tray keeps its rack-wide domain; a stated domain wins."""
    base = dict(load_rows(RUNS)[0], gpus_per_node=4, nvlink_domain_gpus=None, nics_per_node=None,
                ib_gbps_per_port=None, fabric_notes=None)
    node = row_to_spec_doc(dict(base, gpu_type="H100 SXM5 80GB"), catalog)["cluster"]["node"]
    assert (node["gpus"], node["nvlink_domain_gpus"], node["nics"]) == (4, 4, 4)
    tray = row_to_spec_doc(dict(base, gpu_type="GB200", gpus=72), catalog)["cluster"]["node"]
    assert (tray["gpus"], tray["nvlink_domain_gpus"]) == (4, 72)
    stated = row_to_spec_doc(dict(base, gpu_type="H100 SXM5 80GB", nvlink_domain_gpus=8), catalog)
    assert stated["cluster"]["node"]["nvlink_domain_gpus"] == 8


def test_a_row_that_leaves_the_shape_to_the_models_name_gets_the_catalog_preset(catalog):
    """'Meta Llama 3.1 405B (Table 4)' with no layers, width or heads is the catalog's Llama 3.1 405B (a stated
    field wins); a model the catalog has no preset for is still reported as missing its shape."""
    shape = {k: None for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")}
    row = dict(load_rows(RUNS)[0], **shape, model="Meta Llama 3.1 405B (Table 4)", seq_len=8192)
    model = row_to_spec_doc(row, catalog)["model"]
    preset = catalog["model"]["Llama 3.1 405B"]
    assert {k: model[k] for k in shape} == {k: preset[k] for k in shape} and model["gated_mlp"] is True
    assert model["seq_len"] == 8192
    assert row_to_spec_doc(dict(row, vocab=32000), catalog)["model"]["vocab"] == 32000
    [c] = compare([dict(row, model="Llama 2 70B")], catalog)
    assert c.predicted_s is None and c.why.startswith("no spec: model.layers: is required")


def test_a_slingshot_network_is_the_catalogs_dragonfly_at_the_rows_port_rate(catalog):
    """HPE Slingshot (Alps, Frontier-class machines) is a dragonfly, not an InfiniBand fat tree."""
    row = dict(load_rows(RUNS)[0], gpus_per_node=4, nvlink_domain_gpus=None, nics_per_node=None,
               ib_gbps_per_port=None, fabric_notes="HPE Slingshot-11, 4 x 200 Gb/s per node")
    fabric = row_to_spec_doc(row, catalog)["cluster"]["fabric"]
    assert fabric["topology"] == "dragonfly" and fabric["link_gbits_per_s"] == 200.0
    assert parse_spec(row_to_spec_doc(row, catalog), catalog).cluster.fabric.topology == "dragonfly"


def test_a_run_that_fits_only_without_the_fragmentation_margin_is_costed_and_says_so(catalog):
    """SC21's 18.4B layout with micro-batch 4 and no recomputation needs more than 80 GiB with the caching
    allocator's fragmentation allowance and less without it. A published run ran, so it is costed at the memory it
    needs (as with expandable segments, which keep no allowance), and its layout says it fit only so; a planner's
    own search keeps the margin."""
    row = dict(load_rows(RUNS)[3], id="tight", micro_batch=4, recompute="none")
    assert row["gpus"] == 256 and row["tp"] == 8
    [c] = compare([row], catalog)
    assert c.layout == "TP8 PP1 DP32 mb4" + WITHOUT_MARGIN
    doc = row_to_spec_doc(row, catalog)
    with_margin = plan(parse_spec(doc, catalog), top=1)
    assert with_margin["plans"] == [] and "out_of_memory" in with_margin["rejected_examples"]
    doc["training"]["expandable_segments"] = True
    [best] = plan(parse_spec(doc, catalog), top=1)["plans"]
    assert c.predicted_s == best["step_time_s"]
    assert best["memory_gib"]["total"] <= best["memory_gib"]["capacity"]
    # Too big even without the margin: not modelled, with the planner's own reason (margin included).
    huge = dict(row, micro_batch=16)
    [c] = compare([huge], catalog)
    own = plan(parse_spec(row_to_spec_doc(huge, catalog), catalog), top=1)
    assert c.predicted_s is None and c.why == "; ".join(own["rejected_examples"].values())
    assert "needs" in c.why and "GiB of 80" in c.why


def test_a_run_that_leaves_recompute_open_is_judged_without_the_margin_too(catalog):
    """The same SC21 layout with its recomputation unstated: with the margin the search must recompute (no
    recomputation needs more than 80 GiB), without it the layout fits as it is and runs faster. The run is judged
    at the memory it needs, as one that states no recomputation is."""
    row = dict(load_rows(RUNS)[3], id="open", micro_batch=4, recompute=None)
    own = plan(parse_spec(row_to_spec_doc(row, catalog), catalog), top=1)["plans"][0]
    assert "recompute" in own["label"]
    [c] = compare([row], catalog)
    assert c.layout == "TP8 PP1 DP32 mb4" + WITHOUT_MARGIN
    assert c.predicted_s < own["step_time_s"]
    # Where the margin changes nothing, nothing is said.
    [c] = compare([dict(row, micro_batch=1)], catalog)
    assert not c.layout.endswith(WITHOUT_MARGIN)


@pytest.mark.parametrize("sharding, notes, overlap", [
    ("FSDP2 fully_shard", "torchtitan", False),   # PyTorch's pipeline schedules reduce once, after the last backward
    ("ZeRO-2 style: optimizer states and gradients sharded over DP", "4D parallelism", None),
])
def test_gradients_or_weights_sharded_under_a_pipeline_are_read_as_zero_1(catalog, sharding, notes, overlap):
    """No stack shards gradients or weights across pipeline micro-batches (the planner refuses ZeRO-2/3 with PP):
    a row that says it did holds what ZeRO-1 holds, and is modelled so instead of refused."""
    row = dict(load_rows(RUNS)[6], id="pp_sharded", optimizer_sharding=sharding, notes=notes)
    assert row["pp"] > 1
    doc = row_to_spec_doc(row, catalog)
    assert doc["layout"]["zero"] == 1
    assert doc["training"].get("overlap_grad_reduce") == overlap
    [c] = compare([row], catalog)
    assert c.predicted_s is not None and c.layout.endswith("ZeRO-1")
    # Without a pipeline the stated stage stands.
    flat = row_to_spec_doc(dict(row, pp=1, dp=row["dp"] * row["pp"]), catalog)
    assert flat["layout"]["zero"] in (2, 3)
