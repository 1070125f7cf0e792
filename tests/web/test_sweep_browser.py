"""A capacity planner in Debian's Chromium: create a sweep from the form, watch its progress bar move, see the
charts drawn, open one scenario's plan, then compare two scenarios side by side. Leaves a screenshot under
var/screenshots/."""
from __future__ import annotations

import pytest

from webui.models import Sweep

from .conftest import ROOT
from .test_browser import browser  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCREENSHOT = ROOT / "var" / "screenshots" / "sweep-page.png"


def test_a_planner_sweeps_scenarios_and_compares_two(web, worker, seeded, browser):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(web.url + "/")
    page.click("#sweep-link a")
    page.select_option("select[name=model]", "Llama 3 8B")
    page.select_option("select[name=gpus]", ["H100 SXM5 80GB"])
    page.select_option("select[name=nodes]", ["DGX H100"])
    page.select_option("select[name=fabrics]", ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"])
    page.fill("input[name=num_gpus]", "64, 128, 256")
    page.uncheck("input[name=precisions][value=fp8]")
    page.check("input[name=precisions][value=bf16]")
    page.fill("input[name=global_batch]", "512")
    page.fill("input[name=tokens]", "2e12")
    page.fill("input[name=deadline_days]", "40")
    page.click("#submit-sweep")
    page.wait_for_url("**/sweeps/*/")
    assert page.inner_text("#sweep-total") == "6"

    # The bar fills as the worker finishes scenarios; the page reloads itself when all are done.
    page.wait_for_selector("#sweep-bar[data-done='6']", state="attached", timeout=120_000)  # the reloaded page
    page.wait_for_function("document.getElementById('sweep-bar').style.width === '100%'", timeout=10_000)
    assert page.inner_text("#sweep-status") == "done" and page.inner_text("#sweep-done") == "6"
    for chart in ("time-vs-gpus", "cost-vs-time", "mfu-heatmap"):
        page.wait_for_selector(f"#chart-{chart} svg.main-svg", timeout=30_000)
    assert page.locator("#scenarios tbody tr").count() == 6
    assert page.is_visible("#sweep-best") or page.is_visible("#sweep-no-best")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    # The live table writes values as the reloaded page does (a 654 s step was "654 s" live, "10.9 min" after).
    from webui.templatetags.planner_format import duration, number
    for value in (0.0004, 3.21, 654, 9000, 200_000, 5e7, 1e8, 0.9996):
        assert page.evaluate(f"window.sweepFormat.duration({value})") == duration(value), value
    from webui.templatetags.planner_format import step_time
    for value in (0.0004, 9.996, 10.031, 10.0, 10.104, 9.9996, 0.99996, 119.996, 654.3, 9000, 5e7):
        assert page.evaluate(f"window.sweepFormat.stepTime({value})") == step_time(value), value
    for value in (0.449, 12.5, 104_500, 3_145_728):
        assert page.evaluate(f"window.sweepFormat.number({value})") == number(value), value
    # On a phone the heatmap's row labels ("RoCEv2 400 GbE (Llama 3 style), precision bf16") are shortened to fit,
    # not cut at the chart's left edge.
    page.set_viewport_size({"width": 375, "height": 800})
    page.wait_for_function("[...document.querySelectorAll('#chart-mfu-heatmap .ytick text')]"
                           ".some(t => t.textContent.endsWith('…'))", timeout=10_000)
    left = page.eval_on_selector("#chart-mfu-heatmap", "c => c.getBoundingClientRect().left")
    ticks = page.eval_on_selector_all("#chart-mfu-heatmap .ytick text",
                                      "ts => ts.map(t => t.getBoundingClientRect().left)")
    assert ticks and min(ticks) >= left, (ticks, left)
    # ... and on a small phone the time-vs-GPUs legend's entries ("ideal scaling (RoCEv2 400 GbE (Llama 3
    # style))") are shortened to the chart's width: they ran past its right edge.
    page.set_viewport_size({"width": 320, "height": 800})
    page.wait_for_function("document.querySelector('#chart-time-vs-gpus .main-svg').getAttribute('width') < 320")
    page.wait_for_timeout(500)  # the legend drawn again after the width's (clearAxisTitle)
    right = page.eval_on_selector("#chart-time-vs-gpus", "c => c.getBoundingClientRect().right")
    entries = page.eval_on_selector_all("#chart-time-vs-gpus .legend .traces",
                                        "ts => ts.map(t => [t.textContent, t.getBoundingClientRect().right])")
    assert max(edge for _, edge in entries) <= right, (entries, right)
    assert any(name.endswith("…") for name, _ in entries), entries
    page.set_viewport_size({"width": 1280, "height": 900})

    # Open one scenario's plan: an ordinary plan page with its best layout.
    sweep_url = page.url
    first_layout = page.inner_text("#scenarios tbody tr:first-child [data-cell=layout]")
    page.click("#scenarios tbody tr:first-child [data-cell=status]")
    page.wait_for_selector("#best-plan")
    assert first_layout in page.inner_text("#best-plan .label")

    # Back to the sweep: tick two scenarios and compare them.
    page.goto(sweep_url)
    boxes = page.locator("#scenarios input[name=plans]")
    assert page.is_disabled("#compare-selected")  # compare takes 2 to 4 plans
    for i in range(4):
        boxes.nth(i).check()
    assert page.is_disabled("#scenarios tbody tr:nth-child(5) input[name=plans]")  # a fifth would be a 400 page
    boxes.nth(3).uncheck()
    boxes.nth(2).uncheck()
    assert page.is_enabled("#scenarios tbody tr:nth-child(5) input[name=plans]")
    # The ticks outlast a reload, as the page's own once the last scenario is planned (they were lost with it).
    page.reload()
    assert [boxes.nth(i).is_checked() for i in range(4)] == [True, True, False, False]
    assert page.is_enabled("#compare-selected")
    page.click("#compare-selected")
    page.wait_for_selector("table#compare")
    assert page.locator("#compare thead th").count() == 3
    assert page.locator("#compare tr.differs").count() >= 1  # the two fabrics differ, at least
    page.wait_for_selector("#chart-step-time svg.main-svg", timeout=30_000)
    assert errors == []
    assert Sweep.objects.count() == 1
    # On a phone neither page widens: a title of long axis names wraps (its status badge ran off to x = 426).
    from webui import sweeps

    long_axes = sweeps.sweep_create(data={"base": {"model": "Llama 3 8B", "training": {"global_batch": 512}, "cluster": {
        "num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}},
        "vary": {"cluster.fabric.oversubscription": [1, 2], "training.grad_reduce_dtype": ["bf16"]}})
    phone = browser.new_context(viewport={"width": 375, "height": 800}).new_page()
    for url in (sweep_url, page.url, web.url + long_axes.get_absolute_url()):
        phone.goto(url)
        assert phone.evaluate("document.documentElement.scrollWidth") <= 375, url
    # Compare's table scrolls sideways in its box there, and each row keeps its label in view: swiped to the last
    # plan, the figures had none.
    phone.goto(sweep_url)
    codes = phone.eval_on_selector_all("#scenarios tr[data-plan]", "rows => rows.map(r => r.dataset.plan)")
    phone.goto(web.url + "/compare/?plans=" + ",".join(codes[:4]))
    box = phone.evaluate("""() => {
      let el = document.querySelector('#compare');  // on a phone the table is its own scroll box (style.css)
      while (el && el.scrollWidth <= el.clientWidth) el = el.parentElement;
      if (!el || el === document.documentElement) return null;
      el.scrollLeft = el.scrollWidth;
      return {scrolled: el.scrollLeft,
              label: document.querySelector('#compare th[scope=row]').getBoundingClientRect().left};
    }""")
    assert box is not None and box["scrolled"] > 0 and 0 <= box["label"] < 40, box


def test_heatmap_rows_that_differ_only_at_their_end_stay_apart_when_shortened(web, browser):  # noqa: F811
    # A sweep crossing GPUs, nodes, fabrics and precisions: two rows differ only in the precision, at the end of
    # their labels, and were both shortened to "H100 SXM5 80GB, GB200 NVL72 compute tray, RoCEv2 400 GbE (Llama 3
    # style),…" (which row held 37% and which 50% could not be told).
    import json

    from webui import sweep_charts

    axes = ["cluster.gpu", "cluster.node", "cluster.fabric", "training.precision", "cluster.num_gpus"]
    rows = [{"labels": {"cluster.gpu": "H100 SXM5 80GB", "cluster.node": "GB200 NVL72 compute tray",
                        "cluster.fabric": "RoCEv2 400 GbE (Llama 3 style)", "training.precision": precision,
                        "cluster.num_gpus": "64"}, "values": {"training.precision": precision}, "mfu": mfu,
             "num_gpus": 64}
            for precision, mfu in (("bf16", 0.373), ("fp8", 0.502))]
    figure = sweep_charts.mfu_heatmap(rows, axes)
    # ... and four axes crossed, 16 rows that differ in every part: 5 distinct labels among them at 900 px.
    import itertools

    parts = [("H100 SXM5 80GB", "H100 SXM5 96GB HBM2e 500W"), ("DGX H100", "GB200 NVL72 compute tray"),
             ("NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"), ("bf16", "fp8")]
    crossed = [{"labels": {"cluster.gpu": g, "cluster.node": n, "cluster.fabric": f, "training.precision": p,
                           "cluster.num_gpus": "64"}, "values": {"training.precision": p}, "mfu": 0.4, "num_gpus": 64}
               for g, n, f, p in itertools.product(*parts)]
    wide = sweep_charts.mfu_heatmap(crossed, axes)
    page = browser.new_context(viewport={"width": 900, "height": 800}).new_page()
    page.goto(web.url + "/validation/")  # a page with charts: the addresses of plotly.js and charts.js as served
    scripts = page.eval_on_selector_all("script[src]", "ss => ss.map(s => s.src)")
    plotly, charts_js = (next(s for s in scripts if name in s) for name in ("plotly", "charts"))
    page.set_content(
        '<script id="figures-data" type="application/json">'
        + json.dumps({"h": figure, "w": wide}).replace("<", "\\u003c")
        + '</script><div data-figure="h" style="width: 800px"></div><div data-figure="w" style="width: 900px"></div>'
        + f'<script src="{plotly}"></script><script src="{charts_js}"></script>')
    page.wait_for_selector("[data-figure=h] .ytick text")
    labels = page.eval_on_selector_all("[data-figure=h] .ytick text", "ts => ts.map(t => t.textContent)")
    assert len(labels) == 2 and len(set(labels)) == 2, labels
    assert all("…" in label for label in labels), labels  # shortened to 40% of the width, as before
    assert labels[0].endswith("precision bf16") and labels[1].endswith("precision fp8"), labels
    page.wait_for_selector("[data-figure=w] .ytick text")
    labels = page.eval_on_selector_all("[data-figure=w] .ytick text", "ts => ts.map(t => t.textContent)")
    assert len(labels) == 16 and len(set(labels)) == 16, labels
    # Numbered bars (compare's) on a phone: the number told every label apart, so "#1 Llama 3 70B on…" and
    # "#2 Llama 3 70B on…" passed for distinct; what follows the number must tell them apart.
    bars = {"data": [{"type": "bar", "orientation": "h", "x": [1, 2], "name": "compute",
                      "y": ["#1 Llama 3 70B on 256 × B200 (DGX B200, NDR InfiniBand fat tree), precision fp8",
                            "#2 Llama 3 70B on 256 × B200 (DGX B200, NDR InfiniBand fat tree), precision bf16"]}],
            "layout": {"yaxis": {}, "xaxis": {}}}
    page.set_content(
        '<script id="figures-data" type="application/json">' + json.dumps({"b": bars}).replace("<", "\\u003c")
        + '</script><div data-figure="b" style="width: 375px"></div>'
        + f'<script src="{plotly}"></script><script src="{charts_js}"></script>')
    page.wait_for_selector("[data-figure=b] .ytick text")
    labels = page.eval_on_selector_all("[data-figure=b] .ytick text", "ts => ts.map(t => t.textContent)")
    assert [label[:3] for label in labels] == ["#1 ", "#2 "], labels
    assert labels[0][3:] != labels[1][3:] and "fp8" in labels[0] and "bf16" in labels[1], labels
