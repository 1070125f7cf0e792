"""The catalog in the admin: lists with search and filters, the engine's validation, JSON export and import."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webui.models import GPUType, Plan, Sweep, SweepScenario

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin_client, seeded):
    return admin_client


def add_gpu(staff, name: str, peak: str = "989", **more: str):
    """Post the admin's "add GPU type" form with the fields it needs."""
    return staff.post("/admin/webui/gputype/add/", {
        "name": name, "peak_tflops": peak, "memory_gib": "80", "memory_gbytes_per_s": "3000", "sm_count": "132",
        "source": "", **more})


@pytest.mark.parametrize("model", ["gputype", "nodetype", "fabric", "modelpreset", "plan"])
def test_every_list_renders_with_search(staff, model):
    response = staff.get(f"/admin/webui/{model}/", {"q": "H100"})
    assert response.status_code == 200


def test_filters_narrow_the_lists(staff):
    page = staff.get("/admin/webui/modelpreset/", {"arch": "moe"}).content.decode()
    assert "Mixtral 8x7B" in page and "GPT-3 175B" not in page
    page = staff.get("/admin/webui/fabric/", {"kind": "roce"}).content.decode()
    assert "RoCEv2 400 GbE" in page and "NDR InfiniBand fat tree" not in page


def test_the_edit_form_shows_the_engines_units_and_help(staff):
    gpu = GPUType.objects.get(name="H100 SXM5 80GB")
    page = staff.get(f"/admin/webui/gputype/{gpu.pk}/change/").content.decode()
    assert "Memory (GiB)" in page and "HBM capacity." in page


def test_the_admin_refuses_a_row_the_engine_rejects(staff):
    response = add_gpu(staff, "Broken", peak="-5")
    assert response.status_code == 200
    assert "must be at least 0.001 TFLOP/s (got -5)" in response.content.decode()
    assert not GPUType.objects.filter(name="Broken").exists()


def test_a_name_that_differs_from_another_only_in_case_is_refused(staff):
    response = add_gpu(staff, "h100 sxm5 80GB")
    assert response.status_code == 200
    assert "&#x27;H100 SXM5 80GB&#x27; is already a GPU type" in response.content.decode()
    assert not GPUType.objects.filter(name="h100 sxm5 80GB").exists()
    # A row may change the case of its own name.
    gpu = GPUType.objects.get(name="H100 SXM5 80GB")
    gpu.name = "H100 SXM5 80gb"
    gpu.full_clean()


@pytest.mark.parametrize("name", ["H100  SXM5 80GB", "H100 SXM5\u200b 80GB", "H100 SXM5\u00a080GB",
                                  "H\uff11\uff10\uff10 SXM5 80GB", "H100 SXM5 80GB\u034f", "H100 SXM5\u3164 80GB",
                                  "H100 SXM5 80GB\ufe0f"])
def test_a_name_that_reads_as_another_is_refused(staff, name):
    # Two spaces, a zero-width space, a no-break space, full-width digits, default-ignorable characters (a combining
    # grapheme joiner, a Hangul filler, a variation selector): three "H100 SXM5 80GB" stood in the GPU menu, and a
    # sweep over them drew three rows of that name.
    response = add_gpu(staff, name)
    assert response.status_code == 200
    assert "&#x27;H100 SXM5 80GB&#x27; is already a GPU type" in response.content.decode()
    assert not GPUType.objects.filter(name=name.strip()).exists()


def test_a_price_of_zero_is_refused_and_an_empty_one_is_no_price(staff):
    response = add_gpu(staff, "Free", price_per_gpu_hour_usd="0")
    assert "must be more than 0: leave it empty when you have no price" in response.content.decode()
    assert not GPUType.objects.filter(name="Free").exists()
    # A negative one is said alike: "greater than or equal to 0" was wrong, as 0 is refused too.
    page = add_gpu(staff, "Owed", price_per_gpu_hour_usd="-1").content.decode()
    assert "must be more than 0: leave it empty" in page and "greater than or equal to" not in page
    page = add_gpu(staff, "Dear", price_per_gpu_hour_usd="1e30").content.decode()  # in the engine's words too
    assert "must be at most 10,000 USD a GPU-hour (got 1e+30)" in page and "Ensure this value" not in page
    # 5e-324 made a sweep's costs 0.0, the tie the first rule prevents.
    page = add_gpu(staff, "Nearly free", price_per_gpu_hour_usd="5e-324").content.decode()
    assert "must be at least 0.0001 USD a GPU-hour (got 4.94066e-324): leave it empty" in page
    assert not GPUType.objects.filter(name="Nearly free").exists()
    constants = {"gemm_efficiency": "0.8", "fp8_gemm_efficiency": "0.72", "sustained_clock": "1.0",
                 "hbm_efficiency": "0.85", "kernel_overhead_us": "4", "attention_efficiency": "0.55"}
    assert add_gpu(staff, "Unpriced", price_per_gpu_hour_usd="", **constants).status_code == 302
    assert add_gpu(staff, "Priced", price_per_gpu_hour_usd="2.5", **constants).status_code == 302
    assert [g.price_per_gpu_hour_usd for g in GPUType.objects.filter(name__in=("Unpriced", "Priced"))
            .order_by("name")] == [2.5, None]


@pytest.mark.parametrize("peak, django_says", [("", "This field is required."), ("abc", "Enter a number.")])
def test_a_value_the_form_cannot_read_gets_one_message(staff, peak, django_says):
    """Django's own message only: the engine's rules do not judge the value the form could not read."""
    response = add_gpu(staff, "Blank", peak=peak)
    page = response.content.decode()
    assert response.status_code == 200 and django_says in page
    assert "is required</li>" not in page.replace("This field is required.</li>", "")
    assert "must be a number" not in page
    assert not GPUType.objects.filter(name="Blank").exists()


def test_selected_rows_export_as_a_fixture(staff):
    pk = GPUType.objects.get(name="B200").pk
    response = staff.post("/admin/webui/gputype/", {"action": "export_selected", "_selected_action": [pk]})
    rows = json.loads(response.content)
    assert response["Content-Disposition"].startswith("attachment")
    assert rows == [{"model": "webui.gputype", "pk": pk, "fields": rows[0]["fields"]}]
    assert rows[0]["fields"]["memory_gib"] == 180


def test_a_json_file_imports_and_bad_files_are_explained(staff):
    rows = json.loads(staff.get("/admin/webui/gputype/export/").content)
    rows[0]["fields"]["name"] = "Imported GPU"
    upload = SimpleUploadedFile("gpus.json", json.dumps(rows[:1]).encode())
    response = staff.post("/admin/webui/gputype/import/", {"file": upload, "update_existing": "on"})
    assert response.status_code == 302 and GPUType.objects.filter(name="Imported GPU").exists()
    bad = SimpleUploadedFile("bad.json", b"{nope")
    page = staff.post("/admin/webui/gputype/import/", {"file": bad}).content.decode()
    assert "not valid JSON" in page
    rows[0]["fields"]["memory_gib"] = -1
    worse = SimpleUploadedFile("worse.json", json.dumps(rows[:1]).encode())
    page = staff.post("/admin/webui/gputype/import/", {"file": worse, "update_existing": "on"}).content.decode()
    assert "row 1 (Imported GPU): memory_gib: must be at least 0.001 GiB (got -1)" in page


def test_plans_are_read_only_in_the_admin(staff):
    plan = Plan.objects.create(spec={"model": {"name": "x"}}, spec_hash="x", status="done", result={})
    assert staff.get(f"/admin/webui/plan/{plan.pk}/change/").status_code == 200
    staff.post(f"/admin/webui/plan/{plan.pk}/change/", {"status": "queued"})
    plan.refresh_from_db()
    assert plan.status == "done"
    assert staff.get("/admin/webui/plan/add/").status_code == 403


def test_a_plan_a_sweep_holds_names_the_scenario_that_keeps_it(staff):
    # The "Cannot delete plan" page listed "SweepScenario object (201)".
    plan = Plan.objects.create(spec={"model": {"name": "x"}}, spec_hash="x", status="done", result={})
    sweep = Sweep.objects.create(base={}, vary={}, axes=[])
    SweepScenario.objects.create(sweep=sweep, position=0, values={}, plan=plan)
    page = staff.get(f"/admin/webui/plan/{plan.pk}/delete/").content.decode()
    assert f"scenario 1 of sweep {sweep.code}" in page and "SweepScenario object" not in page
