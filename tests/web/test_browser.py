"""A new user in Debian's Chromium: fill the form, submit, watch the progress, see the charts drawn, then open
the plan's link in a fresh browser context and see the same plan. Leaves a screenshot under var/screenshots/.

The pages come from gunicorn with WhiteNoise and content-hashed static files, as in production."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connections
from django.utils import timezone

from planner.catalog import load_catalog
from webui import services
from webui.models import Plan

from .conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT = ROOT / "var" / "screenshots" / "plan-page.png"


@pytest.fixture
def browser(monkeypatch):
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM}: apt-get install -y chromium, or set CHROMIUM"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own database calls are still
    # synchronous, so Django's guard against ORM calls inside an event loop does not apply.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()
        # Database calls made while Playwright's loop ran opened a connection that Django's own teardown, outside
        # that loop, does not see; left open, it keeps PostgreSQL from dropping the test database at the end.
        connections.close_all()


def test_a_new_user_plans_a_job_and_shares_the_link(web, worker, seeded, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(web.url + "/")

    # Choose a smaller model: the preset fills the architecture fields.
    page.select_option("select[name=model_preset]", "Llama 3 8B")
    assert page.input_value("input[name=model__layers]") == "32"
    assert page.input_value("input[name=model__hidden]") == "4096"
    # Custom hardware fields appear only for "custom".
    assert not page.is_visible("input[name=fabric__latency_us]")
    page.select_option("select[name=fabric]", "custom")
    assert float(page.input_value("input[name=fabric__latency_us]")) == 1.0  # the catalog row's figure
    page.select_option("select[name=fabric]", "NDR InfiniBand rail-optimized (DGX SuperPOD)")
    # The GPU's constants start at the catalog row's values, ready to edit for a custom GPU.
    page.select_option("select[name=gpu]", "custom")
    h100 = load_catalog()["gpu"]["H100 SXM5 80GB"]
    assert float(page.input_value("input[name=gpu__gemm_efficiency]")) == h100["gemm_efficiency"]
    page.select_option("select[name=gpu]", "H100 SXM5 80GB")
    # A training stack fills the options it sets; back to generic, they are the engine's defaults again.
    page.select_option("select[name=training__framework]", "torchtitan")
    assert page.input_value("select[name=training__checkpoint_impl]") == "pytorch"
    assert not page.is_checked("input[name=training__tp_wgrad_overlap]")
    page.select_option("select[name=training__framework]", "generic")
    assert page.input_value("select[name=training__checkpoint_impl]") == "megatron"
    assert page.is_checked("input[name=training__tp_wgrad_overlap]")
    # An option chosen by hand stays through a change of stack, as the server keeps it (it went back to flash).
    page.select_option("select[name=training__attention]", "cudnn")
    page.select_option("select[name=training__framework]", "fsdp")
    assert page.input_value("select[name=training__attention]") == "cudnn"
    page.select_option("select[name=training__framework]", "megatron_core")
    assert page.input_value("select[name=training__attention]") == "cudnn"
    assert page.input_value("select[name=training__checkpoint_impl]") == "megatron"  # the stack's, never changed
    page.select_option("select[name=training__attention]", "flash")
    page.select_option("select[name=training__framework]", "generic")
    page.select_option("select[name=training__framework]", "torchtitan")
    page.check("input[name=training__tp_comm_overlap]")  # one mechanism set; the page says the rest were assumed
    page.fill("input[name=num_gpus]", "64")
    page.fill("input[name=training__global_batch]", "256")
    page.fill("input[name=training__tokens]", "1e12")
    page.click("#fs-layout summary")  # pin two pipeline stages; the rest is searched
    page.fill("input[name=layout__pp]", "2")

    page.click("#submit-plan")
    page.wait_for_url("**/plans/*/")
    plan_url = page.url
    # Progress while queued or running, or the answer if the worker was quicker than the page: never blank.
    first = page.wait_for_selector("#plan-progress, #best-plan, #plan-failed, #no-layout", state="attached",
                                   timeout=5_000)
    assert first is not None
    page.wait_for_selector("#best-plan, #plan-failed, #no-layout", timeout=90_000)  # reloads by itself
    assert page.is_visible("#best-plan"), page.inner_text("main")
    for chart in ("step-time", "comm", "memory", "placement", "candidates"):
        page.wait_for_selector(f"#chart-{chart} svg.main-svg", timeout=30_000)
    description = page.inner_text("#best-plan .description")
    assert "PP 2" in description, description
    assert page.inner_text("#plan-status") == "done"
    assert "Llama 3 8B on 64" in page.inner_text("h1")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []

    options = page.locator("#options-table")
    assert "set in the request" in options.locator("[data-field='training.tp_comm_overlap']").inner_text()
    assert "set in the request" in options.locator("[data-field='training.framework']").inner_text()
    assert ("assumed: the torchtitan stack's setting"
            in options.locator("[data-field='training.checkpoint_impl']").inner_text())
    assert "assumed: the engine's default" in options.locator("[data-field='training.fp8_recipe']").inner_text()

    trust = page.inner_text("#accuracy")  # how far to trust the step time, next to it
    assert "published H100 BF16 runs" in trust or "No comparable published runs" in trust, trust
    if "published H100 BF16 runs" in trust:  # and how far to trust the order of the ranked layouts
        assert "not reliably ordered" in page.inner_text("#ranking-trust")

    # A colleague opens the link: no cookies, no history, the same plan.
    other = browser.new_context().new_page()
    other.goto(plan_url)
    assert other.inner_text("#best-plan .description") == description
    other.wait_for_selector("#chart-placement svg.main-svg", timeout=30_000)
    # No chart offers to upload the plan: plotly.js 4's "Share chart..." sent the figure to Plotly Cloud.
    other.hover("#chart-placement")
    titles = other.eval_on_selector_all("#chart-placement .modebar-btn", "bs => bs.map(b => b.dataset.title)")
    assert "Download plot as a PNG" in titles and not [t for t in titles if "Share" in t or "Cloud" in t], titles
    # Nor box or lasso select, which no chart acts on: each was one more Tab stop on every scatter (the memory
    # chart's capacity markers make it one).
    other.hover("#chart-memory")
    titles = other.eval_on_selector_all("#chart-memory .modebar-btn", "bs => bs.map(b => b.dataset.title)")
    assert "Download plot as a PNG" in titles and not [t for t in titles if "Select" in t], titles


def test_bad_input_in_the_browser_is_shown_next_to_the_field(web, seeded, browser):
    page = browser.new_page()
    page.goto(web.url + "/")
    page.fill("input[name=num_gpus]", "100")
    page.click("#submit-plan")
    error = page.locator("[data-field=num_gpus] .error")
    assert "must be a positive multiple of node.gpus (8)" in error.inner_text()
    assert page.input_value("input[name=num_gpus]") == "100"  # what was typed is kept
    assert page.evaluate("document.activeElement.name") == "num_gpus"  # the keyboard starts there
    link = page.locator("#error-summary a[href='#id_num_gpus_field']")
    assert link.inner_text() == "GPUs"
    page.locator("#submit-plan").focus()
    link.click()
    page.keyboard.press("Tab")  # from the field's box, the next stop is the field, not the control after it
    assert page.evaluate("document.activeElement.name") == "num_gpus"


def test_a_copy_names_its_pins_until_one_is_changed(web, seeded, browser, small_spec):
    # "Pinned: TP, Recompute." named the served pins after they were cleared and PP pinned instead.
    spec = services.spec_parse(data={**small_spec, "layout": {"tp": 2}}).to_dict()
    copied = Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec))  # saved, never queued
    page = browser.new_page()
    page.goto(web.url + f"/?from={copied.code}")
    assert page.is_visible("#fs-layout summary .pinned") and page.inner_text("#fs-layout summary .pinned") == \
        "Pinned: TP."
    page.fill("input[name=layout__tp]", "")
    assert not page.is_visible("#fs-layout summary .pinned")
    assert page.is_visible("input[name=layout__pp]")  # the section stays open


def test_a_half_typed_number_is_named_not_dropped(web, seeded, browser):
    # Typed key by key, as a person does: an <input type=number> posted nothing for "1e", so a pinned TP became
    # "search" without a word and GPUs "is required".
    page = browser.new_page()
    page.goto(web.url + "/")
    page.fill("input[name=num_gpus]", "")
    page.locator("input[name=num_gpus]").press_sequentially("1e")
    page.locator("#fs-layout summary").click()
    page.locator("input[name=layout__tp]").press_sequentially("8,")
    page.click("#submit-plan")
    assert "must be a number" in page.locator("[data-field=num_gpus] .error").inner_text()
    assert "'1e'" in page.locator("[data-field=num_gpus] .error").inner_text()
    assert "'8,'" in page.locator("[data-field=layout__tp] .error").inner_text()
    assert page.input_value("input[name=layout__tp]") == "8,"


def test_custom_hardware_starts_from_the_chosen_row_after_an_error_and_after_back(web, seeded, browser):
    b200 = load_catalog()["gpu"]["B200"]
    page = browser.new_page()
    page.goto(web.url + "/")
    page.select_option("select[name=gpu]", "B200")
    page.fill("input[name=num_gpus]", "7")
    page.click("#submit-plan")  # a message beside num_gpus
    assert "must be a positive multiple" in page.locator("[data-field=num_gpus] .error").inner_text()
    page.select_option("select[name=gpu]", "custom")
    assert float(page.input_value("input[name=gpu__peak_tflops]")) == b200["peak_tflops"]  # was empty
    assert float(page.input_value("input[name=gpu__memory_gib]")) == b200["memory_gib"]
    # Back to the form after a plan: the dropdown the browser restores and the fields below it agree.
    page.goto(web.url + "/")
    page.select_option("select[name=gpu]", "B200")
    page.fill("input[name=training__global_batch]", "256")
    page.click("#submit-plan")
    page.wait_for_url("**/plans/**")
    page.go_back()
    assert page.input_value("select[name=gpu]") == "B200"  # restored by the browser: the fields must follow it
    # and what was typed too (autocomplete=off on the text boxes stopped the browser restoring them)
    assert page.input_value("input[name=training__global_batch]") == "256"
    page.select_option("select[name=gpu]", "custom")
    assert float(page.input_value("input[name=gpu__peak_tflops]")) == b200["peak_tflops"]  # was H100's 989
    # A custom GPU's typed values come back after Back too: disabled while hidden, they were not restored, and
    # the fields showed the catalog row's values under a dropdown restored to "custom".
    page.fill("input[name=gpu__name]", "My GPU")
    page.fill("input[name=gpu__memory_gib]", "100")
    page.click("#submit-plan")
    page.wait_for_url("**/plans/**")
    assert "My GPU" in page.inner_text("h1")
    page.go_back()
    assert page.input_value("select[name=gpu]") == "custom" and page.is_visible("input[name=gpu__name]")
    assert page.input_value("input[name=gpu__name]") == "My GPU"
    assert page.input_value("input[name=gpu__memory_gib]") == "100"
    # A pin comes back after Back too, in a section that opens to show it: closed, a pinned TP went with the next
    # request unseen.
    assert not page.is_visible("input[name=layout__tp]")
    page.click("#fs-layout summary")
    page.fill("input[name=layout__tp]", "2")
    page.click("#submit-plan")
    page.wait_for_url("**/plans/**")
    page.go_back()
    assert page.is_visible("input[name=layout__tp]") and page.input_value("input[name=layout__tp]") == "2"


def test_every_help_text_on_the_form_stays_inside_its_field(web, seeded, browser):
    # A long unbroken token (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) once ran over the next column's text.
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(web.url + "/")
    spill = page.evaluate("""() => [...document.querySelectorAll('.field .help')].filter(h =>
        h.getBoundingClientRect().right > h.closest('.field').getBoundingClientRect().right + 1
    ).map(h => h.closest('.field').dataset.field)""")
    assert page.locator(".field .help").count() > 40 and spill == []


def test_a_search_cut_off_while_the_page_is_open_is_said_there(web, seeded, browser, small_spec):
    # A plan saved as sent but never put on the queue, so that no worker of another test takes it: it stays
    # queued. Then what delivery.plan_lost leaves when a search process dies.
    spec = services.spec_parse(data=small_spec).to_dict()
    plan = Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec), dispatched_at=timezone.now())
    page = browser.new_page()
    page.goto(web.url + plan.get_absolute_url())
    assert page.locator("#progress-restarted").is_hidden()
    Plan.objects.filter(pk=plan.pk).update(attempts=1)
    page.wait_for_selector("#progress-restarted", state="visible", timeout=15_000)
    assert "searched again from the start; nothing is lost" in page.inner_text("#progress-restarted")


# One small plan on each GPU, node and fabric added for 2026; Llama 3 8B with one pipeline stage keeps each
# search short.
NEW_HARDWARE = [("B300", "HGX B300", "XDR InfiniBand rail-optimized (Quantum-X800)", 16),
                ("GB300", "GB300 NVL72 compute tray", "XDR InfiniBand rail-optimized (Quantum-X800)", 72),
                ("H200 NVL", "H200 NVL server (4-GPU NVLink bridges)",
                 "XDR InfiniBand rail-optimized (Quantum-X800)", 16),
                ("AMD MI300X", "AMD MI300X platform (8 GPUs)", "Ethernet RoCE 800 GbE (Spectrum-X800)", 16),
                ("AMD MI325X", "AMD MI325X platform (8 GPUs)", "Ethernet RoCE 800 GbE (Spectrum-X800)", 16),
                ("AMD MI355X", "AMD MI355X platform (8 GPUs)", "Ethernet RoCE 800 GbE (Spectrum-X800)", 16)]


def test_a_plan_on_each_new_gpu_and_fabric_renders_with_launch_configs(web, worker, seeded, browser, small_spec):
    from webui import services

    from .conftest import wait_for_status

    plans = []
    for gpu, node, fabric, gpus in NEW_HARDWARE:
        doc = {**small_spec, "training": {"global_batch": 144, "precision": "bf16"}, "layout": {"pp": 1},
               "cluster": {"num_gpus": gpus, "gpu": gpu, "node": node, "fabric": fabric}}
        plans.append(services.plan_create(spec=services.spec_parse(data=doc), top=2))
    for plan in plans:
        wait_for_status(plan, ("done", "failed"))
        assert plan.status == "done", plan.error
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=web.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    for plan, (gpu, node, fabric, gpus) in zip(plans, NEW_HARDWARE, strict=True):
        page.goto(web.url + plan.get_absolute_url())
        page.wait_for_selector("#chart-placement svg.main-svg", timeout=30_000)
        assert f"on {gpus} × {gpu}" in page.inner_text("h1")
        assert f"node: {node}, fabric: {fabric}" in page.inner_text("p.meta")
        tp = plan.result["plans"][0]["layout"]["tp"]
        assert f"--tensor-model-parallel-size {tp}" in page.inner_text("#launch-text-megatron")
    text = page.inner_text("#launch-text-slurm")
    page.click("button[data-copy=launch-text-slurm]")
    page.wait_for_function("document.querySelector('button[data-copy=launch-text-slurm]').textContent == 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()") == text
    assert "#SBATCH --nodes=2" in text
    page.locator("#launch").screenshot(path=str(SCREENSHOT.with_name("launch-configs.png")))
    # A shared link opened on a phone: nothing widens the page (wide tables and code scroll inside it).
    phone = browser.new_context(viewport={"width": 420, "height": 900}).new_page()
    for url in (plans[-1].get_absolute_url(), "/", "/validation/", "/sweeps/new/"):
        phone.goto(web.url + url)
        assert phone.evaluate("document.documentElement.scrollWidth") <= 420, url
    # ... nor on a 320 px one: the launch headings' Copy buttons ended at 348 px, the validation page's build
    # fingerprint at 323.
    phone.set_viewport_size({"width": 320, "height": 900})
    for url in ("/", "/validation/", "/sweeps/new/", plans[-1].get_absolute_url()):
        phone.goto(web.url + url)
        assert phone.evaluate("document.documentElement.scrollWidth") <= 320, url
    copy = phone.eval_on_selector_all("#launch button.copy", "bs => bs.map(b => b.getBoundingClientRect().right)")
    assert copy and max(copy) <= 320, copy
    # ... and every chart title is whole on a 375 px phone, wrapped above its plot (Plotly cut them at the edge).
    phone.set_viewport_size({"width": 375, "height": 900})
    for url in (plans[-1].get_absolute_url(), "/validation/"):
        phone.goto(web.url + url)
        phone.wait_for_selector(".chart .gtitle")
        titles = phone.eval_on_selector_all(".chart", CHART_TITLE_BOXES)
        assert len(titles) >= 3, titles
        for t in titles:
            assert 0 <= t["top"] and t["right"] <= t["width"] and t["bottom"] <= t["plot_top"], (url, t)
            # below Plotly's toolbar, which lay over the first line
            assert t["modebar_bottom"] is not None and t["top"] >= t["modebar_bottom"], (url, t)
        assert any(t["lines"] > 1 for t in titles), titles  # at 375 px some were wider than the chart
        # A legend under the plot wraps into more rows on a phone: it stays below the x-axis title (its box has
        # a few px of padding), where it had run up over it.
        overlaps = phone.eval_on_selector_all(".chart", """cs => cs.map(c => [c.querySelector('.xtitle'),
            c.querySelector('.legend')]).filter(([t, l]) => t && l).map(([t, l]) =>
            l.getBoundingClientRect().top - t.getBoundingClientRect().bottom)""")
        assert overlaps and min(overlaps) >= -5, (url, overlaps)
    # Long plan labels ("#1 TP1 PP2 DP8 mb1 v2 selective recompute ZeRO-1 PP inside DP") are shortened to fit:
    # they were cut at the chart's left edge, and squeezed the bars into about 60 px.
    gpu, node, fabric, gpus = NEW_HARDWARE[0]
    doc = {**small_spec, "training": {"global_batch": 144, "precision": "bf16"},
           "layout": {"tp": 1, "pp": 2, "vpp": 2, "recompute": "selective", "rank_order": "tp-cp-pp-dp"},
           "cluster": {"num_gpus": gpus, "gpu": gpu, "node": node, "fabric": fabric}}
    long = services.plan_create(spec=services.spec_parse(data=doc), top=2)
    wait_for_status(long, ("done", "failed"))
    assert len(long.result["plans"][0]["label"]) > 45, long.result["plans"][0]["label"]
    phone.goto(web.url + long.get_absolute_url())
    phone.wait_for_selector("#chart-memory .ytick text")
    for chart in ("step-time", "memory"):
        box = phone.eval_on_selector(f"#chart-{chart}", """c => ({
            left: c.getBoundingClientRect().left, width: c.getBoundingClientRect().width,
            labels: [...c.querySelectorAll('.ytick text')].map(t => t.getBoundingClientRect().left),
            plot: c.querySelector('.bglayer rect, .nsewdrag').getBoundingClientRect().width})""")
        assert box["labels"] and min(box["labels"]) >= box["left"] and box["plot"] >= 0.45 * box["width"], box
    # A change of the window's height alone (a phone's address bar) keeps each chart's height: Plotly's own resize
    # had shrunk every one to the 200 px minimum.
    heights = "cs => cs.map(c => Math.round(c.getBoundingClientRect().height))"
    before = phone.eval_on_selector_all(".chart", heights)
    phone.set_viewport_size({"width": 375, "height": 700})
    phone.wait_for_timeout(800)
    assert phone.eval_on_selector_all(".chart", heights) == before and min(before) > 200, before


# Each drawn chart's title box against its chart (left, top = 0) and the top of its plot area, in pixels.
CHART_TITLE_BOXES = """charts => charts.filter(c => c.querySelector('.gtitle')).map(c => {
  const box = c.getBoundingClientRect(), title = c.querySelector('.gtitle').getBoundingClientRect();
  const plot = c.querySelector('.bglayer rect, .nsewdrag').getBoundingClientRect();
  const bar = c.querySelector('.modebar');
  return {name: c.id, top: title.top - box.top, bottom: title.bottom - box.top, right: title.right - box.left,
          modebar_bottom: bar ? bar.getBoundingClientRect().bottom - box.top : null,
          width: box.width, plot_top: plot.top - box.top,
          lines: Math.max(1, c.querySelectorAll('.gtitle tspan.line').length)};
})"""


def test_the_validation_page_draws_its_charts(web, seeded, browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(web.url + "/")
    page.click("text=How far to trust the numbers")
    page.wait_for_url("**/validation/")
    for chart in ("scatter", "by-group", "by-cohort"):
        page.wait_for_selector(f"#chart-{chart} svg.main-svg", timeout=30_000)
    assert page.locator("#chart-scatter .xtick").count() > 0  # log axes drawn
    assert "Held out of every fit" in page.inner_text("#summary")
    page.screenshot(path=str(SCREENSHOT.with_name("validation-page.png")), full_page=True)
    # Every run, opened on a laptop screen, scrolls inside the page: it had widened it to 1,798 px.
    page.set_viewport_size({"width": 1440, "height": 900})
    page.click("#all-runs summary")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    # On a phone each constant's source is read under its name and value, inside the screen: the source column
    # sat off to the right, beside rows hundreds of pixels tall that looked blank.
    page.set_viewport_size({"width": 375, "height": 800})
    sources = page.eval_on_selector_all(
        "#constants tbody tr td:last-child, #gpus tbody tr td:last-child",
        "cs => cs.map(c => [c.getBoundingClientRect().left, c.getBoundingClientRect().right])")
    assert sources and all(left >= 0 and right <= 375 for left, right in sources), sources[:3]
    assert errors == []
