"""Sweep expansion: the product of the axes, each scenario parsed, every problem named by axis and scenario."""
from __future__ import annotations

import pytest

from planner import SpecError, parse_spec
from planner.whatif.sweep import (MAX_SCENARIOS, axis_paths, expand, expand_leaving_out, scenario_doc, scenario_label,
                                  value_text)

BASE = {"model": "Llama 3 70B", "training": {"global_batch": 1024, "precision": "bf16"},
        "cluster": {"num_gpus": 256, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                    "fabric": "NDR InfiniBand fat tree"}}


def errors_of(base, vary, catalog) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        expand(base, vary, catalog)
    return caught.value.as_dict()


def test_it_makes_the_product_of_the_axes_in_axis_order(catalog):
    scenarios = expand(BASE, {"cluster.num_gpus": [256, 512, 1024],
                              "cluster.fabric": ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"],
                              "training.precision": ["bf16", "fp8"]}, catalog)
    assert len(scenarios) == 12
    first, last = scenarios[0], scenarios[-1]
    assert first.values == {"cluster.num_gpus": 256, "cluster.fabric": "NDR InfiniBand fat tree",
                            "training.precision": "bf16"}
    assert (last.spec.cluster.num_gpus, last.spec.cluster.fabric.kind, last.spec.training.precision) == (
        1024, "roce", "fp8")
    assert first.spec.model.name == "Llama 3 70B" and first.spec.model.layers == 80  # the preset, expanded


def test_a_field_under_a_named_row_overrides_only_that_field(catalog):
    (one,) = expand(BASE, {"cluster.gpu.memory_gib": [141]}, catalog)
    assert one.spec.cluster.gpu.memory_gib == 141
    assert one.spec.cluster.gpu.peak_tflops == catalog["gpu"]["H100 SXM5 80GB"]["peak_tflops"]


def test_a_model_axis_takes_presets_and_model_fields_override_them(catalog):
    scenarios = expand(BASE, {"model": ["Llama 3 8B", "Llama 3 70B"], "model.seq_len": [4096]}, catalog)
    assert [(s.spec.model.name, s.spec.model.layers, s.spec.model.seq_len) for s in scenarios] == [
        ("Llama 3 8B (modified)", 32, 4096), ("Llama 3 70B (modified)", 80, 4096)]  # the presets' are 8,192


def test_a_row_an_axis_changes_is_named_modified_and_one_it_leaves_keeps_its_name(catalog):
    # As the plan form names a row a person edited: a scenario must not name a model or GPU it does not describe.
    scenarios = expand(BASE, {"model.layers": [40, 80], "cluster.gpu.memory_gib": [40, 80]}, catalog)
    assert [(s.spec.model.name, s.spec.cluster.gpu.name) for s in scenarios] == [
        ("Llama 3 70B (modified)", "H100 SXM5 80GB (modified)"), ("Llama 3 70B (modified)", "H100 SXM5 80GB"),
        ("Llama 3 70B", "H100 SXM5 80GB (modified)"), ("Llama 3 70B", "H100 SXM5 80GB")]
    modified = scenarios[0].spec.cluster.gpu  # the row's other fields, copied in, not lost with its name
    assert (modified.memory_gib, modified.peak_tflops, modified.sm_count) == (
        40, catalog["gpu"]["H100 SXM5 80GB"]["peak_tflops"], catalog["gpu"]["H100 SXM5 80GB"]["sm_count"])
    assert scenarios[-1].spec == expand(BASE, {"cluster.num_gpus": [256]}, catalog)[0].spec  # the same request


def test_a_scenario_the_engine_refuses_is_named_under_its_axis(catalog):
    errors = errors_of(BASE, {"cluster.num_gpus": [256, 100]}, catalog)
    assert list(errors) == ["vary.cluster.num_gpus"]
    (message,) = errors["vary.cluster.num_gpus"]
    assert message.startswith("scenario {cluster.num_gpus: 100}: cluster.num_gpus: must be a positive multiple")
    assert "node.gpus (8)" in message


def test_an_unknown_path_an_empty_list_and_a_repeat_are_each_named(catalog):
    errors = errors_of(BASE, {"cluster.gpus": [1], "training.precision": [], "cluster.num_gpus": [256, 256]},
                       catalog)
    assert "unknown path" in errors["vary.cluster.gpus"][0]
    assert errors["vary.training.precision"] == ["must be a non-empty list of values"]
    assert errors["vary.cluster.num_gpus"] == ["lists 256 twice"]


def test_an_unknown_catalog_name_on_an_axis_is_named(catalog):
    errors = errors_of(BASE, {"cluster.gpu": ["H100 SXM5 80GB", "Z9000"]}, catalog)
    assert "scenario {cluster.gpu: Z9000}: cluster.gpu: unknown catalog name 'Z9000'" in errors["vary.cluster.gpu"][0]
    errors = errors_of(BASE, {"model": ["Llama 9"]}, catalog)
    assert "unknown catalog name 'Llama 9'" in errors["vary.model"][0]  # the plans API's words (was "model preset")


def test_more_than_1024_scenarios_is_refused_with_the_count(catalog):
    errors = errors_of(BASE, {"cluster.num_gpus": [8 * i for i in range(1, 34)],
                              "training.global_batch": list(range(1024, 1024 + 32))}, catalog)
    assert errors == {"vary": [f"makes 33 × 32 = 1,056 scenarios; at most {MAX_SCENARIOS:,}"]}


def test_a_bad_base_field_is_named_once_under_base(catalog):
    base = {**BASE, "training": {"global_batch": "many"}}
    errors = errors_of(base, {"cluster.num_gpus": [256, 512]}, catalog)
    assert errors == {"base.training.global_batch": ["must be a number, not 'many'"]}


def test_a_bad_base_field_is_the_bases_whatever_the_axes(catalog):
    # Every scenario has it, so no axis caused it, even one in the same section.
    base = {**BASE, "training": {"global_batch": "abc"}}
    errors = errors_of(base, {"cluster.num_gpus": [256, 512], "training.precision": ["bf16", "fp8"]}, catalog)
    assert errors == {"base.training.global_batch": ["must be a number, not 'abc'"]}
    base = {**BASE, "cluster": {k: v for k, v in BASE["cluster"].items() if k != "num_gpus"}}
    assert errors_of(base, {"cluster.gpu.peak_tflops": [900, 1000]}, catalog) == {
        "base.cluster.num_gpus": ["is required"]}


def test_one_axis_past_the_bound_is_counted_plainly(catalog):
    errors = errors_of(BASE, {"cluster.num_gpus": [8 * i for i in range(1, 1100)]}, catalog)
    assert errors == {"vary": [f"makes 1,099 scenarios; at most {MAX_SCENARIOS:,}"]}


def test_a_field_axis_overrides_that_field_of_each_named_row_and_a_missing_vary_is_refused(catalog):
    scenarios = expand(BASE, {"cluster.gpu": ["B200", "H100 SXM5 80GB"], "cluster.gpu.memory_gib": [80]}, catalog)
    assert [(s.spec.cluster.gpu.name, s.spec.cluster.gpu.memory_gib) for s in scenarios] == [
        ("B200 (modified)", 80), ("H100 SXM5 80GB", 80)]  # a B200 with 80 GiB is not the catalog's B200
    assert scenarios[0].spec.cluster.gpu.peak_tflops == catalog["gpu"]["B200"]["peak_tflops"]
    assert "vary" in errors_of(BASE, {}, catalog)
    assert "vary" in errors_of(BASE, [1, 2], catalog)


def test_every_engine_field_is_a_path_and_the_base_is_not_changed(catalog):
    paths = axis_paths()
    assert {"cluster.num_gpus", "cluster.gpu", "model", "training.precision", "layout.tp",
            "cluster.fabric.latency_us"} <= set(paths)
    base = {**BASE, "cluster": dict(BASE["cluster"])}
    doc = scenario_doc(base, {"cluster.gpu.memory_gib": 96}, catalog)
    # The named row with the axis's field over it, as a request would write it; the engine fills in the rest
    # from the row and names it "(modified)", as it does for the API and the CLI.
    assert doc["cluster"]["gpu"] == {"name": "H100 SXM5 80GB", "memory_gib": 96}
    assert parse_spec(doc, catalog).cluster.gpu == parse_spec(
        {**doc, "cluster": {**doc["cluster"], "gpu": {**catalog["gpu"]["H100 SXM5 80GB"], "memory_gib": 96,
                                                      "name": "H100 SXM5 80GB (modified)"}}}, catalog).cluster.gpu
    assert parse_spec(doc, catalog).cluster.gpu.name == "H100 SXM5 80GB (modified)"
    assert base["cluster"]["gpu"] == "H100 SXM5 80GB"
    assert scenario_label({"cluster.num_gpus": 100, "training.precision": "fp8"}) == (
        "{cluster.num_gpus: 100, training.precision: fp8}")


def test_axis_values_are_labelled_as_people_read_them():
    assert [value_text(v) for v in ("fp8", True, 256, 0.5, None)] == ["fp8", "true", "256", "0.5", "null"]
    assert value_text(1e12) == "1000000000000" and value_text(2.5e-7) == "2.5e-07"  # not JSON's 1000000000000.0
    assert value_text({"name": "6g", "gpus": 6}) == "6g"
    assert value_text({"gpus": 6, "nics": 6}) == '{"gpus": 6, "nics": 6}'  # never Python's {'gpus': 6}


def test_a_combination_that_cannot_run_is_left_out_where_asked_and_each_value_runs_elsewhere(catalog):
    vary = {"cluster.gpu": ["A100 SXM4 80GB", "H100 SXM5 80GB"], "training.precision": ["bf16", "fp8"]}
    base = {**BASE, "cluster": {**BASE["cluster"], "node": "DGX H100"}}
    with pytest.raises(SpecError):  # not asked: refused, as ever
        expand(base, vary, catalog)
    scenarios, left_out = expand_leaving_out(base, vary, catalog)
    assert [s.values for s in scenarios] == [
        {"cluster.gpu": "A100 SXM4 80GB", "training.precision": "bf16"},
        {"cluster.gpu": "H100 SXM5 80GB", "training.precision": "bf16"},
        {"cluster.gpu": "H100 SXM5 80GB", "training.precision": "fp8"}]
    (out,) = left_out
    assert out.as_dict() == {"values": {"cluster.gpu": "A100 SXM4 80GB", "training.precision": "fp8"}, "reasons": [
        "training.precision: fp8 needs a GPU with FP8 tensor cores, and 'A100 SXM4 80GB' has none "
        "(cluster.gpu.fp8_tflops is 0)"]}
    # A value that runs in no scenario is a mistake in its axis, not an unlucky pairing: still refused.
    with pytest.raises(SpecError) as caught:
        expand_leaving_out(base, {**vary, "training.precision": ["fp8"]}, catalog)
    assert "'A100 SXM4 80GB' has none" in caught.value.as_dict()["vary.training.precision"][0]


def test_a_gpu_in_a_node_not_built_with_it_is_left_out_unless_no_chosen_node_is(catalog):
    held = {"DGX H100": "H100 SXM5 80GB", "DGX B200": "B200"}

    def unbuilt(spec):
        gpu, node = spec.cluster.gpu.name, spec.cluster.node.name
        return [] if held.get(node) == gpu else [f"{node} is built with {held[node]}, not {gpu}"]

    vary = {"cluster.gpu": ["H100 SXM5 80GB", "B200"], "cluster.node": ["DGX H100", "DGX B200"]}
    scenarios, left_out = expand_leaving_out(BASE, vary, catalog, unbuilt=unbuilt)
    assert [tuple(s.values.values()) for s in scenarios] == [("H100 SXM5 80GB", "DGX H100"), ("B200", "DGX B200")]
    assert [(tuple(o.values.values()), o.reasons) for o in left_out] == [
        (("H100 SXM5 80GB", "DGX B200"), ["DGX B200 is built with B200, not H100 SXM5 80GB"]),
        (("B200", "DGX H100"), ["DGX H100 is built with H100 SXM5 80GB, not B200"])]
    # A GPU that none of the chosen nodes is built with is a what-if the sweep asks for: planned, in its place.
    scenarios, left_out = expand_leaving_out(BASE, {"cluster.gpu": ["B200", "H100 SXM5 80GB"],
                                                    "cluster.node": ["DGX H100"]}, catalog, unbuilt=unbuilt)
    assert [s.values["cluster.gpu"] for s in scenarios] == ["B200", "H100 SXM5 80GB"] and left_out == []
    # Not asked to leave anything out: every GPU in every node, as before.
    scenarios, left_out = expand_leaving_out(BASE, vary, catalog, leave_out=False, unbuilt=unbuilt)
    assert len(scenarios) == 4 and left_out == []


def test_what_pairs_with_nothing_is_planned_with_each_whatever_the_axes_order(catalog):
    # H200 (no chosen node is built with it) and DGX B200 (built with no chosen GPU) are what-ifs: each planned
    # with every value of the other axis. Decided from the built pairs alone: the answer had hung on the order.
    held = {"DGX H100": "H100 SXM5 80GB", "DGX B200": "B200"}

    def unbuilt(spec):
        gpu, node = spec.cluster.gpu.name, spec.cluster.node.name
        return [] if held[node] == gpu else [f"{node} is built with {held[node]}, not {gpu}"]

    for gpus, nodes in ((["H100 SXM5 80GB", "H200 SXM 141GB"], ["DGX H100", "DGX B200"]),
                        (["H200 SXM 141GB", "H100 SXM5 80GB"], ["DGX B200", "DGX H100"])):
        scenarios, left_out = expand_leaving_out(BASE, {"cluster.gpu": gpus, "cluster.node": nodes}, catalog,
                                                 unbuilt=unbuilt)
        assert sorted(tuple(s.values.values()) for s in scenarios) == sorted(
            (g, n) for g in gpus for n in nodes) and left_out == []
    # With B200 chosen too, DGX B200 pairs with it: H100 and H200 in it are left out; H200 still goes in each.
    scenarios, left_out = expand_leaving_out(BASE, {"cluster.gpu": ["H100 SXM5 80GB", "H200 SXM 141GB", "B200"],
                                                    "cluster.node": ["DGX H100", "DGX B200"]}, catalog,
                                             unbuilt=unbuilt)
    assert [tuple(s.values.values()) for s in scenarios] == [
        ("H100 SXM5 80GB", "DGX H100"), ("H200 SXM 141GB", "DGX H100"), ("H200 SXM 141GB", "DGX B200"),
        ("B200", "DGX B200")]
    assert [tuple(o.values.values()) for o in left_out] == [("H100 SXM5 80GB", "DGX B200"), ("B200", "DGX H100")]


def test_leaving_out_counts_the_scenarios_planned_not_the_combinations(catalog):
    # All GPUs x all nodes x precisions x counts was refused at 1,350 combinations, though it plans about 180.
    gpus = ["A100 SXM4 80GB", "H100 SXM5 80GB"]
    counts = list(range(8, 8 * 601, 8))  # 2 x 600 x 2 = 2,400 combinations
    vary = {"cluster.gpu": gpus, "cluster.num_gpus": counts, "training.precision": ["bf16", "fp8"]}
    with pytest.raises(SpecError) as caught:
        expand(BASE, vary, catalog)
    assert caught.value.as_dict()["vary"] == ["makes 2 × 600 × 2 = 2,400 scenarios; at most 1,024"]
    with pytest.raises(SpecError) as caught:  # 1,800 planned (A100 fp8 left out): still past the bound, said so
        expand_leaving_out(BASE, vary, catalog)
    assert caught.value.as_dict()["vary"] == [
        "makes 1,800 scenarios once 600 combinations that cannot run are left out; at most 1,024"]
    with pytest.raises(SpecError) as caught:  # none left out: nothing to say of it ("once 0 combinations ...")
        expand_leaving_out(BASE, {"cluster.num_gpus": list(range(8, 8 * 1101, 8))}, catalog)
    assert caught.value.as_dict()["vary"] == ["makes 1,100 scenarios; at most 1,024"]
    scenarios, left_out = expand_leaving_out(BASE, {**vary, "cluster.num_gpus": counts[:300]}, catalog)
    assert (len(scenarios), len(left_out)) == (900, 300)  # 1,200 combinations, 900 planned
    with pytest.raises(SpecError) as caught:
        expand_leaving_out(BASE, {**vary, "cluster.num_gpus": list(range(8, 8 * 1100, 8))}, catalog)
    assert caught.value.as_dict()["vary"] == [
        "makes 2 × 1099 × 2 = 4,396 combinations; at most 4,096, of which 1,024 scenarios once those that cannot "
        "run are left out"]
