"""The plan form: built from the engine's field tables, validated by the engine, messages next to fields."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from planner.spec import REQUIRED, SECTIONS, parse_spec
from webui import services
from webui.forms import CUSTOM, EXAMPLE, PREFIX, TRAINING_GROUPS, PlanForm, initial_for
from webui.models import Plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(seeded):
    return services.catalog_as_dict()


def post_data(catalog, **changes: Any) -> dict[str, Any]:
    """What a browser posts for the default form, with `changes` typed in."""
    data = {k: v for k, v in initial_for(catalog).items() if v is not False and v is not None}
    data = {k: ("on" if v is True else v) for k, v in data.items()}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_the_form_stays_well_within_the_field_bound(catalog, settings):
    # A page that says "more than 200 form fields (the plan form has about 100)" must stay true as fields are added.
    assert 80 <= len(PlanForm(catalog=catalog).fields) + 1 <= 120 < settings.DATA_UPLOAD_MAX_NUMBER_FIELDS


def test_the_defaults_are_llama3_70b_on_512_h100s(catalog):
    form = PlanForm(post_data(catalog), catalog=catalog)
    assert form.is_valid(), form.errors
    spec = form.spec
    assert (spec.model.name, spec.model.layers, spec.cluster.num_gpus) == ("Llama 3 70B", 80, 512)
    assert (spec.cluster.gpu.name, spec.cluster.node.name) == ("H100 SXM5 80GB", "DGX H100")
    assert spec.cluster.fabric.name == "NDR InfiniBand fat tree"
    assert spec.training.tokens is None  # the engine's default: no time to train unless asked
    assert spec.layout.pinned() == {}


def test_every_field_has_a_label_and_help_and_numbers_carry_units(catalog):
    form = PlanForm(catalog=catalog)
    assert all(f.help_text for f in form.fields.values())
    assert form.fields["gpu__memory_gib"].label == "Memory (GiB)"
    assert form.fields["node__nic_gbits_per_s"].label == "NIC speed (Gb/s)"
    assert form.fields["model__seq_len"].label == "Sequence length (tokens)"
    assert form.fields["gpu__cudnn_attention_efficiency"].label == "cuDNN attention efficiency"
    assert form.fields["node__host_gbytes_per_s"].label == "Host link bandwidth (GB/s)"
    # No label is a field name cut at its unit ("Host gbytes per (GB/s)"): the unit words are spelled out.
    assert not [f.label for f in form.fields.values() if re.search(r"gbytes|gbits|\bper \(", str(f.label))]
    assert form.fields["model__layers"].widget.attrs["title"] == "a whole number from 1 to 2048"
    assert form.fields["num_gpus"].widget.attrs["title"] == "a whole number from 1 to 1048576"
    assert form.fields["model__layers"].widget.input_type == "text"  # the engine reads what was typed (below)
    # Bounds exactly as the engine's tables give them: %g had written 16777216 as 1.67772e+07, below the bound.
    assert form.fields["model__seq_len"].widget.attrs["title"].endswith(" to 16777216")
    assert form.fields["training__global_batch"].widget.attrs["title"].endswith(" to 16777216")
    assert form.fields["training__tokens"].widget.attrs["inputmode"] == "decimal"  # 15e12 needs the "e"


def test_the_training_options_show_under_headings_each_once(client, catalog):
    names = [n for _, group in TRAINING_GROUPS for n in group]
    assert sorted(names) == sorted(f.name for f in SECTIONS["training"])  # every option in exactly one group
    page = client.get("/").content.decode()
    training = page[page.index('id="fs-training"'):page.index('id="fs-cluster"')]
    headings = re.findall(r'<h3 class="subhead">([^<]+)</h3>', training)
    assert headings == ["Batch and precision", "Training stack", "Communication overlap", "FP8", "Sharding, memory and recomputation",
                        "Context and expert parallelism", "Kernels"]
    shown = re.findall(r'data-field="training__(\w+)"', training)
    assert sorted(shown) == sorted(names)
    # Under its own heading: the FP8 recipe after "FP8", before the next heading.
    fp8 = training[training.index(">FP8<"):training.index(">Sharding, memory")]
    assert 'data-field="training__fp8_recipe"' in fp8 and 'data-field="training__tp_comm_overlap"' not in fp8


def test_a_training_option_no_group_names_still_shows(catalog, monkeypatch):
    monkeypatch.setattr("webui.forms.TRAINING_GROUPS", TRAINING_GROUPS[:-1])  # "Kernels" forgotten
    groups = PlanForm(catalog=catalog)._training_groups()
    assert [f.name for f in groups[-1]["fields"]][-4:] == [
        "training__projections", "training__cross_entropy", "training__elementwise", "training__attention"]
    assert sum(len(g["fields"]) for g in groups) == len(SECTIONS["training"])


def test_a_preset_is_used_as_it_is_whatever_the_fields_say(catalog):
    form = PlanForm(post_data(catalog, model_preset="GPT-3 175B", model__layers="3"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert (form.spec.model.name, form.spec.model.layers) == ("GPT-3 175B", 96)


def test_custom_architecture_uses_the_typed_fields(catalog):
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__name="Mine", model__layers="40"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert (form.spec.model.name, form.spec.model.layers, form.spec.model.hidden) == ("Mine", 40, 8192)


def test_custom_hardware_uses_the_typed_fields(catalog):
    form = PlanForm(post_data(catalog, gpu=CUSTOM, gpu__name="Next GPU", gpu__memory_gib="120"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert (form.spec.cluster.gpu.name, form.spec.cluster.gpu.memory_gib) == ("Next GPU", 120)


def test_a_changed_catalog_row_is_not_named_as_the_row(catalog):
    """Switching to custom keeps the row's fields, its name too: a 7-GPU node left named "DGX H100", or an edited
    Llama 3 70B, must not be labelled as the catalog entry on a shared plan page."""
    form = PlanForm(post_data(catalog, node=CUSTOM, node__gpus="7", node__nvlink_domain_gpus="7", num_gpus="7",
                              model_preset=CUSTOM, model__layers="40"), catalog=catalog)
    assert form.is_valid(), form.errors
    node = form.spec.cluster.node
    assert (node.name, node.gpus, node.nics) == ("DGX H100 (modified)", 7, catalog["node"]["DGX H100"]["nics"])
    assert (form.spec.model.name, form.spec.model.layers) == ("Llama 3 70B (modified)", 40)
    # Custom, but with the row's values: still that row.
    form = PlanForm(post_data(catalog, node=CUSTOM, model_preset=CUSTOM), catalog=catalog)
    assert form.is_valid(), form.errors
    assert (form.spec.cluster.node.name, form.spec.model.name) == ("DGX H100", "Llama 3 70B")


def test_engine_messages_land_next_to_their_fields(catalog):
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__heads="60", num_gpus="100",
                              gpu=CUSTOM, gpu__memory_gib="-3"), catalog=catalog)
    assert not form.is_valid()
    assert form.errors["gpu__memory_gib"] == ["must be at least 0.001 GiB (got -3)"]
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__heads="60", num_gpus="100"), catalog=catalog)
    assert not form.is_valid()
    assert form.errors["model__heads"] == ["must divide model.hidden (8192)"]
    assert form.errors["num_gpus"][0].startswith("must be a positive multiple of node.gpus (8)")


@pytest.mark.parametrize("field,value,message", [
    ("num_gpus", "", "is required"),
    ("num_gpus", "many", "must be a number, not 'many'"),
    ("num_gpus", "12.5", "must be a whole number (got 12.5)"),
    # Numbers as the pages write them ("12,000,000 USD"): said how to write them, not just refused
    ("num_gpus", "1,024", "must be a number, not '1,024': write 1024 without thousands separators"),
    ("training__tokens", "15,000,000,000,000",
     "must be a number, not '15,000,000,000,000': write 15000000000000 without thousands separators"),
    ("training__global_batch", "0", "must be at least 1 sequence (got 0)"),
    ("training__tokens", "1e30", "must be at most 1e+16 tokens (got 1e+30)"),
    ("layout__tp", "3", "tp = 3 must divide cluster.num_gpus (512)"),
    ("layout__dp", "7", "must divide training.global_batch (512)"),
])
def test_bad_values_get_the_field_named_rule(catalog, field, value, message):
    form = PlanForm(post_data(catalog, **{field: value}), catalog=catalog)
    assert not form.is_valid()
    assert any(message in e for e in form.errors[field]), form.errors


def test_a_blank_model_field_under_a_presets_name_is_said_beside_the_field_alone(catalog):
    # The API's "an inline model takes nothing from the preset 'Llama 3 70B' of its name: ... or name the preset
    # ("model": "Llama 3 70B")" stood at the top of the form, in JSON words, repeating "is required".
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__layers=""), catalog=catalog)
    assert not form.is_valid()
    assert form.errors == {"model__layers": ["is required"]}


def test_fp8_on_a_gpu_without_it_is_explained_on_the_precision_field(catalog):
    form = PlanForm(post_data(catalog, gpu="A100 SXM4 80GB", training__precision="fp8"), catalog=catalog)
    assert not form.is_valid()
    assert "fp8 needs a GPU with FP8 tensor cores" in form.errors["training__precision"][0]


def test_a_choice_not_offered_is_an_error_not_a_crash(catalog):
    form = PlanForm(post_data(catalog, gpu="Imaginary 9000", layout__recompute="sometimes"), catalog=catalog)
    assert not form.is_valid()
    assert "gpu" in form.errors and "layout__recompute" in form.errors


def test_layout_pins_reach_the_spec(catalog):
    form = PlanForm(post_data(catalog, layout__tp="8", layout__pp="4", layout__recompute="full",
                              layout__sequence_parallel="true", layout__zero="1"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert form.spec.layout.pinned() == {"tp": 8, "pp": 4, "recompute": "full", "sequence_parallel": True, "zero": 1}


def test_a_saved_spec_fills_the_form_again(catalog):
    form = PlanForm(post_data(catalog, model_preset="Mixtral 8x7B", gpu=CUSTOM, gpu__memory_gib="100",
                              layout__tp="8"), catalog=catalog)
    assert form.is_valid(), form.errors
    initial = initial_for(catalog, form.spec.to_dict())
    assert (initial["model_preset"], initial["gpu"], initial["node"]) == ("Mixtral 8x7B", CUSTOM, "DGX H100")
    assert (initial["gpu__memory_gib"], initial["layout__tp"]) == (100, 8)
    again = PlanForm(post_data(catalog, **initial), catalog=catalog)
    assert again.is_valid(), again.errors
    assert again.spec.to_dict() == form.spec.to_dict()


# ---------------------------------------------------------------------------------------------------------
# One source of defaults: the engine's field tables (planner/spec.py)


class BrowserForm(HTMLParser):
    """What a browser without JavaScript submits for a page's form left untouched: text and number inputs with
    their values, checked checkboxes as "on", each select's selected option (else its first)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self.select: str | None = None
        self.first_option: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name:
            if a.get("type") != "checkbox":
                self.data[name] = a.get("value") or ""
            elif "checked" in a:
                self.data[name] = a.get("value") or "on"
        elif tag == "select":
            self.select, self.first_option = name, None
        elif tag == "option" and self.select:
            if self.first_option is None:
                self.first_option = a.get("value") or ""
            if "selected" in a:
                self.data[self.select] = a.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self.select:
            self.data.setdefault(self.select, self.first_option or "")
            self.select = None


def untouched_form(client) -> dict[str, str]:
    page = BrowserForm()
    page.feed(client.get("/").content.decode())
    return page.data


def test_every_form_field_starts_at_the_engines_default(catalog):
    form = PlanForm(catalog=catalog)
    for section, prefix in PREFIX.items():
        for f in SECTIONS[section]:
            default = None if f.default is REQUIRED else f.default
            assert form.fields[f"{prefix}__{f.name}"].initial == default, f"{section}.{f.name}"
    assert form.fields["training__overlap_grad_reduce"].initial is True  # the field #7 found at false


def test_an_untouched_form_asks_for_exactly_the_engines_defaults(client, catalog):
    data = untouched_form(client)
    assert data["training__overlap_grad_reduce"] == "on"  # checked, as the engine defaults it
    response = client.post("/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    spec = Plan.objects.get().spec
    for f in SECTIONS["training"]:
        expected = EXAMPLE["training__global_batch"] if f.default is REQUIRED else f.default
        assert spec["training"][f.name] == expected, f"training.{f.name}"
    assert spec["layout"] == {f.name: f.default for f in SECTIONS["layout"]}  # every pin left to the search
    # The catalog rows the example names, each as the engine reads it (its own defaults for what a row omits).
    api = services.spec_parse(data={"model": catalog["model"][EXAMPLE["model_preset"]],
                                    "training": {"global_batch": EXAMPLE["training__global_batch"]},
                                    "cluster": {k: EXAMPLE[k] for k in ("num_gpus", "gpu", "node", "fabric")}})
    assert spec == api.to_dict()


@pytest.mark.parametrize("preset", ["GPT-3 175B", "Mixtral 8x7B", "DeepSeek-V3 671B (MLA approximated as MHA)"])
def test_a_preset_with_the_forms_defaults_is_the_same_request_as_through_the_api(client, catalog, preset):
    data = untouched_form(client) | {"model_preset": preset, "num_gpus": "2048", "training__global_batch": "1024",
                                      "gpu": "H800 SXM5 80GB", "node": "HGX H800"}
    assert client.post("/", data).status_code == 302
    from_form = Plan.objects.get()
    document = {"model": catalog["model"][preset], "training": {"global_batch": 1024},
                "cluster": {"num_gpus": 2048, "gpu": "H800 SXM5 80GB", "node": "HGX H800",
                            "fabric": EXAMPLE["fabric"]}}
    response = client.post("/api/plans", document, content_type="application/json")
    assert response.status_code == 201, response.json()
    from_api = Plan.objects.get(code=response.json()["code"])
    assert from_api.spec == from_form.spec and from_api.spec_hash == from_form.spec_hash  # the same plan


def test_a_message_inside_the_folded_moe_section_opens_it(client, catalog):
    # The banner says the messages are next to their fields; one inside a closed <details> could not be seen.
    page = client.get("/").content.decode()
    assert '<details class="more"><summary>Mixture of experts' in page  # folded while nothing is wrong
    data = untouched_form(client) | {"model_preset": CUSTOM, "model__experts": "8", "model__top_k": "9"}
    page = client.post("/", data).content.decode()
    assert '<details class="more" open><summary>Mixture of experts' in page
    assert "must be at most" in page.split('<details class="more" open>')[1].split("</details>")[0]
    assert not Plan.objects.exists()


def test_an_untouched_form_still_plans_when_the_admin_renamed_its_example_rows(client, catalog):
    # The form starts on the example's rows; renamed away, it once started on "custom" with empty fields and an
    # untouched submit answered "model__layers: is required".
    from webui.models import ModelPreset, NodeType

    ModelPreset.objects.filter(name="Llama 3 70B").update(name="Llama 3 70B (ours)")
    NodeType.objects.filter(name="DGX H100").update(name="DGX H100 (ours)")
    data = untouched_form(client)
    first_preset = min(services.catalog_as_dict()["model"])
    assert (data["model_preset"], data["node"]) == (first_preset, "8x GPU PCIe 5.0 server (no NVLink)")  # by name
    assert client.post("/", data).status_code == 302
    assert Plan.objects.get().spec["model"]["name"] == first_preset


def test_a_copy_submitted_unchanged_is_the_same_request(client, catalog):
    # The README's example names its inline model "GPT-3 175B", like the preset, with other values (untied
    # embeddings): the engine names it "GPT-3 175B (modified)", and the copy, unchanged, is the same request.
    import json

    from .conftest import ROOT

    doc = json.loads((ROOT / "examples" / "gpt3-175b-a100-1024.json").read_text())
    response = client.post("/api/plans", doc, content_type="application/json")
    original = Plan.objects.get(code=response.json()["code"])
    assert original.spec["model"]["name"] == "GPT-3 175B (modified)"
    page = BrowserForm()
    page.feed(client.get(f"/?from={original.code}").content.decode())
    assert page.data["model_preset"] == CUSTOM
    assert client.post("/", page.data).status_code == 302
    copy = Plan.objects.exclude(pk=original.pk).get()
    assert copy.spec == original.spec


def test_a_custom_gpt_style_model_gets_the_engines_dropout_as_the_api_does(client, catalog):
    # The form starts a custom model from Llama 3 70B (no dropout); a checkbox left unticked posted an explicit
    # "no" for a GPT-style model the API and the CLI train with dropout (the engine's default for it).
    page = BrowserForm()
    page.feed(client.get("/").content.decode())
    assert page.data["model__dropout"] == ""  # "default"
    typed = {"name": "MyGPT 13B", "layers": 40, "hidden": 5120, "heads": 40, "vocab": 50257, "seq_len": 2048}
    data = page.data | {"model_preset": CUSTOM, "model__kv_heads": "", "model__ffn_hidden": ""}
    data |= {f"model__{k}": str(v) for k, v in typed.items()}
    data.pop("model__gated_mlp")  # unticked
    form = PlanForm(data, catalog=catalog)
    assert form.is_valid(), form.errors
    assert form.spec.model == parse_spec({"model": typed, "training": {"global_batch": 1}, "cluster": {
        "num_gpus": 8, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}},
        catalog).model
    assert form.spec.model.dropout is True
    no = PlanForm(data | {"model__dropout": "false"}, catalog=catalog)
    assert no.is_valid() and no.spec.model.dropout is False
    assert initial_for(catalog, {"model": {"name": "x", "dropout": True}})["model__dropout"] == "true"


def test_an_inline_row_with_a_catalog_name_and_other_values_is_named_modified(client, catalog):
    # The API used to fill the row's other constants and keep its name: a 64 GiB "H100 SXM5 80GB" plan, and not
    # the same request as the form's "H100 SXM5 80GB (modified)" for the same values.
    doc = {"model": "Llama 3 70B", "training": {"global_batch": 512},
           "cluster": {"num_gpus": 512, "gpu": {"name": "H100 SXM5 80GB", "memory_gib": 64},
                       "node": {"name": "DGX H100", "nics": 8}, "fabric": "NDR InfiniBand fat tree"}}
    spec = parse_spec(doc, catalog)
    assert spec.cluster.gpu.name == "H100 SXM5 80GB (modified)" and spec.cluster.gpu.memory_gib == 64
    assert spec.cluster.gpu.gemm_efficiency == catalog["gpu"]["H100 SXM5 80GB"]["gemm_efficiency"]  # inherited
    assert spec.cluster.node.name == "DGX H100"  # the row's own values: its name
    form = PlanForm(post_data(catalog, gpu=CUSTOM, gpu__memory_gib="64"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert form.spec.cluster.gpu == spec.cluster.gpu
    model = dict(catalog["model"]["Llama 3 70B"], layers=40)
    assert parse_spec(doc | {"model": model}, catalog).model.name == "Llama 3 70B (modified)"
    assert parse_spec(doc | {"model": dict(catalog["model"]["Llama 3 70B"])}, catalog).model.name == "Llama 3 70B"


@pytest.mark.parametrize("url", ["/", "/sweeps/new/"])
def test_each_field_points_screen_readers_at_its_own_help_and_messages(client, catalog, url):
    bad = {"/": post_data(catalog, num_gpus="100", layout__tp="8,"), "/sweeps/new/": {"num_gpus": "x"}}[url]
    for page in (client.get(url).content.decode(), client.post(url, bad).content.decode()):
        described = [i for d in re.findall(r'aria-describedby="([^"]+)"', page) for i in d.split()]
        ids = set(re.findall(r'\bid="([^"]+)"', page))
        assert len(described) > 5 and not [d for d in described if d not in ids]
    summary = re.search(r'id="error-summary"(.*?)</div>', page, re.S).group(1)
    links = re.findall(r'href="#([^"]+)"', summary)
    assert links and not [link for link in links if link not in ids]  # each to its field
    if url == "/":
        assert links == ["id_num_gpus_field", "id_layout__tp_field"]


def test_a_catalog_row_deleted_while_the_form_was_open_is_said_so(catalog):
    form = PlanForm(post_data(catalog, gpu="H800 SXM5 80GB (gone)"), catalog=catalog)
    assert not form.is_valid()
    assert form.errors["gpu"] == ["“H800 SXM5 80GB (gone)” is no longer in the catalog (deleted or renamed since "
                                  "this page was opened): choose a row again, or “custom”"]
    # The dropdown still shows it, marked: unlisted, the browser showed the first row (an 8-GPU PCIe server) with
    # that row's values below, and posting the page again planned on it.
    rendered = str(form["gpu"])
    assert re.search(r'<option value="H800 SXM5 80GB \(gone\)" selected>H800 SXM5 80GB \(gone\) \(no longer in the '
                     r'catalog\)</option>', rendered), rendered
    assert rendered.count("selected") == 1
    assert not PlanForm(post_data(catalog, gpu="H800 SXM5 80GB (gone)"), catalog=catalog).is_valid()  # again


def test_a_preset_set_to_its_own_values_keeps_its_name(catalog):
    # The page's script named the model "Llama 3 70B (modified)" as soon as a field was touched, even when the
    # values ended as the preset's (Dropout "no", which a gated-MLP model has anyway): the API named it "Llama 3 70B".
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__dropout="false"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert form.spec.model.name == "Llama 3 70B"
    # An edited copy set back to the row's values: "(modified)" goes.
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__name="Llama 3 70B (modified)"), catalog=catalog)
    assert form.is_valid(), form.errors
    assert form.spec.model.name == "Llama 3 70B"
    form = PlanForm(post_data(catalog, model_preset=CUSTOM, model__layers="40"), catalog=catalog)
    assert form.is_valid() and form.spec.model.name == "Llama 3 70B (modified)"
