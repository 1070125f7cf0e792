"""The spec boundary: every class of bad input gets a message naming the field and the rule."""
from __future__ import annotations

import pytest

from planner import SpecError, parse_spec
from planner.spec import MAX_GPUS

from .conftest import EXAMPLES, example


def errors_of(doc, catalog=None) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(doc, catalog)
    return info.value.as_dict()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_it_accepts_every_shared_example(path, catalog):
    spec = parse_spec(example(path.stem), catalog)
    assert spec.cluster.num_gpus % spec.cluster.node.gpus == 0


def test_it_fills_defaults(gpt3_doc):
    spec = parse_spec(gpt3_doc)
    assert spec.model.kv_heads == 96
    assert spec.model.ffn_hidden == 4 * 12288
    assert spec.model.experts == 1 and spec.model.top_k == 1
    assert spec.cluster.node.nvlink_domain_gpus == 8
    assert spec.training.attention == "flash"
    assert spec.layout.pinned() == {}


def test_canonical_form_round_trips(gpt3_doc, catalog):
    spec = parse_spec(gpt3_doc, catalog)
    assert parse_spec(spec.to_dict(), catalog) == spec


def test_every_catalog_row_written_out_in_full_keeps_its_name_and_round_trips(catalog):
    # A saved plan's spec has every field filled in, derived ones included: read back, it must be the same plan,
    # not "NAME (modified)" (a retry or an edited copy would search again under another name).
    for name in catalog["model"]:
        doc = {"model": name, "training": {"global_batch": 64}, "cluster": {
            "num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
        spec = parse_spec(doc, catalog)
        assert spec.model.name == name and parse_spec(spec.to_dict(), catalog) == spec
    for section in ("gpu", "node", "fabric"):
        for name in catalog[section]:
            doc = {"model": "Llama 3 8B", "training": {"global_batch": 64},
                   "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                               "fabric": "NDR InfiniBand fat tree", section: name}}
            try:
                spec = parse_spec(doc, catalog)
            except SpecError:
                continue  # a row that does not fit 64 GPUs (a 72-GPU rack, a 4-GPU node and its NICs...)
            again = parse_spec(spec.to_dict(), catalog)
            assert again == spec and getattr(again.cluster, section).name == name


def test_a_modified_name_goes_when_the_values_are_the_rows_again(catalog):
    doc = {"model": dict(catalog["model"]["Llama 3 8B"], name="Llama 3 8B (modified)"),
           "training": {"global_batch": 64},
           "cluster": {"num_gpus": 64, "gpu": dict(catalog["gpu"]["H100 SXM5 80GB"], name="H100 SXM5 80GB (modified)"),
                       "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
    spec = parse_spec(doc, catalog)
    assert (spec.model.name, spec.cluster.gpu.name) == ("Llama 3 8B", "H100 SXM5 80GB")
    doc["cluster"]["gpu"]["memory_gib"] = 64
    assert parse_spec(doc, catalog).cluster.gpu.name == "H100 SXM5 80GB (modified)"  # not "(modified) (modified)"


def test_inline_hardware_inherits_catalog_fields_by_name(gpt3_doc, catalog):
    # The shared example names "A100 SXM4 80GB" inline without sm_count: the catalog entry supplies 108.
    assert parse_spec(gpt3_doc, catalog).cluster.gpu.sm_count == 108
    assert parse_spec(gpt3_doc).cluster.gpu.sm_count == 132  # no catalog: the documented default


def test_catalog_names_resolve(gpt3_doc, catalog):
    gpt3_doc["cluster"].update(gpu="H100 SXM5 80GB", node="DGX H100", fabric="NDR InfiniBand fat tree")
    spec = parse_spec(gpt3_doc, catalog)
    assert spec.cluster.gpu.peak_tflops == 989
    assert spec.cluster.node.nic_gbits_per_s == 400
    assert spec.cluster.fabric.topology == "fat_tree"


def test_heads_must_divide_hidden(gpt3_doc):
    gpt3_doc["model"]["heads"] = 100
    assert errors_of(gpt3_doc) == {"model.heads": ["must divide model.hidden (12288)"]}


def test_kv_heads_must_divide_heads(gpt3_doc):
    gpt3_doc["model"]["kv_heads"] = 7
    assert errors_of(gpt3_doc) == {"model.kv_heads": ["must divide model.heads (96)"]}


def test_router_groups_must_tile_the_experts_and_leave_top_k_to_choose(gpt3_doc):
    gpt3_doc["model"]["router_groups"] = 8
    assert errors_of(gpt3_doc) == {"model.router_groups": ["router groups need an MoE model (experts > 1)"]}
    gpt3_doc["model"].update(experts=64, top_k=8, router_groups=1)
    spec = parse_spec(gpt3_doc)
    assert (spec.model.router_groups, spec.model.router_group_top_k) == (1, 1)  # no groups: one, all of it
    gpt3_doc["model"]["router_groups"] = 8
    assert parse_spec(gpt3_doc).model.router_group_top_k == 8  # default: every group
    gpt3_doc["model"]["router_groups"] = 6
    assert errors_of(gpt3_doc) == {"model.router_groups": ["must divide model.experts (64)"]}
    gpt3_doc["model"].update(router_groups=8, router_group_top_k=9)
    assert errors_of(gpt3_doc) == {"model.router_group_top_k": ["must be at most model.router_groups (8)"]}
    gpt3_doc["model"]["router_group_top_k"] = 1  # one group of 8 experts holds top-8, not top-9
    assert parse_spec(gpt3_doc).model.router_group_top_k == 1
    gpt3_doc["model"].update(top_k=9, router_group_top_k=1)
    assert errors_of(gpt3_doc) == {"model.router_group_top_k": [
        "leaves 8 experts to choose from, fewer than model.top_k (9)"]}


def test_gpu_count_must_fill_nodes(gpt3_doc):
    gpt3_doc["cluster"]["num_gpus"] = 1020
    assert "cluster.num_gpus" in errors_of(gpt3_doc)
    assert "multiple of node.gpus (8)" in errors_of(gpt3_doc)["cluster.num_gpus"][0]


def test_part_of_one_node_is_allowed(gpt3_doc):
    gpt3_doc["cluster"]["num_gpus"] = 4
    assert parse_spec(gpt3_doc).cluster.num_gpus == 4


@pytest.mark.parametrize("section, key, value, expected", [
    ("model", "layers", 0, "must be at least 1 (got 0)"),
    ("model", "layers", 1e9, "must be at most 2048"),
    ("model", "seq_len", 10**9, "must be at most"),
    ("model", "hidden", "wide", "must be a number, not 'wide'"),
    ("model", "hidden", 1.5, "must be a whole number (got 1.5)"),
    ("model", "hidden", True, "must be a number, not true"),
    ("model", "gated_mlp", "yes", "must be true or false"),
    ("model", "vocab", None, "is required"),
    ("training", "precision", "fp4", "must be one of bf16, fp16, fp8"),
    ("training", "global_batch", -1, "must be at least 1"),
    ("training", "global_batch", float("nan"), "must be a number, not NaN"),
    ("training", "global_batch", float("inf"), "must be a number, not Infinity"),
    ("training", "global_batch", float("-inf"), "must be a number, not -Infinity"),
    ("cluster", "num_gpus", 512.0000000000001, "must be a whole number (got 512.0000000000001)"),  # not "(got 512)"
    # JSON integers may have any number of digits: bounded, not an overflow.
    ("training", "global_batch", 10**400, "must be at most 16777216"),
    ("training", "global_batch", -(10**400), "must be at least 1"),
    ("training", "global_batch", "1e400", "must be at most 16777216"),
    ("model", "seq_len", 16777217, "must be at most 16777216 tokens (got 16777217)"),
    ("model", "seq_len", 0, "must be at least 1 token (got 0)"),  # one of a count noun: singular
    ("training", "global_batch", 0, "must be at least 1 sequence (got 0)"),
    ("training", "tokens", 0, "must be at least 1 token (got 0)"),  # taken, then asked for again on the page
    ("training", "global_batch", -(10**400), "must be at least 1 sequence"),
    ("model", "hidden", [], "must be a number, not a list"),
    # Numbers written as people write them are refused (no guess between a thousands and a decimal comma) with how
    # to write them; a whole-number field has only the thousands reading.
    ("model", "hidden", "8,192", "must be a number, not '8,192': write 8192 without thousands separators"),
    ("training", "tokens", "1,500", "write 1500 without thousands separators, or 1.500 with a point"),
    ("training", "tokens", "1,5e12", "must be a number, not '1,5e12'"),
    ("model", "layers", "1,2", "must be a number, not '1,2'"),
    ("training", "tokens", "2,5", "must be a number, not '2,5': write decimals with a point (2.5)"),
    ("model", "name", {}, "must be a string, not an object"),
    ("model", "name", "model \u202e evil", "must not contain bidirectional control characters"),
    ("model", "name", "a\u2066b", "must not contain bidirectional control characters"),
    # JSON's \\u escapes can spell a lone UTF-16 surrogate, which no UTF-8 page or database can hold.
    ("model", "name", "\ud800", "must be valid Unicode text (it holds a lone UTF-16 surrogate"),
    ("model", "name", "GPT \udfff", "must be valid Unicode text"),
])
def test_field_errors_name_the_field(gpt3_doc, section, key, value, expected):
    gpt3_doc[section][key] = value
    errs = errors_of(gpt3_doc)
    assert expected in errs[f"{section}.{key}"][0]


@pytest.mark.parametrize("layout", [[], 0, False, "", [1], "x"])
def test_a_layout_that_is_not_an_object_is_named_even_when_falsy(gpt3_doc, layout):
    gpt3_doc["layout"] = layout  # [] and 0 were read as no layout at all
    assert "must be an object" in errors_of(gpt3_doc)["layout"][0]


def test_virtual_stages_pinned_with_pp_1_are_a_spec_error(gpt3_doc):
    gpt3_doc["layout"] = {"pp": 1, "vpp": 4}  # was accepted, then answered with no plan (vpp_invalid)
    assert errors_of(gpt3_doc) == {"layout.vpp": ["virtual pipeline stages need layout.pp > 1 (it is pinned to 1)"]}
    gpt3_doc["layout"] = {"vpp": 4}  # PP left to the search: its PP 1 candidates are rejected there, as before
    assert parse_spec(gpt3_doc).layout.vpp == 4


@pytest.mark.parametrize("blank", ["   ", "\u200b", "\u200b \u2060\t", "\u3000"])
def test_a_blank_or_invisible_name_is_the_sections_default(gpt3_doc, blank):
    gpt3_doc["model"]["name"] = blank  # an empty page heading otherwise (a zero-width space passed strip())
    assert parse_spec(gpt3_doc).model.name == "custom model"


def test_too_many_experts_per_token_is_said_once_on_top_k(gpt3_doc):
    gpt3_doc["model"].update(experts=8, top_k=9)  # not again on router_group_top_k, which nobody set
    assert errors_of(gpt3_doc) == {"model.top_k": ["must be at most model.experts (8)"]}


def test_missing_sections_are_required():
    errs = errors_of({"training": {"global_batch": 8}})
    assert errs["model"] == ["is required"] and errs["cluster"] == ["is required"]


@pytest.mark.parametrize("field", ["gpu", "node", "fabric"])
def test_a_catalog_name_that_is_not_text_is_refused_before_any_lookup(gpt3_doc, field):
    class Refusing(dict):  # a database cannot be queried for a lone surrogate: the lookup must not happen
        def get(self, name, default=None):
            raise AssertionError(f"looked up {name!r}")
        __contains__ = get
    gpt3_doc["cluster"][field] = "H100\ud800"
    assert errors_of(gpt3_doc, {"gpu": Refusing(), "node": Refusing(), "fabric": Refusing()}) == {
        f"cluster.{field}": ["must be valid Unicode text (it holds a lone UTF-16 surrogate, such as \\ud800)"]}
    gpt3_doc["cluster"][field] = {"name": "H100\udfff"}  # an inline entry's name: refused with its other fields
    errs = errors_of(gpt3_doc, {"gpu": Refusing(), "node": Refusing(), "fabric": Refusing()})
    assert errs[f"cluster.{field}.name"] == ["must be valid Unicode text (it holds a lone UTF-16 surrogate, such as "
                                             "\\ud800)"]


def test_a_node_of_several_nvlink_domains_needs_a_nic_to_join_them(gpt3_doc):
    # The model has no PCIe path between domains: GPUs of one node in two domains meet through its NICs.
    gpt3_doc["cluster"].update(num_gpus=8, node={"name": "two domains, no NICs", "gpus": 8, "nvlink_domain_gpus": 4,
                                                  "nvlink_gbytes_per_s": 900, "nics": 0, "nic_gbits_per_s": 400})
    assert errors_of(gpt3_doc)["cluster.node.nics"] == [
        "must be at least 1 when a node holds more than one NVLink domain (node.gpus 8, nvlink_domain_gpus 4)"]
    gpt3_doc["cluster"]["num_gpus"] = 4  # half the node: one domain, nothing to join
    assert parse_spec(gpt3_doc).cluster.node.nics == 0


def test_absurd_sizes_are_bounded(gpt3_doc):
    gpt3_doc["cluster"]["num_gpus"] = MAX_GPUS * 8
    assert "must be at most" in errors_of(gpt3_doc)["cluster.num_gpus"][0]


def test_unknown_fields_are_rejected(gpt3_doc):
    gpt3_doc["model"]["hiden"] = 5
    gpt3_doc["extra"] = {}
    errs = errors_of(gpt3_doc)
    assert errs["model.hiden"][0].startswith("unknown field (known:")
    assert errs["extra"] == ["unknown section (known: model, training, cluster, layout)"]


def test_every_problem_is_reported_at_once(gpt3_doc):
    gpt3_doc["model"]["layers"] = 0
    gpt3_doc["training"]["precision"] = "int4"
    gpt3_doc["cluster"]["gpu"]["memory_gib"] = -3
    assert set(errors_of(gpt3_doc)) == {"model.layers", "training.precision", "cluster.gpu.memory_gib"}


@pytest.mark.parametrize("doc, field", [
    ([], "spec"), ("text", "spec"), (None, "spec"), ({}, "model"),
    ({"model": [], "training": {}, "cluster": {}}, "model"),
])
def test_wrong_shapes_are_field_errors(doc, field):
    assert field in errors_of(doc)


def test_unknown_catalog_name(gpt3_doc, catalog):
    gpt3_doc["cluster"]["gpu"] = "Z9000"
    msg = errors_of(gpt3_doc, catalog)["cluster.gpu"][0]
    assert msg.startswith("unknown catalog name 'Z9000' (known: A100 SXM4 40GB")


@pytest.mark.parametrize("value, kind", [(5, "a number"), ([1], "a list"), (True, "true")])
def test_a_model_or_hardware_that_is_neither_a_name_nor_an_object_is_told_both_forms(gpt3_doc, catalog, value, kind):
    # "must be an object, not a number" hid that a catalog name is taken too.
    gpt3_doc["model"], gpt3_doc["cluster"]["node"] = value, value
    errors = errors_of(gpt3_doc, catalog)
    assert errors["model"] == [f"must be a model preset's name or an object, not {kind}"]
    assert errors["cluster.node"] == [f"must be a catalog name or an object, not {kind}"]


def test_the_model_may_be_a_preset_name(gpt3_doc, catalog):
    """A name is the preset's fields, so it plans exactly as the inline object does; an unknown one says which
    presets there are."""
    gpt3_doc["model"] = dict(catalog["model"]["Llama 3 70B"])
    inline = parse_spec(gpt3_doc, catalog)
    gpt3_doc["model"] = " Llama 3 70B "
    named = parse_spec(gpt3_doc, catalog)
    assert named == inline
    assert (named.model.layers, named.model.hidden, named.model.kv_heads, named.model.vocab) == (80, 8192, 8, 128256)
    gpt3_doc["model"] = "Llama 4"
    msg = errors_of(gpt3_doc, catalog)["model"][0]
    assert msg.startswith("unknown catalog name 'Llama 4' (known: DeepSeek-V3 671B")
    assert "Llama 3 70B" in msg


def test_offloading_leaves_at_least_one_layer_on_the_gpu(gpt3_doc):
    gpt3_doc["training"]["activation_offload_layers"] = 96
    assert errors_of(gpt3_doc) == {"training.activation_offload_layers": ["must be less than model.layers (96)"]}
    gpt3_doc["training"]["activation_offload_layers"] = 95
    assert parse_spec(gpt3_doc).training.activation_offload_layers == 95


def test_fp8_needs_fp8_tensor_cores(gpt3_doc, catalog):
    gpt3_doc["training"]["precision"] = "fp8"
    assert "has none" in errors_of(gpt3_doc, catalog)["training.precision"][0]   # A100: fp8_tflops 0
    gpt3_doc["cluster"]["gpu"] = {"name": "my H100", "peak_tflops": 989, "memory_gib": 80, "memory_gbytes_per_s": 3350}
    assert parse_spec(gpt3_doc).cluster.gpu.fp8_peak_tflops == 1978  # unset: twice the BF16 peak


def test_pins_that_contradict_the_gpu_count(gpt3_doc):
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 16, "cp": 1}
    assert errors_of(gpt3_doc) == {"layout.dp": ["tp·cp·pp·dp = 2048 must equal cluster.num_gpus (1024)"]}
    gpt3_doc["layout"] = {"tp": 3}
    assert "must divide cluster.num_gpus (1024)" in errors_of(gpt3_doc)["layout.tp"][0]


def test_pinned_dp_must_divide_the_batch(gpt3_doc):
    gpt3_doc["layout"] = {"dp": 1024}
    assert errors_of(gpt3_doc)["layout.dp"] == ["must divide training.global_batch (1536)"]


def test_pinned_ep_needs_experts_enough(gpt3_doc):
    gpt3_doc["layout"] = {"ep": 2}
    assert errors_of(gpt3_doc) == {"layout.ep": [
        "needs a mixture-of-experts model: model.experts is 1 (a dense model runs EP 1)"]}
    gpt3_doc["model"].update(experts=8, top_k=2)
    gpt3_doc["layout"] = {"ep": 16}
    assert errors_of(gpt3_doc)["layout.ep"] == ["must be at most model.experts (8)"]
    # Each EP rank holds whole experts: EP 3 was searched over tens of thousands of layouts, all rejected for it.
    gpt3_doc["layout"] = {"ep": 3}
    assert errors_of(gpt3_doc)["layout.ep"] == ["must divide model.experts (8)"]
    gpt3_doc["layout"] = {"ep": 4}
    assert parse_spec(gpt3_doc).layout.ep == 4


def test_form_style_strings_are_accepted(gpt3_doc):
    gpt3_doc["model"]["layers"] = "96"
    gpt3_doc["model"]["gated_mlp"] = "false"
    gpt3_doc["layout"] = {"tp": "", "recompute": "full"}
    spec = parse_spec(gpt3_doc)
    assert spec.model.layers == 96 and spec.layout.pinned() == {"recompute": "full"}


def test_control_characters_are_refused(gpt3_doc):
    gpt3_doc["model"]["name"] = "GPT\x00-3"
    assert errors_of(gpt3_doc) == {"model.name": ["must not contain control characters"]}


def test_independent_sections_report_in_one_pass(gpt3_doc):
    gpt3_doc["model"]["heads"] = 100                 # a cross-field rule in a valid section...
    gpt3_doc["training"]["global_batch"] = "many"    # ...still reported beside a type error elsewhere
    assert set(errors_of(gpt3_doc)) == {"model.heads", "training.global_batch"}


def test_every_field_has_help_text():
    from planner.spec import SECTIONS
    assert all(f.help for fields in SECTIONS.values() for f in fields)


@pytest.mark.parametrize("typed", ["1_000", "inf", "Infinity", "nan", "\uff11\uff12\uff18", "0x10", "1,000"])
def test_only_plain_decimal_text_is_a_number(gpt3_doc, typed):
    # float() reads "1_000", "inf" and full-width digits; a person typing a GPU count means none of them.
    gpt3_doc["cluster"]["num_gpus"] = typed
    with pytest.raises(SpecError, match=r"cluster\.num_gpus: must be"):
        parse_spec(gpt3_doc)
    gpt3_doc["cluster"]["num_gpus"] = " 1.024e3 "  # scientific notation and spaces around are fine
    assert parse_spec(gpt3_doc).cluster.num_gpus == 1024


def test_an_inline_model_under_a_presets_name_says_it_takes_nothing_from_it(catalog):
    # {"name": "Llama 3 70B", "layers": 40} is the shape of a GPU with one change; for a model it is a model of its
    # own (an inline model inherits nothing), which four bare "is required" messages did not explain.
    doc = {"model": {"name": "Llama 3 70B", "layers": 40}, "training": {"global_batch": 256},
           "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                       "fabric": "NDR InfiniBand fat tree"}}
    with pytest.raises(SpecError) as err:
        parse_spec(doc, catalog)
    errors = err.value.as_dict()
    assert errors["model"] == ["an inline model takes nothing from the preset 'Llama 3 70B' of its name: give hidden, "
                               'heads, vocab, seq_len too, or name the preset ("model": "Llama 3 70B")']
    assert errors["model.hidden"] == ["is required"]


def test_bf16_on_a_gpu_without_bf16_tensor_cores_is_refused(catalog, gpt3_doc):
    # It was planned at the FP16 peak under the name bf16 (71% MFU on V100s), and the export said --bf16.
    gpt3_doc["cluster"] = {"num_gpus": 64, "gpu": "V100 SXM3 32GB", "node": "DGX-2 (V100)",
                           "fabric": "EDR InfiniBand fat tree"}
    with pytest.raises(SpecError) as err:
        parse_spec(gpt3_doc, catalog)
    assert err.value.as_dict() == {"training.precision": [
        "bf16 needs a GPU with BF16 tensor cores, and 'V100 SXM3 32GB' has none (cluster.gpu.bf16 is no): train in "
        "fp16"]}
    gpt3_doc["training"]["precision"] = "fp16"
    assert parse_spec(gpt3_doc, catalog).cluster.gpu.bf16 is False
    gpt3_doc["cluster"]["gpu"] = "A100 SXM4 80GB"  # empty: yes
    gpt3_doc["training"]["precision"] = "bf16"
    assert parse_spec(gpt3_doc, catalog).cluster.gpu.bf16 is None
