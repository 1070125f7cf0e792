"""Modelling options (training mechanisms, GPU constants): on the form with their defaults, and on the plan page
and in the API with their values, each marked set in the request or assumed."""
from __future__ import annotations

import html
import json
import re

import pytest

from planner import stacks
from webui import services
from webui.forms import CUSTOM, PlanForm, initial_for
from webui.models import Plan
from webui.options import option_fields

from .test_forms import post_data, untouched_form

pytestmark = pytest.mark.django_db

H100 = "H100 SXM5 80GB"
MECHANISMS = [(path, f) for path, f in option_fields() if path.startswith("training.")]
GPU_CONSTANTS = [(path, f) for path, f in option_fields() if path.startswith("cluster.gpu.")]


@pytest.fixture
def catalog(seeded):
    return services.catalog_as_dict()


def options_by_field(options: list[dict]) -> dict[str, dict]:
    return {o["field"]: o for o in options}


def page_rows(page: str) -> dict[str, dict[str, str]]:
    """{field: {"title", "value", "source", "class"}} from the plan page's options table."""
    rows = re.findall(r'<tr class="([^"]*)" data-field="([^"]+)">\s*<td><code title="([^"]*)">[^<]*</code></td>'
                      r'\s*<td>([^<]*)</td>\s*<td class="source">(.*?)</td>', page, re.S)
    return {field: {"class": cls, "title": html.unescape(title), "value": value.strip(),
                    "source": re.sub(r"<[^>]+>", "", source).strip()} for cls, field, title, value, source in rows}


def test_the_options_are_every_defaulted_training_and_gpu_field_of_the_engine():
    names = {path for path, _ in option_fields()}
    for name in ("tp_comm_overlap", "tp_wgrad_overlap", "ep_comm_overlap", "ep_dispatch", "ep_dispatch_dtype", "fp8_param_gather",
                 "fp8_recipe", "elementwise", "projections", "overlap_grad_reduce", "attention"):
        assert f"training.{name}" in names
    for name in ("gemm_efficiency", "fp8_gemm_efficiency", "sustained_clock", "attention_efficiency",
                 "hbm_efficiency", "kernel_overhead_us"):
        assert f"cluster.gpu.{name}" in names
    # Not options: what has no default (the batch), derives its value (tokens, fp8_tflops), or is a name.
    assert not names & {"training.global_batch", "training.tokens", "cluster.gpu.fp8_tflops", "cluster.gpu.name"}


def test_each_mechanism_option_is_on_the_form_with_its_engine_default_and_help(client, catalog):
    form = PlanForm(catalog=catalog)
    initial = initial_for(catalog)
    posted = untouched_form(client)
    for path, f in MECHANISMS:
        name = f"training__{f.name}"
        assert form.fields[name].initial == f.default, path
        assert initial[name] == f.default, path
        assert form.fields[name].help_text == f.help and f.help, path
        shown = posted.get(name)  # what the page holds: a checked box posts "on", an unchecked one nothing
        expected = ("on" if f.default else None) if f.kind is bool else str(f.default)
        assert shown == expected, (path, shown)
    assert form.fields["training__tp_comm_overlap"].label == "TP communication overlap"
    assert form.fields["training__tp_wgrad_overlap"].label == "TP gradient reductions beside weight-gradient GEMMs"
    assert form.fields["training__tp_wgrad_overlap"].initial is True  # Megatron's default: the box starts checked


def test_each_gpu_constant_starts_at_the_chosen_catalog_gpus_value_ready_to_edit(client, catalog):
    row = catalog["gpu"][H100]
    initial = initial_for(catalog)
    posted = untouched_form(client)
    form = PlanForm(catalog=catalog)
    for path, f in GPU_CONSTANTS:
        name = f"gpu__{f.name}"
        assert initial[name] == row[f.name], path
        assert float(posted[name]) == row[f.name], path  # on the page, for "custom GPU" to edit
        assert form.fields[name].help_text == f.help and f.help, path
    assert form.fields["gpu__kernel_overhead_us"].label == "Kernel overhead (µs)"
    edited = PlanForm(post_data(catalog, gpu=CUSTOM, gpu__name="Next GPU", gpu__gemm_efficiency="0.6"),
                      catalog=catalog)
    assert edited.is_valid(), edited.errors
    assert edited.spec.cluster.gpu.gemm_efficiency == 0.6
    assert edited.spec.cluster.gpu.attention_efficiency == row["attention_efficiency"]


def test_an_untouched_form_assumes_every_option_and_a_changed_one_is_set(client, catalog):
    assert client.post("/", untouched_form(client)).status_code == 302
    sources = Plan.objects.get().option_sources
    assert {p for p, s in sources.items() if s == "request"} == set()
    assert all(sources[p] == "default" for p, _ in MECHANISMS)
    assert all(sources[p] == "catalog" for p, _ in GPU_CONSTANTS)  # H100 from the catalog
    form = PlanForm(post_data(catalog, training__tp_comm_overlap="on", training__elementwise="eager",
                              gpu=CUSTOM, gpu__name="Next GPU", gpu__gemm_efficiency="0.6",
                              gpu__hbm_efficiency="0.85"), catalog=catalog)
    assert form.is_valid(), form.errors
    sources = form.option_sources
    assert sources["training.tp_comm_overlap"] == sources["training.elementwise"] == "request"
    assert sources["training.ep_dispatch"] == "default"
    assert sources["cluster.gpu.gemm_efficiency"] == "request"
    assert sources["cluster.gpu.hbm_efficiency"] == "default"  # 0.85 is what the engine assumes for a new GPU
    # The H100's measured value, kept for a GPU the catalog does not know: stated, not the engine's guess.
    assert sources["cluster.gpu.attention_efficiency"] == "request"


def test_the_plan_page_lists_each_option_with_its_value_and_marks_what_the_request_set(client, catalog, small_spec):
    small_spec["training"]["tp_comm_overlap"] = True
    small_spec["cluster"]["gpu"] = {"name": H100, "sustained_clock": 0.7}
    response = client.post("/api/plans", small_spec, content_type="application/json")
    assert response.status_code == 201, response.json()
    plan = Plan.objects.get(code=response.json()["code"])
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="options"' in page and "Modelling options" in page
    rows = page_rows(page)
    assert set(rows) == {path for path, _ in option_fields()}
    tp = rows["training.tp_comm_overlap"]
    assert (tp["value"], tp["source"], tp["class"]) == ("on", "set in the request", "set")
    assert tp["title"] == dict(MECHANISMS)["training.tp_comm_overlap"].help
    assert (rows["cluster.gpu.sustained_clock"]["value"], rows["cluster.gpu.sustained_clock"]["source"]) == (
        "0.7", "set in the request")
    elementwise = rows["training.elementwise"]
    assert (elementwise["value"], elementwise["source"], elementwise["class"]) == (
        "fused", "assumed: the engine's default", "assumed")
    gemm = rows["cluster.gpu.gemm_efficiency"]
    assert gemm["value"] == f"{catalog['gpu'][H100]['gemm_efficiency']:g}"
    # The request changed the GPU, so the plan names it "H100 SXM5 80GB (modified)"; the value is the row's.
    assert plan.spec["cluster"]["gpu"]["name"] == f"{H100} (modified)"
    assert gemm["source"] == f"assumed: the catalog's value for {H100}"
    assert rows["cluster.gpu.kernel_overhead_us"]["value"] == f"{catalog['gpu'][H100]['kernel_overhead_us']:g} µs"


def test_the_api_answer_carries_the_same_options(client, catalog, small_spec):
    small_spec["training"]["ep_dispatch"] = "dedup"
    code = client.post("/api/plans", small_spec, content_type="application/json").json()["code"]
    options = options_by_field(client.get(f"/api/plans/{code}").json()["options"])
    assert [o["field"] for o in client.get(f"/api/plans/{code}").json()["options"]] == [p for p, _ in option_fields()]
    assert options["training.ep_dispatch"] == {
        "field": "training.ep_dispatch", "value": "dedup", "unit": "", "source": "request", "assumed": False,
        "help": dict(MECHANISMS)["training.ep_dispatch"].help, "catalog_row": None}
    assert options["training.fp8_recipe"]["value"] == "tensorwise"
    assert (options["training.fp8_recipe"]["source"], options["training.fp8_recipe"]["assumed"]) == ("default", True)
    gemm = options["cluster.gpu.gemm_efficiency"]
    assert (gemm["value"], gemm["source"], gemm["assumed"]) == (catalog["gpu"][H100]["gemm_efficiency"], "catalog",
                                                                True)
    assert gemm["catalog_row"] == H100


def test_a_reused_answer_and_a_retry_keep_their_own_requests_say(client, catalog, small_spec):
    first = services.plan_create(spec=services.spec_parse(data=small_spec),
                                 sources=services.spec_option_sources(data=small_spec))
    Plan.objects.filter(pk=first.pk).update(status=Plan.Status.DONE, result={"plans": []})
    stated = {**small_spec, "training": {**small_spec["training"], "overlap_grad_reduce": True}}
    twin = services.plan_create(spec=services.spec_parse(data=stated), sources=services.spec_option_sources(data=stated))
    assert twin.reused_from == first  # the same spec: the engine's default stated is the same request
    assert first.option_sources["training.overlap_grad_reduce"] == "default"
    assert twin.option_sources["training.overlap_grad_reduce"] == "request"
    Plan.objects.filter(pk=twin.pk).update(status=Plan.Status.FAILED)
    twin.refresh_from_db()
    assert services.plan_retry(plan=twin).option_sources == twin.option_sources


def test_a_sweep_axis_on_an_option_counts_as_set_for_its_scenarios(client, catalog, small_spec):
    response = client.post("/api/sweeps", {"base": small_spec, "vary": {"training.tp_comm_overlap": [False, True]}},
                           content_type="application/json")
    assert response.status_code == 201, response.json()
    plans = Plan.objects.filter(sweep_scenarios__isnull=False)
    assert {p.spec["training"]["tp_comm_overlap"] for p in plans} == {False, True}
    assert {p.option_sources["training.tp_comm_overlap"] for p in plans} == {"request"}
    assert {p.option_sources["cluster.gpu.gemm_efficiency"] for p in plans} == {"catalog"}


def test_a_sweep_axis_on_a_catalog_rows_field_leaves_its_other_fields_the_catalogs(client, catalog, small_spec):
    # A scenario with cluster.gpu.memory_gib over the H100 row is the same request as the API's {"name": H100,
    # "memory_gib": 64}: same spec, and the same sources. The sweep copied the row in, so every other GPU field
    # read "set in the request".
    response = client.post("/api/sweeps", {"base": small_spec, "vary": {"cluster.gpu.memory_gib": [64]}},
                           content_type="application/json")
    assert response.status_code == 201, response.json()
    (scenario,) = Plan.objects.filter(sweep_scenarios__isnull=False)
    direct = {**small_spec, "cluster": {**small_spec["cluster"], "gpu": {"name": H100, "memory_gib": 64}}}
    code = client.post("/api/plans", direct, content_type="application/json").json()["code"]
    plan = Plan.objects.get(code=code)
    assert plan.spec == scenario.spec and plan.spec["cluster"]["gpu"]["name"] == f"{H100} (modified)"
    assert plan.option_sources == scenario.option_sources
    assert scenario.option_sources["cluster.gpu.gemm_efficiency"] == "catalog"


def test_a_plan_saved_before_options_were_recorded_still_renders(client, catalog, small_spec):
    spec = services.spec_parse(data=small_spec).to_dict()
    for name in ("tp_comm_overlap", "fp8_recipe"):  # an older engine's spec, without options added since
        del spec["training"][name]
    plan = Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec), status=Plan.Status.DONE,
                               result={"plans": [], "searched": 0, "feasible": 0, "rejected": {}})
    response = client.get(plan.get_absolute_url())
    assert response.status_code == 200
    rows = page_rows(response.content.decode())
    assert "training.tp_comm_overlap" not in rows and "training.fp8_recipe" not in rows
    assert rows["training.elementwise"]["source"] == "not recorded (planned before this was kept)"
    assert rows["training.elementwise"]["value"] == "fused"
    options = options_by_field(client.get(f"/api/plans/{plan.code}").json()["options"])
    assert (options["training.elementwise"]["source"], options["training.elementwise"]["assumed"]) == (None, None)
    broken = Plan.objects.create(spec={"model": {"name": "old"}, "training": None}, spec_hash="x" * 64,
                                 option_sources=["not", "a", "dict"])
    assert client.get(broken.get_absolute_url()).status_code == 200
    assert client.get(f"/api/plans/{broken.code}").json()["options"] == []



# ---------------------------------------------------------------------------------------------------------
# Training stacks (training.framework): a stack's settings are assumed like a catalog GPU's constants


def test_a_form_naming_a_stack_asks_for_what_the_api_does_and_marks_its_settings_assumed(client, catalog, small_spec):
    torchtitan = stacks.preset("torchtitan")
    # What the page's script leaves in the form when the stack is chosen: its settings in the option fields.
    typed = {f"training__{k}": ("on" if v is True else None if v is False else v) for k, v in torchtitan.items()}
    data = post_data(catalog, training__framework="torchtitan", **typed)
    data = {k: v for k, v in data.items() if v is not None}
    assert client.post("/", data).status_code == 302
    plan = Plan.objects.get()
    assert {k: plan.spec["training"][k] for k in torchtitan} == torchtitan
    sources = plan.option_sources
    assert sources["training.framework"] == "request"
    assert {sources[f"training.{k}"] for k in torchtitan} == {"stack"}
    assert sources["training.fp8_recipe"] == "default"  # a setting no stack names
    # The API request that names the stack and nothing else is the same request: its answer is reused.
    api = {"model": "Llama 3 70B", "training": {"global_batch": 512, "framework": "torchtitan"},
           "cluster": {"num_gpus": 512, "gpu": H100, "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
    response = client.post("/api/plans", api, content_type="application/json")
    assert response.status_code == 201, response.json()
    again = Plan.objects.get(code=response.json()["code"])
    assert again.spec_hash == plan.spec_hash
    assert again.option_sources == sources


def test_a_stated_option_beats_the_stack_and_the_page_says_where_each_came_from(client, catalog, small_spec):
    small_spec["training"].update(framework="fsdp", elementwise="fused")
    response = client.post("/api/plans", small_spec, content_type="application/json")
    assert response.status_code == 201, response.json()
    plan = Plan.objects.get(code=response.json()["code"])
    assert plan.spec["training"]["elementwise"] == "fused"  # stated; fsdp's own setting is eager
    assert plan.spec["training"]["checkpoint_impl"] == "pytorch"  # fsdp's
    rows = page_rows(client.get(plan.get_absolute_url()).content.decode())
    assert rows["training.elementwise"]["source"] == "set in the request"
    assert (rows["training.checkpoint_impl"]["value"], rows["training.checkpoint_impl"]["source"]) == (
        "pytorch", "assumed: the fsdp stack's setting")
    assert rows["training.framework"]["value"] == "fsdp"


def test_the_form_carries_each_stacks_settings_for_its_script(client, catalog):
    page = client.get("/").content.decode()
    data = json.loads(html.unescape(re.search(r'<script id="stack-data" type="application/json">(.*?)</script>',
                                              page, re.S).group(1)))
    assert data["stacks"]["megatron_core"]["fp8_weight_cache"] is True
    assert data["stacks"]["torchtitan"] == stacks.preset("torchtitan")
    # Back to "generic", a stack's option returns to the engine's default.
    assert data["defaults"]["checkpoint_impl"] == "megatron" and data["defaults"]["zero_granularity"] == "bucket"
    assert set(data["defaults"]) == stacks.SET_BY_A_STACK == {k for s in stacks.STACKS.values() for k in s["options"]}
    assert '<option value="torchtitan">torchtitan: torchtitan (PyTorch-native' in page
    assert '<option value="generic" selected>generic: each option' in page


def test_without_the_pages_script_a_newly_chosen_stack_still_fills_what_was_left_alone(client, catalog):
    # The page was drawn with "generic"; the person picks torchtitan and changes one option. Without the script
    # the option fields still hold generic's settings, and stack_shown says so.
    page = untouched_form(client)
    assert page["stack_shown"] == "generic"
    data = {**page, "training__framework": "torchtitan", "training__cross_entropy": "chunked"}
    assert client.post("/", data).status_code == 302
    plan = Plan.objects.get()
    titan = stacks.preset("torchtitan")
    assert plan.spec["training"]["checkpoint_impl"] == titan["checkpoint_impl"] == "pytorch"
    assert plan.spec["training"]["tp_wgrad_overlap"] is False  # generic's checked box, left alone: torchtitan's
    assert plan.spec["training"]["cross_entropy"] == "chunked"  # changed by the person: kept
    sources = plan.option_sources
    assert sources["training.checkpoint_impl"] == sources["training.tp_wgrad_overlap"] == "stack"
    assert sources["training.cross_entropy"] == "request"
    # With the script the fields already hold torchtitan's settings and stack_shown says torchtitan: the same
    # request, so the same answer is reused.
    filled = {f"training__{k}": ("on" if v is True else None if v is False else v) for k, v in titan.items()}
    scripted = {k: v for k, v in {**page, **filled, "training__framework": "torchtitan", "stack_shown": "torchtitan",
                                  "training__cross_entropy": "chunked"}.items() if v is not None}
    assert client.post("/", scripted).status_code == 302
    assert Plan.objects.latest("created_at").spec_hash == plan.spec_hash
    # A stack_shown that names no stack (a tampered page) is ignored, not an error the page could not show.
    assert client.post("/", {**scripted, "stack_shown": "x" * 500}).status_code == 302


def test_a_stack_named_by_another_name_is_marked_as_the_stack(client, catalog, small_spec):
    small_spec["training"]["framework"] = "megatron"
    response = client.post("/api/plans", small_spec, content_type="application/json")
    assert response.status_code == 201, response.json()
    plan = Plan.objects.get(code=response.json()["code"])
    assert plan.spec["training"]["framework"] == "megatron_core"
    assert plan.option_sources["training.fp8_weight_cache"] == "stack"
