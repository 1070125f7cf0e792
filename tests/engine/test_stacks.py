"""Training-stack presets (training.framework, planner/data/stacks.json): they fill what a request leaves out,
never what it states, and each agrees with the published rows of its stack."""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from planner import SpecError, accuracy, parse_spec, plan, stacks
from planner.published import compare, load_rows, row_to_spec_doc
from planner.spec import REQUIRED, SECTIONS
from planner.whatif.sweep import expand

from .conftest import DATA

OPTIONS = {f.name: f for f in SECTIONS["training"]}
# What tells the stacks apart in every one of their rows; the rest (kernels fused by torch.compile or not, the
# loss) depends on the run's version and flags, so the preset takes what current versions do.
DEFINING = ("tp_wgrad_overlap", "checkpoint_impl", "cp_impl", "expert_gemm", "fp8_saved_inputs", "fp8_weight_cache",
            "zero_granularity")


def test_a_stack_fills_the_options_a_request_leaves_out(catalog, gpt3_doc):
    gpt3_doc["training"]["framework"] = "torchtitan"
    spec = parse_spec(gpt3_doc, catalog)
    assert spec.training.framework == "torchtitan"
    assert (spec.training.checkpoint_impl, spec.training.cp_impl, spec.training.projections) == (
        "pytorch", "pytorch", "separate")
    assert spec.training.tp_wgrad_overlap is False and spec.training.zero_granularity == "layer"
    assert spec.training.fp8_recipe == "tensorwise"  # no stack names it: the engine's default


def test_a_stated_option_wins_over_the_stack_and_null_or_empty_is_left_out(catalog, gpt3_doc):
    gpt3_doc["training"].update(framework="fsdp", elementwise="fused", tp_wgrad_overlap=True, cp_impl=None,
                                checkpoint_impl="")
    t = parse_spec(gpt3_doc, catalog).training
    assert (t.elementwise, t.tp_wgrad_overlap) == ("fused", True)  # stated; fsdp runs eager, without the overlap
    assert (t.cp_impl, t.checkpoint_impl) == ("pytorch", "pytorch")  # left out: fsdp's


def test_generic_is_every_options_own_default(catalog, gpt3_doc):
    plain = parse_spec(gpt3_doc, catalog).training
    gpt3_doc["training"]["framework"] = "generic"
    named = parse_spec(gpt3_doc, catalog).training
    assert plain == named and plain.framework == "generic"
    assert all(getattr(plain, name) == f.default for name, f in OPTIONS.items() if f.default not in (None, REQUIRED))


@pytest.mark.parametrize("value, message", [
    ("torchtitn", "must be one of generic, megatron_core, torchtitan, fsdp (got 'torchtitn')"),
    (3, "must be a string, not a number"),
])
def test_an_unknown_stack_is_named_in_the_message(catalog, gpt3_doc, value, message):
    gpt3_doc["training"]["framework"] = value
    with pytest.raises(SpecError) as err:
        parse_spec(gpt3_doc, catalog)
    assert [(e.field, e.message) for e in err.value.errors] == [("training.framework", message)]


def test_every_preset_value_is_one_the_option_takes_and_has_a_source(catalog, gpt3_doc):
    for name, entry in stacks.STACKS.items():
        assert set(entry["options"]) <= set(OPTIONS), name
        assert set(entry["sources"]) == set(entry["options"]), name
        gpt3_doc["training"]["framework"] = name
        t = parse_spec(gpt3_doc, catalog).training
        assert {k: getattr(t, k) for k in entry["options"]} == entry["options"], name


@pytest.fixture(scope="module")
def row_options(catalog) -> dict[str, dict[str, Counter]]:
    """{group: {option: Counter of the values validation costs the group's rows with}}."""
    found: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for path in (DATA / "calibration_runs.json", DATA / "published_runs.json"):
        for row in load_rows(path):
            if row.get("tp") is None and row.get("dp") is None and row.get("pp") is None:
                continue  # states no layout: not costed
            doc = row_to_spec_doc(row, catalog)
            for key, value in doc["training"].items():
                found[row["group"]][key][value] += 1
    return found


@pytest.mark.parametrize("name", list(stacks.STACKS))
def test_each_stack_agrees_with_the_published_rows_of_that_stack(name, row_options):
    entry = stacks.STACKS[name]
    groups = entry["rows"]
    assert groups and all(g in row_options for g in groups), groups
    for option, value in entry["options"].items():
        seen = Counter()
        for g in groups:
            seen.update(row_options[g][option])
        assert value in seen, (name, option, value, seen)  # no preset value is one its rows never ran
        if option in DEFINING:
            assert set(seen) == {value}, (name, option, seen)


def test_the_stacks_differ_where_their_rows_do():
    megatron, titan, fsdp = (stacks.preset(n) for n in ("megatron_core", "torchtitan", "fsdp"))
    for option in DEFINING:
        assert megatron[option] != titan[option] == fsdp[option], option
    assert titan["projections"] == "separate" != fsdp["projections"]  # torchtitan's Llama: wq, wk, wv
    assert titan["elementwise"] == "fused" != fsdp["elementwise"]  # torch.compile against eager modules


def test_a_sweep_compares_stacks_on_one_job(catalog):
    base = {"model": "Llama 3 8B", "training": {"global_batch": 64, "elementwise": "eager"},
            "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                        "fabric": "NDR InfiniBand fat tree"}}
    scenarios = expand(base, {"training.framework": ["megatron_core", "torchtitan"]}, catalog)
    megatron, titan = (s.spec.training for s in scenarios)
    assert (megatron.checkpoint_impl, titan.checkpoint_impl) == ("megatron", "pytorch")
    assert megatron.elementwise == titan.elementwise == "eager"  # the base states it: no stack overrides it


def test_compare_can_cost_the_rows_with_a_stacks_settings(catalog):
    """bench/stack_presets.py's lever: the rows' own options replaced by given ones."""
    row = next(r for r in load_rows(DATA / "calibration_runs.json") if r["id"] == "llmf_h100bf16_1b_s2048_g8_gb112")
    (own,) = compare([row], catalog)
    (generic,) = compare([row], catalog, training={"elementwise": "fused"})
    (fsdp,) = compare([row], catalog, training=stacks.preset("fsdp"))
    assert own.predicted_s == fsdp.predicted_s  # llm-foundry's run is what the fsdp stack says
    assert generic.predicted_s < own.predicted_s  # fused norms and activations, not llm-foundry's eager modules


def test_a_plan_naming_a_stack_says_how_the_model_does_on_that_stacks_runs(catalog, gpt3_doc):
    snapshot = accuracy.load_snapshot()
    fsdp_groups = {"F_llmfoundry_benchmarks", "F_fms_fsdp_ibm"}
    errors = [r["err"] for r in snapshot["rows"] if r["group"] in fsdp_groups and r["err"] is not None]
    gpt3_doc["training"]["framework"] = "fsdp"
    stated = plan(parse_spec(gpt3_doc, catalog), top=1)["stack_accuracy"]
    assert (stated["stack"], stated["runs"]) == ("fsdp", len(errors)) and stated["runs"] == 232
    assert stated["median_abs_err"] == pytest.approx(statistics.median(abs(e) for e in errors))
    assert stated["statement"].startswith(f"On published runs of the fsdp stack: ±{stated['median_abs_err']:.1%}, "
                                          "median over 232 runs on A100 and H100 (worst")  # not an AMD plan's own
    assert stated["generations"] == ["A100", "H100"]
    gpt3_doc["training"]["framework"] = "generic"
    assert "stack_accuracy" not in plan(parse_spec(gpt3_doc, catalog), top=1)  # no stack named: nothing to say


def test_megatron_core_runs_transformer_engines_attention(catalog, gpt3_doc):
    """The megatron_core stack runs Transformer Engine's attention pick (te): on an H100 cuDNN's fused attention,
    1.7x FlashAttention-2 there, so its step is shorter than with FlashAttention-2 stated; on the A100, where
    Transformer Engine picks FlashAttention-2, the same."""
    compute = {}
    for gpu, node in (("H100 SXM5 80GB", "DGX H100"), ("A100 SXM4 80GB", "DGX A100")):
        for attention in (None, "flash"):
            doc = {**gpt3_doc, "training": {**gpt3_doc["training"], "framework": "megatron_core",
                                            "attention": attention},
                   "cluster": {**gpt3_doc["cluster"], "gpu": gpu, "node": node},
                   "layout": {"tp": 8, "pp": 16, "micro_batch": 1, "recompute": "selective"}}
            spec = parse_spec(doc, catalog)
            assert spec.training.attention == (attention or "te")
            compute[gpu, attention] = plan(spec, top=1)["plans"][0]["time_s"]["compute"]
    # GPT-3 at 2,048 tokens spends little of its step in attention: 1.3% less compute here
    assert compute["H100 SXM5 80GB", None] < 0.99 * compute["H100 SXM5 80GB", "flash"]
    assert compute["A100 SXM4 80GB", None] == compute["A100 SXM4 80GB", "flash"]


@pytest.mark.parametrize("name", ["megatron", "Megatron-Core", " mcore "])
def test_megatron_core_answers_to_the_names_people_call_it(catalog, gpt3_doc, name):
    gpt3_doc["training"]["framework"] = name
    t = parse_spec(gpt3_doc, catalog).training
    assert t.framework == "megatron_core" and t.fp8_weight_cache is True


def test_the_order_is_trusted_no_further_than_the_named_stacks_runs_allow(catalog, gpt3_doc):
    # On H100 with megatron_core the ties were within the H100 BF16 runs' median error, under a line saying that
    # stack's runs are about twice as far off: a planner read the smaller figure as how sure the order is.
    gpt3_doc["cluster"].update(gpu="H100 SXM5 80GB", node="DGX H100", num_gpus=1024)
    gpt3_doc["training"]["precision"] = "bf16"
    generic = plan(parse_spec(gpt3_doc, catalog), top=3)["accuracy"]
    gpt3_doc["training"]["framework"] = "megatron_core"
    answer = plan(parse_spec(gpt3_doc, catalog), top=3)
    stack, stated = answer["stack_accuracy"], answer["accuracy"]
    assert stack["median_abs_err"] > generic["median_abs_err"] and "H100" in stack["generations"]
    assert stated["median_abs_err"] == generic["median_abs_err"]  # the headline is still the cohort's
    assert stated["ranking"]["tie_within"] == round(stack["median_abs_err"], 3) != generic["ranking"]["tie_within"]
    assert stated["ranking"]["statement"].startswith(
        f"Layouts within {stack['median_abs_err']:.1%} of the best step time (the median error on published runs "
        "of the megatron_core stack, larger than the one above) are not reliably ordered")
    # A stack whose runs are closer than the cohort's, or ran on other GPUs, leaves the cohort's figure.
    assert accuracy.with_stack(generic, {**stack, "median_abs_err": 0.001}) is generic
    assert accuracy.with_stack(generic, {**stack, "generations": ["A100"]}) is generic
