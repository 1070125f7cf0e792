"""Sweeps through the JSON API, the page, the form and the CSV; goal-seeking; comparing plans side by side.

The scenarios' plans are searched here by the real service (`services.plan_run`, the worker's own code) in
this process, so these tests need no worker; tests/web/test_sweep_worker.py runs them on real workers.
"""
from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from planner.units import duration, significant, step_time

from webui import compare, services, sweeps
from webui.sweep_form import SweepForm
from webui.models import GPUType, Plan, Sweep, SweepScenario

pytestmark = pytest.mark.django_db

HARDWARE = {"gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}
BASE: dict[str, Any] = {"model": "Llama 3 8B", "training": {"global_batch": 256, "precision": "bf16"},
                        "cluster": {"num_gpus": 64, **HARDWARE}}


def post(client, body: Any):
    payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/api/sweeps", payload, content_type="application/json")


def run_plans(sweep_code: str) -> None:
    """Search every queued plan of the sweep with the worker's own service, in this process."""
    for plan in Plan.objects.filter(sweep_scenarios__sweep__code=sweep_code, status="queued"):
        services.plan_run(plan_id=plan.pk)


def test_posting_a_sweep_makes_one_queued_plan_per_scenario(client, seeded, django_capture_on_commit_callbacks):
    body = {"base": BASE, "vary": {"cluster.num_gpus": [64, 128], "training.precision": ["bf16", "fp8"]}}
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(client, body)
    assert response.status_code == 201, response.content
    sweep = Sweep.objects.get()
    assert response.json() == {"code": str(sweep.code), "url": f"http://testserver/sweeps/{sweep.code}/",
                               "status": "queued", "total": 4}
    scenarios = list(sweep.scenarios.select_related("plan"))
    assert [s.values for s in scenarios] == [
        {"cluster.num_gpus": 64, "training.precision": "bf16"}, {"cluster.num_gpus": 64, "training.precision": "fp8"},
        {"cluster.num_gpus": 128, "training.precision": "bf16"},
        {"cluster.num_gpus": 128, "training.precision": "fp8"}]
    assert [(s.plan.spec["cluster"]["num_gpus"], s.plan.spec["training"]["precision"]) for s in scenarios] == [
        (64, "bf16"), (64, "fp8"), (128, "bf16"), (128, "fp8")]
    assert len(callbacks) == 4  # each scenario's task is sent on its own, once the sweep is committed
    shown = client.get(f"/api/sweeps/{sweep.code}").json()
    assert (shown["status"], shown["done"], shown["total"], shown["best"]) == ("queued", 0, 4, None)


@pytest.mark.parametrize("vary,field,message", [
    ({"cluster.num_gpus": [64, 100]}, "vary.cluster.num_gpus",
     "scenario {cluster.num_gpus: 100}: cluster.num_gpus: must be a positive multiple of node.gpus (8)"),
    ({"cluster.gpus": [8]}, "vary.cluster.gpus", "unknown path"),
    ({"training.precision": []}, "vary.training.precision", "must be a non-empty list of values"),
    ({"cluster.fabric": ["NDR InfiniBand fat tree", "Carrier pigeon"]}, "vary.cluster.fabric",
     "scenario {cluster.fabric: Carrier pigeon}: cluster.fabric: unknown catalog name 'Carrier pigeon'"),
    ({"cluster.num_gpus": list(range(8, 8 * 41, 8)), "training.global_batch": list(range(256, 256 + 26))},
     "vary", "makes 40 × 26 = 1,040 scenarios; at most 1,024"),
    ("fast", "vary", "must be an object"),
    # "unknown path (known: ... cluster.gpu.* fields)" read as if it should have matched
    ({"cluster.num_gpus": [64], "cluster.gpu.price_per_gpu_hour_usd": [2, 3]},
     "vary.cluster.gpu.price_per_gpu_hour_usd", "is the catalog's, not a field of a request: each scenario is priced "
     "from its GPU's row, so set the price on the GPU in the admin, or sweep GPUs whose rows have the prices to "
     "compare"),
])
def test_a_bad_axis_is_a_400_naming_it_and_nothing_is_saved(client, seeded, vary, field, message):
    response = post(client, {"base": BASE, "vary": vary})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert any(message in m for m in errors[field]), errors
    assert not Sweep.objects.exists() and not Plan.objects.exists()


@pytest.mark.parametrize("body,field,message", [
    ({"base": BASE, "vary": {"cluster.num_gpus": [64]}, "goal": {"tokens": 1e12}}, "goal.deadline_days",
     "is required"),
    ({"base": BASE, "vary": {"cluster.num_gpus": [64]}, "goal": {"tokens": 1e12, "deadline_days": -3}},
     "goal.deadline_days", "must be more than 0"),
    ({"base": {**BASE, "training": {"global_batch": 0}}, "vary": {"cluster.num_gpus": [64]}},
     "base.training.global_batch", "must be at least 1"),
    ({"base": BASE, "vary": {"cluster.num_gpus": [64]}, "extra": 1}, "extra", "unknown field"),
    ({"vary": {"cluster.num_gpus": [64]}}, "base", "must be a spec object"),
    ([1], "sweep", "must be a JSON object"),
    (b"{oops", "sweep", "is not valid JSON"),
    ("[" * 990 + "]" * 990, "sweep", "is nested more than 32 levels deep"),
    ({"base": BASE, "vary": {"cluster.num_gpus": [64, 10**400]}}, "vary.cluster.num_gpus", "must be at most"),
    ({"base": BASE, "vary": {"cluster.num_gpus": [64]}, "goal": {"tokens": 10**400, "deadline_days": 30}},
     "goal.tokens", "must be more than 0 and at most 1e+16 tokens"),
    # As the spec's fields say it: not "(got inf..., 3 digits)"
    (b'{"base": {"model": "Llama 3 8B", "training": {"global_batch": 256}, "cluster": {"num_gpus": 64, '
     b'"gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}, '
     b'"vary": {"cluster.num_gpus": [64]}, "goal": {"tokens": 1e400, "deadline_days": 30}}',
     "goal.tokens", "must be more than 0 and at most 1e+16 tokens"),
    # A goal judges every scenario on its own tokens: others stated beside it showed one time to train in the
    # sweep and another on the scenario's plan page.
    ({"base": BASE, "vary": {"training.tokens": [1e12, 2e12]}, "goal": {"tokens": 1e12, "deadline_days": 30}},
     "vary.training.tokens", "the goal trains 1000000000000 tokens (goal.tokens)"),
    ({"base": {**BASE, "training": {**BASE["training"], "tokens": 1e12}}, "vary": {"cluster.num_gpus": [64]},
      "goal": {"tokens": 5e12, "deadline_days": 30}}, "base.training.tokens", "(got 1000000000000)"),
])
def test_a_bad_base_goal_or_body_is_a_400_naming_the_field(client, seeded, body, field, message):
    response = post(client, body)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert any(message in m for m in errors[field]), errors


def test_a_sweep_posted_while_the_broker_is_down_says_its_scenarios_wait_for_it(client, seeded, monkeypatch,
                                                                                 django_capture_on_commit_callbacks):
    # The plan page said "Saved, waiting for the task queue"; the sweep's said "the rest are with the workers".
    from webui import delivery

    def refuse(*args, **kwargs):
        raise ConnectionRefusedError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(delivery.app, "send_task", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, {"base": BASE, "vary": {"cluster.num_gpus": [64, 128, 256]}})
    assert response.status_code == 201
    shown = client.get(f"/api/sweeps/{response.json()['code']}").json()
    assert shown["waiting_for_broker"] == 3 and all(r["waiting_for_broker"] for r in shown["scenarios"])
    page = client.get(response.json()["url"]).content.decode()
    assert '<p id="sweep-broker"><span id="sweep-broker-count">3</span> of them saved, waiting for the task queue' \
        in page
    Plan.objects.update(dispatched_at=timezone.now())  # the outbox sent them
    page = client.get(response.json()["url"]).content.decode()
    assert '<p id="sweep-broker" hidden>' in page


def test_combinations_that_cannot_run_or_be_bought_are_left_out_where_asked_and_listed(client, seeded):
    # FP8 on an A100 and a GPU in a node type not built with it, in a sweep of GPUs, nodes and precisions: the
    # sweep had been refused whole, and the form put every GPU in every node ("B200 in a DGX H100").
    body = {"base": {**BASE, "cluster": {"num_gpus": 64, "fabric": HARDWARE["fabric"]}},
            "vary": {"cluster.gpu": ["A100 SXM4 80GB", "H100 SXM5 80GB", "B200"],
                     "cluster.node": ["DGX A100", "DGX H100", "DGX B200"], "training.precision": ["bf16", "fp8"]}}
    response = post(client, body)
    assert response.status_code == 400 and "'A100 SXM4 80GB' has none" in json.dumps(response.json())
    response = post(client, {**body, "leave_out_invalid": True})
    assert response.status_code == 201, response.content
    assert response.json()["total"] == 5  # A100 bf16, H100 bf16 and fp8, B200 bf16 and fp8, each in its own node
    sweep = Sweep.objects.get()
    assert [tuple(s.values.values()) for s in sweep.scenarios.order_by("position")] == [
        ("A100 SXM4 80GB", "DGX A100", "bf16"), ("H100 SXM5 80GB", "DGX H100", "bf16"),
        ("H100 SXM5 80GB", "DGX H100", "fp8"), ("B200", "DGX B200", "bf16"), ("B200", "DGX B200", "fp8")]
    shown = client.get(f"/api/sweeps/{sweep.code}").json()
    assert len(shown["left_out"]) == 18 - 5
    first = shown["left_out"][0]
    assert first == {"values": {"cluster.gpu": "A100 SXM4 80GB", "cluster.node": "DGX A100",
                                "training.precision": "fp8"},
                     "labels": {"cluster.gpu": "A100 SXM4 80GB", "cluster.node": "DGX A100",
                                "training.precision": "fp8"},
                     "reasons": ["training.precision: fp8 needs a GPU with FP8 tensor cores, and 'A100 SXM4 80GB' "
                                 "has none (cluster.gpu.fp8_tflops is 0)"]}
    assert {"values": {"cluster.gpu": "B200", "cluster.node": "DGX H100", "training.precision": "bf16"},
            "reasons": ["cluster.node: DGX H100 is built with H100 SXM5 80GB or H100 SXM5 96GB HBM2e 500W, not B200 "
                        "(the node type's GPU types in the catalog)"]} in [
        {k: c[k] for k in ("values", "reasons")} for c in shown["left_out"]]
    page = client.get(sweep.get_absolute_url()).content.decode()
    section = page[page.index('id="sweep-left-out"'):]
    assert "Left out: 13 combinations that cannot run" in section
    assert 'id="more-reasons"' not in section  # 8 reasons or fewer: all in view
    # The CSV lists them after the scenarios, with the reason (it had dropped them without a word)
    rows = list(csv.DictReader(io.StringIO(client.get(f"/sweeps/{sweep.code}/csv").content.decode())))
    assert [r["status"] for r in rows] == ["queued"] * 5 + ["left out"] * 13
    assert rows[5]["cluster.gpu"] == "A100 SXM4 80GB" and rows[5]["why_left_out"].startswith(
        "training.precision: fp8 needs a GPU with FP8 tensor cores") and rows[5]["plan"] == rows[5]["goal_note"] == ""
    assert rows[0]["why_left_out"] == ""
    many = post(client, {"base": body["base"], "leave_out_invalid": True, "vary": {
        "cluster.gpu": ["A100 SXM4 40GB", "A100 SXM4 80GB", "H100 SXM5 80GB", "H800 SXM5 80GB", "B200", "B300"],
        "cluster.node": ["DGX A100", "DGX H100", "HGX H800", "DGX B200", "HGX B300"]}}).json()
    page = client.get(many["url"]).content.decode()
    assert many["total"] == 6 and '<summary>16 more reasons</summary>' in page  # 24 pairs, one reason each
    # Each reason once with its count, above the whole list (which may run to hundreds of rows)
    assert "<li>cluster.node: DGX A100 is built with A100 SXM4 40GB or A100 SXM4 80GB, not B200 (the node type&#x27;s " \
           "GPU types in the catalog): 2 combinations</li>" in section
    assert "DGX H100 is built with H100 SXM5 80GB or H100 SXM5 96GB HBM2e 500W, not B200" in html.unescape(section)
    assert post(client, {**body, "leave_out_invalid": "yes"}).json()["errors"]["leave_out_invalid"] == [
        "must be true or false, not 'yes'"]
    # The form asks for it by default, and says it on the page it makes.
    form = client.get("/sweeps/new/").content.decode()
    assert re.search(r'<input type="checkbox" name="leave_out_invalid"[^>]*checked', form)
    response = client.post("/sweeps/new/", {
        "model": "Llama 3 8B", "gpus": ["H100 SXM5 80GB", "B200"], "nodes": ["DGX H100", "DGX B200"],
        "fabrics": [HARDWARE["fabric"]], "num_gpus": "64", "precisions": ["bf16"], "global_batch": "256",
        "leave_out_invalid": "on"})
    assert response.status_code == 302, response.context["form"].errors
    made = Sweep.objects.latest("created_at")
    assert made.scenarios.count() == 2 and len(made.left_out) == 2


def test_a_node_types_gpu_types_are_catalog_names_and_follow_a_renamed_gpu(seeded):
    from django.apps import apps
    from django.core.exceptions import ValidationError

    from webui.models import NodeType

    node = NodeType.objects.get(name="DGX H100")
    assert node.held_gpus() == ["H100 SXM5 80GB", "H100 SXM5 96GB HBM2e 500W"]
    node.gpu_types = "H100 SXM5 80GB\n  B2000 \n\nH100 SXM5 80GB"
    with pytest.raises(ValidationError) as caught:
        node.full_clean()
    assert caught.value.message_dict["gpu_types"] == [
        "'B2000' is not a GPU type of the catalog (one name a line, as the GPU types list writes it)",
        "names 'H100 SXM5 80GB' twice"]
    gpu = GPUType.objects.get(name="B200")
    gpu.name = "B200 SXM6 180GB"
    gpu.save()
    assert NodeType.objects.get(name="DGX B200").held_gpus() == ["B200 SXM6 180GB"]
    # A deleted one leaves them: its name refused every later save of the node, and /api/catalog still listed it.
    GPUType.objects.filter(name="H800 SXM5 80GB").delete()
    node = NodeType.objects.get(name="HGX H800")
    assert node.held_gpus() == []
    node.full_clean()
    # ... and `catalog seed --restore` puts it back there with the GPU (it brought the GPU back alone)
    services.catalog_seed(restore=True)
    assert NodeType.objects.get(name="HGX H800").held_gpus() == ["H800 SXM5 80GB"]
    # A database seeded before the column existed gets the shipped rows' GPU types (a migration), once.
    import importlib
    fill = importlib.import_module("webui.migrations.0018_shipped_node_gpu_types").fill
    NodeType.objects.filter(name__in=["DGX A100", "HGX H200"]).update(gpu_types="")
    NodeType.objects.filter(name="HGX H200").update(gpu_types="H100 SXM5 80GB")  # set by someone: kept
    fill(apps, None)
    assert NodeType.objects.get(name="DGX A100").held_gpus() == ["A100 SXM4 40GB", "A100 SXM4 80GB"]
    assert NodeType.objects.get(name="HGX H200").held_gpus() == ["H100 SXM5 80GB"]


def test_a_finished_sweep_reports_time_cost_goal_and_the_cheapest_scenario(client, seeded):
    GPUType.objects.filter(name="H100 SXM5 80GB").update(price_per_gpu_hour_usd=2.0)
    goal = {"tokens": 1e12, "deadline_days": 60}
    body = {"base": BASE, "vary": {"cluster.num_gpus": [64, 128, 256], "cluster.gpu": ["H100 SXM5 80GB", "B200"]},
            "goal": goal}
    code = post(client, body).json()["code"]
    run_plans(code)
    data = client.get(f"/api/sweeps/{code}").json()
    assert (data["status"], data["done"], data["total"]) == ("done", 6, 6)
    by_values = {(r["values"]["cluster.num_gpus"], r["values"]["cluster.gpu"]): r for r in data["scenarios"]}
    h100 = by_values[(128, "H100 SXM5 80GB")]
    plan = Plan.objects.get(code=h100["plan"])
    best_layout = plan.result["plans"][0]
    assert h100["tokens_per_s"] == best_layout["tokens_per_s"] and h100["mfu"] == best_layout["mfu"]
    days = 1e12 / best_layout["tokens_per_s"] / 86400
    assert h100["time_to_train_days"] == pytest.approx(days, rel=1e-5)
    assert h100["gpu_hours"] == pytest.approx(128 * days * 24, rel=1e-5)
    assert h100["cost"] == pytest.approx(2.0 * 128 * days * 24, rel=1e-5)
    assert h100["meets_goal"] is (days <= 60)
    # The scenario's own plan trains the goal's tokens: its page gives the same time to train.
    assert plan.spec["training"]["tokens"] == 1e12
    assert best_layout["time_to_train_s"] == pytest.approx(days * 86400, rel=1e-5)
    assert by_values[(128, "B200")]["cost"] is None  # B200 has no price in the catalog
    meeting = [r for r in data["scenarios"] if r["meets_goal"]]
    assert meeting, data["scenarios"]
    # Some meeting scenarios are unpriced, so the best is by GPU-hours, then the fewest GPUs.
    expected = min(meeting, key=lambda r: (r["gpu_hours"], r["num_gpus"], r["time_to_train_days"]))
    assert data["best"]["plan"] == expected["plan"]
    assert set(h100) >= {"values", "plan", "status", "step_time_s", "tokens_per_s", "mfu", "time_to_train_days",
                         "gpu_hours", "cost", "meets_goal", "layout"}

    rows = list(csv.reader(io.StringIO(client.get(f"/sweeps/{code}/csv").content.decode())))
    assert rows[0][:4] == ["cluster.num_gpus", "cluster.gpu", "plan", "status"] and len(rows) == 7
    assert rows[1][2] == data["scenarios"][0]["plan"] and rows[1][-4] in ("true", "false")
    assert rows[0][-4:] == ["meets_goal", "goal_note", "url", "why_left_out"]  # why one misses the goal, as the page
    # Every figure the API gives a scenario, the node and the plan's link included (they were missing).
    header = dict(zip(rows[0], rows[1]))
    assert header["node"] == data["scenarios"][0]["node"] == "DGX H100"
    # Whole addresses: a spreadsheet has no page to resolve "/plans/..." against.
    assert header["url"] == data["scenarios"][0]["url"] == f"http://testserver/plans/{data['scenarios'][0]['plan']}/"

    page = client.get(f"/sweeps/{code}/").content.decode()
    for chart in ("time-vs-gpus", "cost-vs-time", "mfu-heatmap"):
        assert f'id="chart-{chart}"' in page
    assert f'href="/plans/{h100["plan"]}/"' in page and 'id="sweep-best"' in page
    assert "goal: 1T tokens within 60 days" in page  # "60.0 days"
    # Each scenario's compare box names its scenario (all six said "compare this scenario").
    labels = re.findall(r'name="plans" value="[^"]+" aria-label="([^"]+)"', page)
    assert len(labels) == 6 and len(set(labels)) == 6 and labels[0].startswith("compare scenario 1: "), labels


def test_a_scenario_with_no_feasible_layout_says_so_in_the_table(client, seeded):
    body = {"base": {**BASE, "model": "Llama 3.1 405B"}, "vary": {"cluster.num_gpus": [8, 16]}}
    code = post(client, body).json()["code"]
    run_plans(code)
    data = client.get(f"/api/sweeps/{code}").json()
    assert [(r["status"], r["layout"]) for r in data["scenarios"]] == [("done", None), ("done", None)]
    page = client.get(f"/sweeps/{code}/").content.decode()
    assert page.count("no feasible layout (its plan says why)") == 2


def test_identical_scenarios_reuse_finished_answers(client, seeded):
    body = {"base": BASE, "vary": {"cluster.num_gpus": [64, 128]}}
    first = post(client, body).json()["code"]
    run_plans(first)
    second = post(client, body).json()
    assert second["status"] == "done"  # every scenario's answer is reused at once, no search
    plans = Plan.objects.filter(sweep_scenarios__sweep__code=second["code"])
    assert plans.count() == 2 and all(p.reused_from is not None and p.status == "done" for p in plans)


def test_the_sweep_form_makes_a_sweep_and_puts_errors_beside_their_fields(client, seeded):
    fields = {"model": "Llama 3 8B", "gpus": ["H100 SXM5 80GB"], "nodes": ["DGX H100"],
              "fabrics": ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"], "num_gpus": "64, 128",
              "precisions": ["bf16"], "global_batch": "256", "tokens": "1e12", "deadline_days": "30"}
    response = client.post("/sweeps/new/", fields)
    assert response.status_code == 302
    sweep = Sweep.objects.get()
    assert response["Location"] == sweep.get_absolute_url()
    assert sweep.vary == {"cluster.fabric": fields["fabrics"], "cluster.num_gpus": [64, 128]}
    assert sweep.goal == {"tokens": 1e12, "deadline_days": 30.0}
    assert sweep.base["cluster"] == {"gpu": "H100 SXM5 80GB", "node": "DGX H100"}

    response = client.post("/sweeps/new/", {**fields, "num_gpus": "64, 100", "deadline_days": "soon"})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "scenario {cluster.num_gpus: 100" in errors["num_gpus"][0]
    assert "must be a number" in errors["deadline_days"][0]
    assert 'data-field="num_gpus"' in response.content.decode()
    # The keyboard starts at the first field with a message, as on the plan form (focus had stayed on the page).
    page = response.content.decode()
    assert re.search(r'<input type="text" name="num_gpus"[^>]*autofocus', page)
    assert page.count("autofocus") == 1
    assert Sweep.objects.count() == 1
    # A long pasted list of GPU counts is read whole (the box held 400 characters and cut it mid-number), and a
    # repeat is named.
    counts = ", ".join(str(8 * i) for i in range(1, 200))
    form = SweepForm({**fields, "num_gpus": counts + ", 2000"}, catalog=services.catalog_as_dict())
    assert form.is_valid() and form.payload["vary"]["cluster.num_gpus"][-1] == 2000 and len(counts) > 400
    errors = client.post("/sweeps/new/", {**fields, "num_gpus": counts + ", 16"}).context["form"].errors
    assert errors["num_gpus"] == ["lists 16 twice"], errors
    # A fabric renamed in the admin while the page was open is said so and stays chosen, marked; it was dropped
    # from the list ("Select a valid choice"), and the page posted again swept the other fabric alone.
    response = client.post("/sweeps/new/", {**fields, "fabrics": ["NDR InfiniBand fat tree", "Old fabric"]})
    assert response.context["form"].errors["fabrics"] == [
        "“Old fabric” is no longer in the catalog (deleted or renamed since this page was opened): choose again"]
    page = response.content.decode()
    assert '<option value="Old fabric" selected>Old fabric (no longer in the catalog)</option>' in page
    assert '<option value="NDR InfiniBand fat tree" selected>' in page and Sweep.objects.count() == 1
    # A bad base field is said once, beside its own field, whatever the axes.
    response = client.post("/sweeps/new/", {**fields, "global_batch": "abc", "precisions": ["bf16", "fp8"]})
    errors = response.context["form"].errors
    assert errors["global_batch"] == ["must be a number, not 'abc'"] and "precisions" not in errors
    # Training stacks are an axis of their own; one stack is set in the base.
    client.post("/sweeps/new/", {**fields, "stacks": ["megatron_core", "torchtitan"]})
    assert Sweep.objects.latest("created_at").vary["training.framework"] == ["megatron_core", "torchtitan"]
    client.post("/sweeps/new/", {**fields, "stacks": ["fsdp"]})
    assert Sweep.objects.latest("created_at").base["training"]["framework"] == "fsdp"
    # GPU counts written as 1e3 or 256.0 are whole numbers.
    client.post("/sweeps/new/", {**fields, "num_gpus": "2.56e2, 512.0"})
    assert Sweep.objects.latest("created_at").vary["cluster.num_gpus"] == [256, 512]
    # "²" is a digit to str.isdigit, not to int: a message, not a 500.
    response = client.post("/sweeps/new/", {**fields, "num_gpus": "64, \u00b2"})
    assert response.status_code == 200 and "must be a number" in response.context["form"].errors["num_gpus"][0]
    # Thousands written as the page writes them: "1,024" made a sweep of 1 and 24 GPUs.
    for typed, counts in (("512, 1,024, 2,048", [512, 1024, 2048]), ("1,024", [1024]), ("64,96,1024", [64, 96, 1024]),
                          ("64 128;256", [64, 128, 256]), ("1,024,", [1024]), ("64, 128,", [64, 128])):
        client.post("/sweeps/new/", {**fields, "num_gpus": typed})
        assert Sweep.objects.latest("created_at").vary["cluster.num_gpus"] == counts, typed
    for typed, message in (("8,192", "“8,192” may be one GPU count (8192) or 2 (8, 192)"),
                           ("64,128,256", "“64,128,256” may be one GPU count (64128256) or 3 (64, 128, 256)")):
        response = client.post("/sweeps/new/", {**fields, "num_gpus": typed})
        assert response.context["form"].errors["num_gpus"] == [
            f"{message}: write counts apart with a comma and a space, and thousands without commas"]
    # Thousands and bare commas mixed: read as 1, 24, 2 and 48 GPUs.
    for typed in ("512, 1,024,2,048", "2,048,4,096", "1,0240"):
        response = client.post("/sweeps/new/", {**fields, "num_gpus": typed})
        assert response.context["form"].errors["num_gpus"] == [
            f"“{typed.split(', ')[-1]}” mixes thousands separators with commas between counts: write counts apart "
            "with a comma and a space, and thousands without commas"], typed
    # Every field's problem in one round: the service's (the global batch, the goal) beside the form's own (GPU
    # counts it cannot read, a row gone from the catalog); they had come only once the form's were mended.
    sweeps_before = Sweep.objects.count()
    response = client.post("/sweeps/new/", {**fields, "num_gpus": "8,192", "global_batch": "abc",
                                            "deadline_days": "-3", "fabrics": ["Old fabric"]})
    errors = response.context["form"].errors
    assert errors["num_gpus"][0].startswith("“8,192” may be one GPU count") and len(errors["num_gpus"]) == 1
    assert errors["fabrics"][0].startswith("“Old fabric” is no longer in the catalog")
    assert errors["global_batch"] == ["must be a number, not 'abc'"]
    assert errors["deadline_days"] == ["must be more than 0 and at most 36500 days (got -3)"]
    # A count listed twice is the form's own to say, so the global batch's message still comes with it
    response = client.post("/sweeps/new/", {**fields, "num_gpus": "64, 64", "global_batch": "abc"})
    errors = response.context["form"].errors
    assert errors["num_gpus"] == ["lists 64 twice"] and errors["global_batch"] == ["must be a number, not 'abc'"]
    # What the service says of one scenario is left out there: it would be about the stand-in GPU count.
    response = client.post("/sweeps/new/", {**fields, "num_gpus": "64, x", "global_batch": "100000000"})
    errors = response.context["form"].errors
    assert set(errors) == {"num_gpus", "global_batch"} and "scenario" not in errors["global_batch"][0]
    assert Sweep.objects.count() == sweeps_before
    assert client.get("/sweeps/new/").status_code == 200
    assert 'href="/sweeps/new/"' in client.get("/").content.decode()


def test_a_gpu_price_is_optional_and_bounded(seeded):
    from django.core.exceptions import ValidationError

    gpu = GPUType.objects.get(name="H100 SXM5 80GB")
    assert gpu.price_per_gpu_hour_usd is None and "price_per_gpu_hour_usd" not in gpu.spec_fields()
    gpu.price_per_gpu_hour_usd = -1
    with pytest.raises(ValidationError) as caught:
        gpu.full_clean()
    assert "price_per_gpu_hour_usd" in caught.value.message_dict


# ---------------------------------------------------------------------------------------------------------
# Compare


def finished_plans(client, count: int, base: dict[str, Any] = BASE) -> list[Plan]:
    code = post(client, {"base": base, "vary": {"cluster.num_gpus": [64, 128, 256, 512][:count]}}).json()["code"]
    run_plans(code)
    return [s.plan for s in SweepScenario.objects.filter(sweep__code=code).select_related("plan")]


def test_compare_shows_plans_side_by_side_with_differences_marked(client, seeded):
    a, b = finished_plans(client, 2, base={**BASE, "training": {**BASE["training"], "tokens": 1e12}})
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    assert response.status_code == 200
    sections = {s["title"]: {r["label"]: r for r in s["rows"]} for s in response.context["sections"]}
    assert sections["Request"]["GPUs"] == {"label": "GPUs", "cells": ["64", "128"], "differs": True}
    # For a screen reader: a caption, row headers, and "differs" said in words (it was a background colour).
    page = response.content.decode()
    assert '<caption class="visually-hidden">The 2 plans side by side' in page
    assert '<tr class="differs"><th scope="row">GPUs <span class="visually-hidden">(differs)</span></th>' in page
    assert sections["Request"]["model"]["differs"] is False
    assert sections["Best layout"]["dp"]["cells"] == [str(p.result["plans"][0]["layout"]["dp"]) for p in (a, b)]
    assert "InfiniBand" in sections["Communication by fabric (total s per step, overlapped included)"] or \
        "NVLink" in sections["Communication by fabric (total s per step, overlapped included)"]
    assert {"weights", "activations", "total"} <= set(sections["Memory per GPU (GiB)"])
    # As the plan page writes it: "7.5 s" was "8.68e-05" days.
    trains = [p.result["plans"][0].get("time_to_train_s") for p in (a, b)]
    assert all(trains) and sections["Throughput and time to train"]["time to train"]["cells"] == [
        duration(t) for t in trains]
    # The step time's parts that some plan spends time on, as the chart draws them: no "EP comm 0 0" for dense plans.
    breakdown = sections["Step time breakdown (exposed s per step)"]
    assert "EP comm (all-to-all)" not in breakdown and "compute" in breakdown
    assert all(any(c not in ("0", "–") for c in row["cells"]) for row in breakdown.values())
    # Step times to four digits and tokens as the plan page writes them ("10" and "10" were 10.03 and 10.04 s;
    # tokens were 1,000,000,000,000).
    assert sections["Throughput and time to train"]["step time"]["cells"] == [
        step_time(p.result["plans"][0]["step_time_s"]) for p in (a, b)]
    assert sections["Request"]["tokens to train"]["cells"] == ["1T", "1T"]
    # Seconds to four significant digits and GiB to a tenth, as on the plan page ("3.7", "3.37e-05", "174" were).
    compute = [p.result["plans"][0]["time_s"]["compute"] for p in (a, b)]
    assert breakdown["compute"]["cells"] == [significant(c, 4) for c in compute]
    assert all("e-" not in c for row in breakdown.values() for c in row["cells"])
    assert sections["Memory per GPU (GiB)"]["total"]["cells"] == [
        f"{p.result['plans'][0]['memory_gib']['total']:,.1f}" for p in (a, b)]
    # MFU reads as on the plan and sweep pages: a percentage, not a fraction.
    assert sections["Throughput and time to train"]["MFU (of the precision's peak)"]["cells"] == [
        f"{p.result['plans'][0]['mfu'] * 100:.1f}%" for p in (a, b)]
    figures = response.context["figures"]
    assert [t["x"] for t in figures["step-time"]["data"] if t["name"] == "compute"] == [
        [p.result["plans"][0]["time_s"]["compute"] for p in (a, b)]]
    # The GPU counts tell them apart; the words both titles start with go in the chart's title (a phone's shortened
    # bar labels kept "#1 Llama 3 8B on…" of each).
    assert figures["memory"]["data"][0]["y"] == ["#1 64 × H100 SXM5 80GB", "#2 128 × H100 SXM5 80GB"]
    assert figures["memory"]["layout"]["title"]["text"].endswith("best layout of each plan: Llama 3 8B on …")
    # Legends lie under the axis, as on the plan page, not in a scrolled box beside a short chart.
    assert all(f["layout"]["legend"]["orientation"] == "h" for f in figures.values())
    page = response.content.decode()
    assert 'class="differs"' in page and f'href="/plans/{a.code}/"' in page
    # A plan's link works as well as its code, and repeated ?plans= too (the plan page's form sends that).
    assert client.get(f"/compare/?plans=http://x/plans/{a.code}/&plans={b.code}").status_code == 200
    assert 'id="compare-with"' in client.get(f"/plans/{a.code}/").content.decode()
    # Unpriced plans have no cost row; plans of a priced sweep cost what its table says.
    assert "cost (USD, at its sweep's price per GPU-hour)" not in sections["Throughput and time to train"]
    GPUType.objects.filter(name="H100 SXM5 80GB").update(price_per_gpu_hour_usd=2.5)
    c, d = finished_plans(client, 2, base={**BASE, "training": {**BASE["training"], "tokens": 1e12}})
    response = client.get(f"/compare/?plans={c.code},{d.code},{a.code}")
    row = next(r for s in response.context["sections"] for r in s["rows"]
               if r["label"] == "cost (USD, at its sweep's price per GPU-hour)")
    table = {r["plan"]: r for r in sweeps.sweep_rows(sweep=SweepScenario.objects.get(plan=c).sweep)}
    assert row["cells"][:2] == [f"{table[str(p.code)]['cost']:,.0f}" if table[str(p.code)]['cost'] >= 1000
                                else f"{table[str(p.code)]['cost']:.3g}" for p in (c, d)]
    # The same figure as the sweep's, not the rounded GPU-hours times the price (20 USD apart in 4.76M)
    assert [compare._cost(p, p.result["plans"][0], 2.5) for p in (c, d)] == [table[str(p.code)]["cost"]
                                                                             for p in (c, d)]
    assert row["cells"][2] == "–"  # made before the price was set: none


def test_compare_charts_tell_plans_with_one_title_apart_by_what_differs(client, seeded):
    code = post(client, {"base": BASE, "vary": {"training.global_batch": [128, 256],
                                                "training.precision": ["bf16"]}}).json()["code"]
    run_plans(code)
    a, b = [s.plan for s in SweepScenario.objects.filter(sweep__code=code).order_by("position")]
    assert a.title == b.title
    figures = client.get(f"/compare/?plans={a.code},{b.code}").context["figures"]
    # One title for both: the bars say only what differs, and the chart's title gives the shared one.
    assert figures["memory"]["data"][0]["y"] == ["#1 global batch 128", "#2 global batch 256"]
    assert figures["memory"]["layout"]["title"]["text"].endswith(f"best layout of each plan: {a.title}")
    # Two stacks on one job: the request rows say which is which, and so do the bars.
    code = post(client, {"base": BASE, "vary": {"training.framework": ["megatron_core", "torchtitan"]}}).json()["code"]
    run_plans(code)
    a, b = [s.plan for s in SweepScenario.objects.filter(sweep__code=code).order_by("position")]
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    stack = next(r for s in response.context["sections"] for r in s["rows"] if r["label"] == "training stack")
    assert stack["differs"] and [str(c) for c in stack["cells"]][:2] == ["megatron_core", "torchtitan"]
    assert response.context["figures"]["memory"]["data"][0]["y"] == [
        "#1 training stack megatron_core", "#2 training stack torchtitan"]


def test_compare_labels_drop_only_whole_shared_parts_of_the_titles(client, seeded):
    """Llama 3 70B beside Llama 3.1 405B shared the word "Llama", and the bars read "3 70B on ..." and "3.1 405B on
    ..."; a shared part is dropped whole or not at all."""
    a, b = finished_plans(client, 2)
    Plan.objects.filter(pk=b.pk).update(spec=dict(b.spec, model=dict(b.spec["model"], name="Llama 3.1 8B")))
    figures = client.get(f"/compare/?plans={a.code},{b.code}").context["figures"]
    assert figures["memory"]["data"][0]["y"] == ["#1 Llama 3 8B on 64 × H100 SXM5 80GB",
                                                 "#2 Llama 3.1 8B on 128 × H100 SXM5 80GB"]
    assert figures["memory"]["layout"]["title"]["text"].endswith("best layout of each plan")


def test_compare_says_how_two_plans_of_one_gpu_name_differ(client, seeded):
    # A catalog GPU edited in the admin between two plans: both said "H100 SXM5 80GB", nothing else differed on
    # the page but the capacity, and the bars had one title.
    a, b = finished_plans(client, 2)
    spec = dict(b.spec, cluster=dict(b.spec["cluster"], num_gpus=a.spec["cluster"]["num_gpus"], gpu=dict(
        b.spec["cluster"]["gpu"], peak_tflops=900.0)))
    Plan.objects.filter(pk=b.pk).update(spec=spec)
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    rows = {r["label"]: r for s in response.context["sections"] if s["title"] == "Request" for r in s["rows"]}
    assert rows["GPU: Peak 16-bit (TFLOP/s)"] == {"label": "GPU: Peak 16-bit (TFLOP/s)", "cells": ["989", "900"],
                                                "differs": True}
    assert not rows["GPU"]["differs"] and "GPU: Memory (GiB)" not in rows  # only what differs is added
    assert response.context["figures"]["memory"]["data"][0]["y"][1] == "#2 GPU: Peak 16-bit (TFLOP/s) 900"


def test_compare_of_dense_models_has_no_expert_rows(client, seeded):
    """Two dense models of other FFN widths showed "Expert FFN hidden size" differing too (it defaults to the FFN
    width); beside an MoE model the row stays."""
    a, b = finished_plans(client, 2)
    spec = dict(b.spec, model=dict(b.spec["model"], ffn_hidden=12288, expert_ffn_hidden=12288))
    Plan.objects.filter(pk=b.pk).update(spec=spec)

    def rows() -> set[str]:
        response = client.get(f"/compare/?plans={a.code},{b.code}")
        return {r["label"] for s in response.context["sections"] if s["title"] == "Request" for r in s["rows"]}

    labels = rows()
    assert "model: FFN hidden size" in labels and not any("Expert" in label for label in labels), labels
    Plan.objects.filter(pk=b.pk).update(spec=dict(spec, model=dict(spec["model"], experts=8, top_k=2,
                                                                    expert_ffn_hidden=2048)))
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    expert = next(r for s in response.context["sections"] for r in s["rows"]
                  if r["label"] == "model: Expert FFN hidden size")
    assert expert["cells"] == ["–", "2,048"]  # the dense model's own FFN width had stood there


def test_compare_shows_pins_and_labels_bars_with_no_more_than_tells_them_apart(client, seeded):
    a, b = finished_plans(client, 2)
    # b: the same request as a, with TP pinned and the fabric's latency changed
    spec = dict(a.spec, layout=dict(a.spec["layout"], tp=2), cluster=dict(a.spec["cluster"], fabric=dict(
        a.spec["cluster"]["fabric"], latency_us=9.0)))
    Plan.objects.filter(pk=b.pk).update(spec=spec)
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    rows = {r["label"]: r for s in response.context["sections"] if s["title"] == "Request" for r in s["rows"]}
    assert rows["pinned: TP"]["cells"] == ["–", "2"] and rows["pinned: TP"]["differs"]
    assert rows["fabric: Latency (µs)"]["differs"]
    # The first row that tells them apart is enough: the fabric's latency, not the pin after it as well.
    labels = response.context["figures"]["memory"]["data"][0]["y"]
    assert labels == [f"#1 fabric: Latency (µs) {rows['fabric: Latency (µs)']['cells'][0]}",
                      "#2 fabric: Latency (µs) 9"]


def test_compare_labels_add_only_what_tells_bars_still_alike_apart(client, seeded):
    # Three plans of one title: c differs in latency, b only by a TP pin. A row that splits none of the bars still
    # alike adds nothing: each differing row went on every label (~700 characters) and the pin, the one
    # difference between a and b, came last and was cut.
    a, b, c = finished_plans(client, 3)
    Plan.objects.filter(pk=b.pk).update(spec=dict(a.spec, layout=dict(a.spec["layout"], tp=2)))
    Plan.objects.filter(pk=c.pk).update(spec=dict(a.spec, cluster=dict(a.spec["cluster"], fabric=dict(
        a.spec["cluster"]["fabric"], latency_us=9.0)), training=dict(a.spec["training"], global_batch=512)))
    labels = client.get(f"/compare/?plans={a.code},{b.code},{c.code}").context["figures"]["memory"]["data"][0]["y"]
    assert labels == [f"#1 global batch {a.spec['training']['global_batch']:,}, pinned: TP –",
                      f"#2 global batch {a.spec['training']['global_batch']:,}, pinned: TP 2",
                      "#3 global batch 512, pinned: TP –"]


def test_compare_gives_the_capacity_of_a_plan_with_no_feasible_layout(client, seeded):
    a, b = finished_plans(client, 2)
    Plan.objects.filter(pk=b.pk).update(result={"plans": [], "rejected": []})
    response = client.get(f"/compare/?plans={a.code},{b.code}")
    assert response.status_code == 200
    memory = {r["label"]: r for s in response.context["sections"] if s["title"] == "Memory per GPU (GiB)"
              for r in s["rows"]}
    capacity = f"{a.spec['cluster']['gpu']['memory_gib']:,.1f}"  # GiB to a tenth, as the plan page writes it
    assert memory["capacity"] == {"label": "capacity", "cells": [capacity, capacity], "differs": False}
    assert memory["total"]["cells"][1] == "–"
    # Its charts leave it out rather than draw an empty bar; its status says why it has no figures ("done" did not).
    assert response.context["figures"]["memory"]["data"][0]["y"] == ["#1 64 × H100 SXM5 80GB"]
    request = {r["label"]: r for s in response.context["sections"] for r in s["rows"] if s["title"] == "Request"}
    assert request["status"]["cells"] == ["done", "done: no layout fits"]
    # Columns numbered as the charts' bars: two plans of one title had two headings alike.
    page = response.content.decode()
    assert f'<th scope="col">#1 <a href="{a.get_absolute_url()}">' in page
    assert f'<th scope="col">#2 <a href="{b.get_absolute_url()}">' in page


@pytest.mark.parametrize("query,status,message", [
    ("", 400, "give 2 to 4 different plan codes"),
    ("plans=nonsense,also-bad", 400, "'nonsense' is not a plan code"),
    ("plans=" + ",".join(["6b0c6c1e-9f5e-4a43-9b0c-2f2f3c1f0a1%d" % i for i in range(5)]), 400, "(got 5)"),
    ("plans=6b0c6c1e-9f5e-4a43-9b0c-2f2f3c1f0a10,6b0c6c1e-9f5e-4a43-9b0c-2f2f3c1f0a11", 404,
     "no plan with the code 6b0c6c1e-9f5e-4a43-9b0c-2f2f3c1f0a10, 6b0c6c1e-9f5e-4a43-9b0c-2f2f3c1f0a11"),
])
def test_compare_with_bad_or_missing_codes_says_so_not_a_500(client, seeded, query, status, message):
    response = client.get(f"/compare/?{query}")
    assert response.status_code == status
    assert message in html.unescape(response.content.decode())


def test_a_gpu_price_is_edited_in_the_admin_and_a_sweep_is_listed_there(admin_client, seeded, client):
    gpu = GPUType.objects.get(name="H100 SXM5 80GB")
    page = admin_client.get(f"/admin/webui/gputype/{gpu.pk}/change/").content.decode()
    assert 'name="price_per_gpu_hour_usd"' in page
    fields = {f.name: getattr(gpu, f.name) for f in GPUType._meta.concrete_fields if f.name != "id"}
    form = {k: ("" if v is None else v) for k, v in fields.items()} | {"price_per_gpu_hour_usd": "2.49"}
    response = admin_client.post(f"/admin/webui/gputype/{gpu.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    gpu.refresh_from_db()
    assert gpu.price_per_gpu_hour_usd == 2.49
    code = post(client, {"base": BASE, "vary": {"cluster.num_gpus": [64]}}).json()["code"]
    assert SweepScenario.objects.get(sweep__code=code).price_per_gpu_hour_usd == 2.49  # kept with the sweep
    sweep = Sweep.objects.get(code=code)
    assert admin_client.get("/admin/webui/sweep/").status_code == 200
    assert admin_client.get(f"/admin/webui/sweep/{sweep.pk}/change/").status_code == 200


def test_the_sweep_api_wants_json_and_answers_404_for_an_unknown_sweep(client, seeded):
    response = client.post("/api/sweeps", "base=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json() == {"errors": {"sweep": ["must be sent as Content-Type: application/json"]}}
    unknown = "00000000-0000-0000-0000-000000000000"
    assert client.get(f"/api/sweeps/{unknown}").status_code == 404
    assert client.get(f"/sweeps/{unknown}/").status_code == 404
    assert client.get(f"/sweeps/{unknown}/csv").status_code == 404
    assert client.get("/api/sweeps").status_code == 405


@pytest.mark.parametrize("axis", ["cluster.gpu", "model"])
def test_a_lone_surrogate_on_a_catalog_axis_is_a_400_naming_the_axis(client, seeded, axis):
    # On the model axis it was "unknown model preset", where the plans API says what is wrong with the text.
    response = post(client, {"base": BASE, "vary": {axis: [BASE["model"] if axis == "model" else "H100 SXM5 80GB",
                                                           "\ud800"]}})
    assert response.status_code == 400, response.content
    messages = [m for ms in response.json()["errors"].values() for m in ms]
    assert any("must be valid Unicode text" in m for m in messages) and not any("unknown" in m for m in messages)
    assert not Sweep.objects.exists()


def test_the_sweep_form_starts_on_existing_rows_when_the_admin_renamed_its_defaults(seeded):
    from webui.models import ModelPreset, NodeType
    from webui.sweep_form import DEFAULTS, sweep_initial

    ModelPreset.objects.filter(name="Llama 3 70B").update(name="Llama 3 70B (ours)")
    NodeType.objects.filter(name="DGX H100").update(name="DGX H100 (ours)")
    initial = sweep_initial(services.catalog_as_dict())
    assert initial["model"] == min(services.catalog_as_dict()["model"]) and initial["model"] != DEFAULTS["model"]
    assert initial["nodes"] == ["8x GPU PCIe 5.0 server (no NVLink)"]  # the first node by name
    assert initial["gpus"] == DEFAULTS["gpus"] and initial["fabrics"] == DEFAULTS["fabrics"]  # still there


def test_a_scenario_in_time_without_a_price_says_why_it_misses_a_budget(client, seeded):
    # The documented rule (no price, no cost to hold to a budget) was applied without a word: the page said "no"
    # beside a time to train well inside the deadline.
    GPUType.objects.filter(name="H100 SXM5 80GB").update(price_per_gpu_hour_usd=2.0)
    body = {"base": BASE, "vary": {"cluster.gpu": ["H100 SXM5 80GB", "B200"]},
            "goal": {"tokens": 1e11, "deadline_days": 365, "budget": 1e9}}
    code = post(client, body).json()["code"]
    run_plans(code)
    h100, b200 = client.get(f"/api/sweeps/{code}").json()["scenarios"]
    assert (h100["meets_goal"], h100["goal_note"]) == (True, None)
    assert b200["time_to_train_days"] < 365 and b200["cost"] is None
    assert (b200["meets_goal"], b200["goal_note"]) == (False, "no price for B200, so no cost to hold to the budget")
    assert "no: no price for B200, so no cost to hold to the budget" in client.get(f"/sweeps/{code}/").content.decode()


def test_a_sweep_that_misses_its_budget_is_told_so_not_to_add_gpus(client, seeded):
    # Every scenario on time and over budget: the page said "More GPUs, faster GPUs or a later deadline may".
    GPUType.objects.filter(name="H100 SXM5 80GB").update(price_per_gpu_hour_usd=2.0)
    body = {"base": BASE, "vary": {"cluster.num_gpus": [64, 128]},
            "goal": {"tokens": 1e11, "deadline_days": 365, "budget": 1}}
    code = post(client, body).json()["code"]
    run_plans(code)
    data = client.get(f"/api/sweeps/{code}").json()
    assert data["best"] is None and all(s["goal_note"].startswith("costs ") for s in data["scenarios"])
    advice = ("2 cost more than the budget. What may help: a larger budget, or fewer GPU-hours (fewer or cheaper "
              "GPUs, if the deadline allows).")
    assert data["miss_advice"] == advice
    page = html.unescape(client.get(f"/sweeps/{code}/").content.decode())
    assert f"No scenario meets the goal: {advice}" in page


def test_one_clients_unfinished_scenarios_are_bounded_and_others_still_get_theirs(client, seeded, settings):
    # Without a bound one client could queue sweep after sweep of 1,024 scenarios and keep every other client's
    # sweeps waiting behind them.
    settings.SWEEP_MAX_PENDING_PER_CLIENT = 3
    two = {"base": BASE, "vary": {"cluster.num_gpus": [64, 128]}}
    first = post(client, two)
    assert first.status_code == 201
    refused = post(client, two)
    assert refused.status_code == 429
    assert refused.json() == {"errors": {"sweep": [
        "2 scenarios of your earlier sweeps are still waiting or running, and this sweep adds 2: at most 3 at a time. "
        "Ask again once some have finished, or vary fewer values."]}}
    assert "Retry-After" not in refused  # none of its scenarios has finished yet: no pace to go by
    assert Sweep.objects.count() == 1  # nothing saved
    other = Client(REMOTE_ADDR="10.0.0.2")
    assert post(other, two).status_code == 201  # another client has its own share
    assert post(client, {"base": BASE, "vary": {"cluster.num_gpus": [256]}}).status_code == 201  # 3 of 3
    run_plans(first.json()["code"])
    assert post(client, two).status_code == 201  # finished scenarios no longer count (and these are answered)
    form = {"model": "Llama 3 8B", "gpus": ["H100 SXM5 80GB"], "nodes": ["DGX H100"],
            "fabrics": ["NDR InfiniBand fat tree"], "num_gpus": "512, 1024, 2048", "precisions": ["bf16"],
            "global_batch": "256"}
    page = client.post("/sweeps/new/", form)
    assert page.status_code == 429 and "at most 3 at a time" in page.content.decode()
    # Now some have finished: when to ask again, at that pace (1 scenario too many; it had no Retry-After at all),
    # over the last 10 minutes...
    done = Plan.objects.filter(sweep_scenarios__sweep__client="127.0.0.1", status="done")
    finished = done.count()
    done.update(started_at=timezone.now() - timedelta(hours=2))
    page = client.post("/sweeps/new/", form)
    assert finished >= 2 and page["Retry-After"] == str(math.ceil(600 / finished))
    assert f"that is in about {duration(math.ceil(600 / finished))}." in page.content.decode()
    # ... or since the first of them started, where that is later: a young sweep's pace is its own (the first 429
    # of two 1,024-scenario sweeps 40 s old had said "in about 24.2 h" for 4 minutes).
    done.update(started_at=timezone.now() - timedelta(seconds=100))
    page = client.post("/sweeps/new/", form)
    assert page["Retry-After"] in {str(math.ceil(100 / finished)), str(math.ceil(101 / finished))}
    # A sweep over the limit alone never fits, however long one waits: no Retry-After (a client that honoured it
    # asked forever), and the words say so.
    alone = post(client, {"base": BASE, "vary": {"training.global_batch": [512, 768, 1024, 1280]}})  # new requests
    assert alone.status_code == 429 and "Retry-After" not in alone
    assert alone.json()["errors"]["sweep"][0].endswith("This sweep alone is more than that: vary fewer values, or "
                                                       "split it.")
    # Behind a proxy, the header it sets names the client.
    settings.CLIENT_ADDRESS_HEADER = "X-Real-IP"
    assert client.post("/api/sweeps", json.dumps(two), content_type="application/json",
                       HTTP_X_REAL_IP="192.0.2.7").status_code == 201
    assert Sweep.objects.latest("created_at").client == "192.0.2.7"


@pytest.mark.django_db(transaction=True)
def test_sweeps_asked_for_at_once_are_counted_one_after_the_other(seeded, settings):
    # Three parallel requests of 1,024 scenarios each got two through a quota of 2,048 (2,084 pending after).
    import threading

    from django.db import connection as default_connection

    settings.SWEEP_MAX_PENDING_PER_CLIENT = 4
    start, answers = threading.Barrier(3), []

    def ask(batch: int) -> None:
        try:
            start.wait()
            sweep = {"base": {**BASE, "training": {**BASE["training"], "global_batch": batch}},
                     "vary": {"cluster.num_gpus": [64, 128]}}
            answers.append(post(Client(), sweep).status_code)
        finally:
            default_connection.close()  # each thread's own connection

    threads = [threading.Thread(target=ask, args=(batch,)) for batch in (128, 256, 512)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [201, 201, 429]
    pending = SweepScenario.objects.filter(plan__status__in=("queued", "running")).count()
    assert pending == 4


def test_values_an_axis_would_label_alike_are_refused_and_a_modified_row_is_labelled_so(client, seeded):
    # Two inline models both named "m" were one series in the charts (a zig-zag line, one heatmap row) and
    # looked alike in the table; so did 64 and 64.0.
    tiny = {"name": "m", "layers": 8, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn_hidden": 4096,
            "vocab": 32000, "seq_len": 2048}
    response = post(client, {"base": BASE, "vary": {"model": [tiny, {**tiny, "layers": 32}]}})
    assert response.status_code == 400
    assert response.json()["errors"]["vary.model"] == [
        "gives 2 different values the label 'm', so its table and charts could not tell them apart: give each inline "
        "value a name of its own"]
    response = post(client, {"base": BASE, "vary": {"cluster.num_gpus": [64, 64.0]}})
    assert response.json()["errors"]["vary.cluster.num_gpus"] == [
        "gives 2 different values the label '64', so its table and charts could not tell them apart: list it once "
        "(as 64 and 64.0 it is the same value)"]
    assert not Sweep.objects.exists() and not Plan.objects.exists()
    # A catalog GPU beside the same GPU with one field changed: the engine's name tells them apart.
    response = post(client, {"base": BASE, "vary": {
        "cluster.gpu": ["H100 SXM5 80GB", {"name": "H100 SXM5 80GB", "memory_gib": 96}]}})
    assert response.status_code == 201, response.json()
    rows = sweeps.sweep_rows(sweep=Sweep.objects.get())
    assert [r["labels"]["cluster.gpu"] for r in rows] == ["H100 SXM5 80GB", "H100 SXM5 80GB (modified)"]
    page = client.get(Sweep.objects.get().get_absolute_url()).content.decode()
    assert "<td>H100 SXM5 80GB (modified)</td>" in page
    # The CSV names it so too, where its column held the object's JSON ({"name": "H100 SXM5 80GB", ...}).
    table = list(csv.reader(io.StringIO(client.get(f"{Sweep.objects.get().get_absolute_url()}csv").content.decode())))
    assert [r[0] for r in table] == ["cluster.gpu", "H100 SXM5 80GB", "H100 SXM5 80GB (modified)"]
    # An inline model's name, escaped as any text the spreadsheet would take for a formula.
    response = post(client, {"base": BASE, "vary": {"model": ["Llama 3 8B", {**tiny, "name": "@SUM(1)"}]}})
    table = list(csv.reader(io.StringIO(client.get(f"{response.json()['url']}csv").content.decode())))
    assert [r[0] for r in table] == ["model", "Llama 3 8B", "'@SUM(1)"]


def test_a_sweep_over_models_is_titled_by_its_axes_not_the_base_model(client, seeded):
    # "Sweep of Llama 3 8B over model" swept Llama 3 8B and 70B; with no base model it read "Sweep of model over
    # model".
    code = post(client, {"base": BASE, "vary": {"model": ["Llama 3 8B", "Llama 3 70B"]}}).json()["code"]
    assert Sweep.objects.get(code=code).title == "Sweep over model"
    code = post(client, {"base": BASE, "vary": {"cluster.num_gpus": [64, 128]}}).json()["code"]
    assert Sweep.objects.get(code=code).title == "Sweep of Llama 3 8B over cluster.num_gpus"


def test_names_reach_the_charts_as_text_not_plotly_markup(client, seeded):
    # Plotly reads <br>, <b> and <a href> in labels: a model so named was a live link on a shared page.
    evil = {"name": '<a href="https://evil.example/">click</a> & <br>', "layers": 8, "hidden": 1024, "heads": 8,
            "kv_heads": 8, "ffn_hidden": 4096, "vocab": 32000, "seq_len": 2048}
    code = post(client, {"base": {**BASE, "model": evil}, "vary": {"cluster.num_gpus": [64, 128],
                                                                   "model": [evil]}}).json()["code"]
    run_plans(code)
    figures = client.get(f"/sweeps/{code}/").context["figures"]
    a, b = [s.plan for s in SweepScenario.objects.filter(sweep__code=code).order_by("position")]
    figures |= client.get(f"/compare/?plans={a.code},{b.code}").context["figures"]
    text = json.dumps(figures)
    assert "<a href" not in text and "<br> " not in text and '&lt;a href=\\"https://evil.example/\\"&gt;' in text
    assert "&amp; &lt;br&gt;" in text


def test_a_sweep_page_says_what_every_scenario_shares(client, seeded):
    # A sweep of B200 in a DGX H100 over precisions named neither anywhere on its page.
    base = {**BASE, "cluster": {"gpu": "B200", "node": "DGX H100", "fabric": HARDWARE["fabric"]}}
    code = post(client, {"base": base, "vary": {"cluster.num_gpus": [64], "training.precision": ["bf16", "fp8"]}}
                ).json()["code"]
    page = client.get(f"/sweeps/{code}/").content.decode()
    assert ('<p class="meta" id="sweep-fixed">Every scenario: cluster.gpu = B200, cluster.node = DGX H100, '
            'cluster.fabric = NDR InfiniBand fat tree, training.global_batch = 256.</p>') in page
    # A modified row by the name its plans give it, and a count as the page writes counts
    base = {**base, "cluster": {**base["cluster"], "gpu": {"name": "H100 SXM5 80GB", "memory_gib": 96}},
            "training": {**base["training"], "tokens": 1e12}}
    code = post(client, {"base": base, "vary": {"cluster.num_gpus": [64], "training.precision": ["bf16", "fp8"]}}
                ).json()["code"]
    page = client.get(f"/sweeps/{code}/").content.decode()
    assert "cluster.gpu = H100 SXM5 80GB (modified)," in page and "training.tokens = 1,000,000,000,000" in page


def test_the_scenario_table_writes_gpu_counts_as_the_charts_do(client, seeded):
    # "1024" in the table beside "1,024" in the charts and the plans' titles.
    code = post(client, {"base": BASE, "vary": {"cluster.num_gpus": [1024, 64]}}).json()["code"]
    page = client.get(f"/sweeps/{code}/").content.decode()
    table = page[page.index('id="scenarios"'):]
    assert "<td>1,024</td>" in table and "<td>64</td>" in table and "<td>1024</td>" not in table
