"""The /validation/ page (from the stored validation, planner/data/validation.json) and the error statement on
every plan page and API answer."""
from __future__ import annotations

import json
import re
import statistics

import pytest

from planner import accuracy
from planner.catalog import load_catalog
from webui import services
from webui.models import GPUType, Plan
from webui.charts import PALETTE
from webui.templatetags.planner_format import percent
from webui.validation_charts import predicted_vs_measured, validation_figures

from .test_views import make_plan

pytestmark = pytest.mark.django_db


def figures_of(page: str) -> dict:
    start = page.index('<script id="figures-data" type="application/json">') + len(
        '<script id="figures-data" type="application/json">')
    return json.loads(page[start:page.index("</script>", start)])


def test_the_validation_page_shows_the_figures_charts_and_constants(client):
    snapshot = accuracy.load_snapshot()
    response = client.get("/validation/")
    page = response.content.decode()
    assert response.status_code == 200
    for chart in ("scatter", "by-group", "by-cohort"):
        assert f'id="chart-{chart}"' in page, chart
    assert "/static/plotly/plotly.min." in page and "/static/webui/charts." in page
    assert 'id="summary"' in page and 'id="holdout"' in page and "Held out of every fit" in page
    assert f"build {snapshot['engine']['fingerprint']}" in page and 'id="stale"' not in page
    for group in snapshot["groups"]:
        assert group in page
    assert "H100 bf16" in page and "ADAM_OTHER_BYTES" in page and "NVIDIA V100 datasheet" in page
    # The GPU figures are the shipped ones the runs were costed with, said so: an admin's edits are not shown here.
    assert "<h3>GPUs of the shipped catalog</h3>" in page
    held = snapshot["holdout"]
    assert f"<td>{held['rows']}</td><td>{held['measured']}</td><td>{held['modelled']}</td>" in page
    # The lean beside the size: the signed median of all runs, e.g. -2.3%.
    assert f"<td>{snapshot['summary']['median_err'] * 100:+.1f}%</td>" in page
    assert page.count("<th>Median error</th>") == 3
    figures = figures_of(page)
    assert figures["scatter"]["layout"]["xaxis"]["type"] == "log"
    # Peak memory against the runs that state theirs: the summary line and a row's stated / predicted pair.
    summary = snapshot["summary"]
    assert summary["memory_rows"] > 0
    assert f"against the {summary['memory_rows']} runs that" in page
    assert f"{summary['memory_median_err'] * 100:+.1f}%" in page
    row = next(r for r in snapshot["rows"] if r["id"] == "tt24_t1_8b_g8_fsdp")
    assert f"{row['stated_memory_gib']:.1f} / {row['memory_gib']:.1f} GiB" in page


def test_the_scatter_has_every_modelled_run_the_diagonal_and_the_band():
    snapshot = accuracy.load_snapshot()
    figure = predicted_vs_measured(snapshot)
    band, diagonal, *groups = figure["data"]
    assert band["name"] == "±10%" and band["fill"] == "toself"
    assert band["y"][1] == pytest.approx(band["x"][1] * 0.9) and band["y"][2] == pytest.approx(band["x"][2] * 1.1)
    assert diagonal["x"] == diagonal["y"]
    assert sum(len(g["x"]) for g in groups) == snapshot["summary"]["modelled"]
    points = {cd[0]: (x, y) for g in groups for cd, x, y in zip(g["customdata"], g["x"], g["y"])}
    row = next(r for r in snapshot["rows"] if r["err"] is not None)
    assert points[row["id"]] == (row["measured_s"], row["predicted_s"])  # hover names the run
    assert figure["layout"]["yaxis"]["type"] == "log"
    # No two groups look alike: 12 groups and 10 colours, so the 11th on take another shape; held out is open.
    looks = [(g["marker"]["color"], g["marker"]["symbol"][0]) for g in groups]
    assert len(groups) > len(PALETTE) and len(set(looks)) == len(groups), looks
    held = next(r for r in snapshot["rows"] if r["err"] is not None and r["holdout"])
    group = next(g for g in groups if held["id"] in [cd[0] for cd in g["customdata"]])
    assert group["marker"]["symbol"][[cd[0] for cd in group["customdata"]].index(held["id"])].endswith("-open")


def test_figures_measured_with_another_engine_build_are_flagged(client, tmp_path, monkeypatch):
    stale = tmp_path / "validation.json"
    snapshot = json.loads(accuracy.SNAPSHOT.read_text())
    snapshot["engine"]["fingerprint"] = "0000000000000000"
    stale.write_text(json.dumps(snapshot))
    monkeypatch.setattr(accuracy, "SNAPSHOT", stale)
    page = client.get("/validation/").content.decode()
    assert 'id="stale"' in page and "make validation" in page and accuracy.fingerprint() in page


def test_without_a_stored_validation_the_page_says_how_to_make_one(client, tmp_path, monkeypatch):
    monkeypatch.setattr(accuracy, "SNAPSHOT", tmp_path / "none.json")
    response = client.get("/validation/")
    assert response.status_code == 200 and "make validation" in response.content.decode()
    assert validation_figures(None) == {}


def test_every_page_links_to_the_validation(client, seeded):
    assert 'href="/validation/"' in client.get("/").content.decode()


def test_a_plan_page_states_the_error_on_comparable_published_runs(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    stated = plan.result["accuracy"]
    cohort = accuracy.load_snapshot()["by_generation_precision"]["H100 bf16"]
    assert stated["runs"] == cohort["modelled"] and stated["median_abs_err"] == cohort["median_abs_err"]
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="accuracy"' in page and "How far to trust the step time" in page
    assert 'href="/validation/#by-cohort">How it is measured' in page  # the table the line quotes
    assert 'id="by-cohort"' in client.get("/validation/").content.decode()
    assert stated["statement"].replace("'", "&#x27;") in page
    assert f"median over {cohort['modelled']} published H100 BF16 runs" in page
    assert f"±{cohort['median_abs_err'] * 100:.1f}% on {cohort['modelled']} published runs</small>" in page
    body = client.get(f"/api/plans/{plan.code}").json()
    assert body["result"]["accuracy"]["statement"] == stated["statement"]


def test_a_plan_page_states_how_far_to_trust_the_order(client, small_spec, seeded):
    """The ranked layouts within the model's measured error of the best are marked as ties, and the page says how
    large the search's claimed gains over published layouts are, per source."""
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    order = plan.result["accuracy"]["ranking"]
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="ranking-trust"' in page and order["statement"].replace("'", "&#x27;") in page
    plans = plan.result["plans"]
    tied = accuracy.ties(plans, order["tie_within"])
    assert page.count('class="tie"') == len(tied)
    # Another tie threshold marks other rows: 0 ties none, a large one every row after the first.
    for within, marked in ((0.0, 0), (10.0, len(plans) - 1)):
        result = {**plan.result, "accuracy": {**plan.result["accuracy"], "ranking": {**order, "tie_within": within}}}
        Plan.objects.filter(pk=plan.pk).update(result=result)
        assert client.get(plan.get_absolute_url()).content.decode().count('class="tie"') == marked
    # An early answer stored its plans without ranks: the page still marks them, by place, and does not fail.
    unranked = [{k: v for k, v in p.items() if k != "rank"} for p in plans]
    result = {**plan.result, "plans": unranked,
              "accuracy": {**plan.result["accuracy"], "ranking": {**order, "tie_within": 10.0}}}
    Plan.objects.filter(pk=plan.pk).update(result=result)
    response = client.get(plan.get_absolute_url())
    assert response.status_code == 200 and response.content.decode().count('class="tie"') == len(plans) - 1


def test_a_plan_answered_before_the_order_was_stated_states_it(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    stated = {k: v for k, v in plan.result["accuracy"].items() if k != "ranking"}
    Plan.objects.filter(pk=plan.pk).update(result={**plan.result, "accuracy": stated})
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="ranking-trust"' in page and "pooled over all runs" in page
    api = client.get(f"/api/plans/{plan.code}").json()["result"]["accuracy"]
    assert api["statement"] == stated["statement"] and "pooled over all runs" in api["ranking"]["statement"]


def test_the_page_gives_the_claimed_search_gain_per_source_beside_the_pooled_one(client):
    snapshot = accuracy.load_snapshot()
    medians = sorted(g["median_search_gain"] for g in snapshot["groups"].values()
                     if g.get("median_search_gain") is not None)
    by_source = statistics.median(medians)
    page = client.get("/validation/").content.decode()
    assert 'id="search-by-source"' in page
    assert f"is {percent(by_source)} over {len(medians)}" in page
    assert f"against {percent(snapshot['summary']['median_search_gain'])} pooled" in page
    kept = statistics.median(g["median_search_gain_same_options"] for g in snapshot["groups"].values()
                             if g.get("median_search_gain_same_options") is not None)
    assert f'<span id="search-same-options">with the runs\' options kept, {percent(kept)} per source</span>' in page
    assert page.count("<th>With the run's options</th>") == 4  # summary, cohorts, groups, every run


def test_a_plan_compared_with_one_published_run_says_run(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    result = {**plan.result, "accuracy": {**plan.result["accuracy"], "runs": 1}}  # as for GB200 BF16: one run
    Plan.objects.filter(pk=plan.pk).update(result=result)
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "on 1 published run</small>" in page


def test_a_plan_answered_before_the_statement_existed_still_states_it(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    Plan.objects.filter(pk=plan.pk).update(result={k: v for k, v in plan.result.items() if k != "accuracy"})
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "median over" in page and "published H100 BF16 runs" in page
    assert "median over" in client.get(f"/api/plans/{plan.code}").json()["result"]["accuracy"]["statement"]


def test_a_custom_gpu_plan_says_no_comparable_runs_exist(client, small_spec, seeded):
    small_spec["cluster"]["gpu"] = {"name": "Prototype X", "peak_tflops": 500, "memory_gib": 96,
                                    "memory_gbytes_per_s": 3000}
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    assert plan.status == "done", plan.error
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "No comparable published runs" in page
    # Its order is the least sure of all, not the surest: the error over all runs, at least, and ties marked.
    order = plan.result["accuracy"]["ranking"]
    assert order["tie_within"] == round(accuracy.load_snapshot()["summary"]["median_abs_err"], 3)
    assert 'id="ranking-trust"' in page and "none like this plan&#x27;s was measured" in page
    assert page.count('class="tie"') == len(accuracy.ties(plan.result["plans"], order["tie_within"]))


def test_a_gpu_edited_in_the_admin_is_judged_by_its_figures(client, small_spec, seeded):
    # The admin's H100 with another GEMM efficiency kept the H100's "±4% ... published H100 BF16 runs" by its name.
    GPUType.objects.filter(name="H100 SXM5 80GB").update(gemm_efficiency=0.5)
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    page = client.get(plan.get_absolute_url()).content.decode()
    assert ("No comparable published runs: the model was checked with the catalog&#x27;s figures for H100 SXM5 "
            "80GB, and this GPU&#x27;s differ (gemm_efficiency 0.5, not 0.") in page
    assert "published H100 BF16 runs" not in page
    # Its memory alone: the error stands, and the page says what differs.
    shipped = load_catalog()["gpu"]["H100 SXM5 80GB"]["gemm_efficiency"]
    GPUType.objects.filter(name="H100 SXM5 80GB").update(gemm_efficiency=shipped, memory_gib=192)
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    stated = plan.result["accuracy"]["statement"]
    assert "published H100 BF16 runs" in stated and stated.endswith(
        "this GPU differs from the catalog's H100 SXM5 80GB only in memory_gib 192, not 80, which a layout's step "
        "time does not depend on.")


def test_the_page_gives_each_training_stacks_error_as_its_plans_state_it(client):
    page = client.get("/validation/").content.decode()
    table = page[page.index('id="by-stack"'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r'<tr data-stack="(\w+)">(.*?)</tr>', table, re.S)
    assert [name for name, _ in rows] == ["megatron_core", "torchtitan", "fsdp"]
    fsdp = dict(rows)["fsdp"]
    stated = accuracy.for_stack("fsdp")
    assert f"<td>{stated['runs']}</td>" in fsdp and stated["runs"] == 232
    assert percent(stated['median_abs_err']) in fsdp and "F_llmfoundry_benchmarks, F_fms_fsdp_ibm" in fsdp
