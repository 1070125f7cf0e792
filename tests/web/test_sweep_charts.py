"""The sweep page's figures, from scenario rows as webui.sweeps.sweep_rows gives them (no database)."""
from __future__ import annotations

from planner.whatif.sweep import value_label
from webui.sweep_charts import cost_vs_time, mfu_heatmap, sweep_figures, time_vs_gpus

AXES = ["cluster.num_gpus", "cluster.fabric"]


def labelled(values: dict, names: dict | None = None) -> dict:
    """A row's values and their labels, as webui.sweeps.sweep_rows gives them (`names`: the engine's)."""
    return {"values": values, "labels": {a: value_label(a, v, (names or {}).get(a)) for a, v in values.items()}}


def row(gpus: int, fabric: str, days: float | None, mfu: float | None, cost: float | None = None) -> dict:
    return {**labelled({"cluster.num_gpus": gpus, "cluster.fabric": fabric}), "num_gpus": gpus, "layout": "TP1",
            "time_to_train_days": days, "gpu_hours": gpus * days * 24 if days else None, "cost": cost,
            "mfu": mfu, "meets_goal": bool(days and days <= 20)}


ROWS = [row(256, "IB", 40.0, 0.5), row(512, "IB", 22.0, 0.45), row(1024, "IB", 12.0, 0.41),
        row(256, "RoCE", 41.0, 0.49), row(512, "RoCE", 23.0, 0.44), row(1024, "RoCE", None, None)]


def test_time_against_gpus_has_one_line_per_fabric_with_its_ideal_scaling():
    fig = time_vs_gpus(ROWS, AXES)
    lines = {t["name"]: t for t in fig["data"]}
    assert lines["IB"]["x"] == [256, 512, 1024] and lines["IB"]["y"] == [40.0, 22.0, 12.0]
    assert lines["ideal scaling (IB)"]["y"] == [40.0, 20.0, 10.0]  # 40 days × 256 / GPUs
    assert lines["RoCE"]["x"] == [256, 512]  # the scenario with no layout is left out
    assert fig["layout"]["xaxis"]["type"] == "log"


def test_twelve_series_get_twelve_colours():
    """Past the palette's ten, series 11 and 12 took the colours of 1 and 2, with the same line style."""
    rows = [row(n, f"fabric {k}", 40.0 * 256 / n, 0.5) for k in range(12) for n in (256, 512)]
    lines = [t for t in time_vs_gpus(rows, AXES)["data"] if not t["name"].startswith("ideal")]
    assert len(lines) == 12 and len({t["marker"]["color"] for t in lines}) == 12


def test_gpu_hours_against_time_joins_the_pareto_front_and_marks_the_deadline():
    fig = cost_vs_time(ROWS, {"tokens": 1e12, "deadline_days": 30})
    front, meets, misses = fig["data"]  # the front drawn first, under the scenarios' markers
    assert (meets["name"], meets["x"], meets["marker"]["color"]) == ("meets the goal", [12.0], "#54a24b")
    assert misses["name"] == "misses the goal" and len(misses["x"]) == 4
    # GPU-hours: 245,760 (256 × 40 d), 270,336, 294,912, 251,904, 282,624: each faster one costs more here,
    # except RoCE@256, which IB@256 beats on both.
    assert front["x"] == [12.0, 22.0, 40.0]
    assert meets["hovertemplate"].endswith("%{y:,.0f} GPU-hours<extra></extra>")  # not "4.333e+6", unitless
    assert meets["text"] == ["1,024 GPUs, IB"]  # as the table writes the count, not "num_gpus 1024"
    assert fig["layout"]["shapes"][0]["x0"] == 30
    assert fig["layout"]["annotations"][0]["yanchor"] == "bottom"  # above the plot, clear of the top y tick
    assert fig["layout"]["title"]["text"] == "GPU-hours against time to train"
    mixed = cost_vs_time([dict(ROWS[0], cost=100.0), *ROWS[1:]], None)
    assert mixed["layout"]["title"]["text"] == "GPU-hours against time to train (4 of 5 scenarios have no GPU price)"
    priced = [dict(r, cost=r["gpu_hours"] * 2) for r in ROWS if r["time_to_train_days"]]
    no_goal = cost_vs_time(priced, None)
    assert "Cost" in no_goal["layout"]["title"]["text"]
    assert [t["name"] for t in no_goal["data"]] == ["Pareto front", "scenarios"]
    assert no_goal["data"][0]["mode"] == "lines"
    # A budget is a dotted line across, reached by the axis where it lies above every scenario's cost; on a
    # GPU-hours axis (some unpriced) there is none, a budget being dollars.
    top = max(r["cost"] for r in priced)
    for budget, axis_top in ((top / 2, None), (top * 3, top * 3 * 1.08)):
        fig = cost_vs_time(priced, {"tokens": 1e12, "deadline_days": 30, "budget": budget})
        (line,) = [shape for shape in fig["layout"]["shapes"] if shape.get("xref") == "paper"]
        assert (line["y0"], line["y1"]) == (budget, budget)
        assert fig["layout"]["annotations"][1]["text"] == f"budget {budget:,.0f} USD"
        assert fig["layout"]["yaxis"].get("range", [0, None])[1] == axis_top
    assert len(cost_vs_time(ROWS, {"tokens": 1e12, "deadline_days": 30, "budget": 5})["layout"]["shapes"]) == 1
    # A front of one scenario (fastest and cheapest) is a ring around it: a line of one point drew nothing.
    one = cost_vs_time([dict(ROWS[0], time_to_train_days=5.0, gpu_hours=1.0), *ROWS[1:]], None)["data"][0]
    assert (one["mode"], one["x"], one["marker"]["symbol"]) == ("markers", [5.0], "circle-open")


def test_the_mfu_heatmap_puts_gpu_counts_across_and_fabrics_down():
    fig = mfu_heatmap(ROWS, AXES)
    heat = fig["data"][0]
    assert heat["x"] == ["256", "512", "1,024"] and heat["y"] == ["IB", "RoCE"]
    assert heat["z"] == [[0.5, 0.45, 0.41], [0.49, 0.44, None]]
    assert heat["text"][0][0] == "50.0%"
    # The scale runs from 0 to the best MFU, both ends fixed: Plotly ignores zmin alone and stretches the data's
    # own range, so 51.7% and 51.9% had come out at the two ends of the colour scale.
    assert (heat["zmin"], heat["zmax"], heat["zauto"]) == (0, 0.5, False)
    assert "peak" not in fig["layout"]["title"]["text"]  # one precision: nothing to say


def test_the_heatmap_puts_gpu_counts_in_order_whatever_order_they_were_listed_in():
    fig = mfu_heatmap([row(1024, "IB", 12.0, 0.41), row(256, "IB", 40.0, 0.5), row(512, "IB", 22.0, 0.45)], AXES)
    heat = fig["data"][0]
    assert heat["x"] == ["256", "512", "1,024"] and heat["z"] == [[0.5, 0.45, 0.41]]  # counts as the table writes
    assert heat["hovertemplate"] == "%{y}<br>%{x} GPUs: MFU %{text}<extra></extra>"  # not "cluster.num_gpus 1024"
    assert fig["layout"]["height"] >= 300  # one row: room for the colour bar's labels


def test_a_heatmap_over_precisions_says_each_mfu_is_against_its_own_peak():
    # An fp8 scenario's MFU is against the FP8 peak: the sweep's fastest scenario read 33.8% beside bf16's 51.1%.
    rows = [{**row(256, "IB", days, mfu), **labelled({"cluster.num_gpus": 256, "training.precision": precision})}
            for precision, days, mfu in (("bf16", 10.0, 0.511), ("fp8", 7.8, 0.338))]
    title = mfu_heatmap(rows, ["cluster.num_gpus", "training.precision"])["layout"]["title"]["text"]
    assert title.endswith("<br><span style='font-size:12px'>each against its precision's peak (FP8's for fp8, twice "
                          "BF16's): compare precisions by time to train, not by MFU</span>")


def test_an_inline_axis_value_is_labelled_by_its_name_not_as_python_text():
    node = {"name": "6g", "gpus": 6, "nvlink_gbytes_per_s": 900}
    rows = [{**row(256, "IB", 40.0, 0.5), **labelled({"cluster.num_gpus": 256, "cluster.node": node},
                                                     {"cluster.node": "6g"})},
            {**row(256, "IB", 30.0, 0.5), **labelled({"cluster.num_gpus": 256, "cluster.node": {"gpus": 4}})},
            {**row(256, "IB", 30.0, 0.5), **labelled({"cluster.num_gpus": 256,
                                                      "cluster.node": {"name": "DGX H100", "nics": 4}},
                                                     {"cluster.node": "DGX H100 (modified)"})}]
    heat = mfu_heatmap(rows, ["cluster.num_gpus", "cluster.node"])["data"][0]
    assert heat["y"] == ["6g", '{"gpus": 4}', "DGX H100 (modified)"]  # an inline value by the engine's name


def test_a_legend_names_each_value_that_is_not_a_catalog_name_by_its_field():
    # "80, 80" (memory 80 GiB, 80 layers) said nothing; a catalog name says what it is.
    axes = ["cluster.num_gpus", "cluster.gpu", "cluster.gpu.memory_gib", "model.layers"]
    rows = [{**row(n, "IB", 40.0 / n, 0.5), **labelled({"cluster.num_gpus": n, "cluster.gpu": "H100 SXM5 80GB",
                                                         "cluster.gpu.memory_gib": 80, "model.layers": 80})}
            for n in (256, 512)]
    (line, _ideal) = time_vs_gpus(rows, axes)["data"]
    assert line["name"] == "H100 SXM5 80GB, memory_gib 80, layers 80"


def test_a_one_axis_heatmap_is_titled_by_its_axis():
    rows = [{**row(256, "IB", 40.0, 0.5), **labelled({"cluster.fabric": "IB"})},
            {**row(256, "RoCE", 41.0, 0.49), **labelled({"cluster.fabric": "RoCE"})}]
    fig = mfu_heatmap(rows, ["cluster.fabric"])
    assert fig["layout"]["title"]["text"] == "MFU of each scenario's best layout, by cluster.fabric"  # not "; — down"


def test_nothing_finished_draws_nothing():
    empty = [row(256, "IB", None, None)]
    assert sweep_figures(empty, AXES, None) == {}
    assert set(sweep_figures(ROWS, AXES, None)) == {"time-vs-gpus", "cost-vs-time", "mfu-heatmap"}
