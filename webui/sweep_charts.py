"""Plotly figures for the sweep page, built from the scenario rows (webui.sweeps.sweep_rows) as plain dicts.

Like webui/charts.py, each builder returns None when it has nothing to draw (no finished scenario yet, no
token count for a time to train), and the page draws the rest.
"""
from __future__ import annotations

from typing import Any

from planner.whatif.goal import pareto_front
from planner.whatif.sweep import CATALOG_PATHS

from .charts import Figure, _layout, distinct_colour, legend_below, log_axis, plotly_text

GPUS = "cluster.num_gpus"


def _series_key(row: dict[str, Any], axes: list[str], skip: str) -> str:
    """The scenario's values on every axis but `skip`, as a legend label: a catalog name as it is, any other value
    after its field's name ("H100 SXM5 80GB, memory_gib 80, layers 80"; "80, 80" said nothing)."""
    parts = [_labelled(row, a) for a in axes if a != skip]
    return ", ".join(parts) or "all scenarios"


def _gpu_count(row: dict[str, Any], axis: str) -> str | None:
    """A scenario's GPU count as the table writes it ("1,024"), where `axis` is the GPU count; else None."""
    value = row.get("values", {}).get(axis)
    return f"{value:,}" if axis == GPUS and isinstance(value, int) and not isinstance(value, bool) else None


def _labelled(row: dict[str, Any], axis: str) -> str:
    if (gpus := _gpu_count(row, axis)) is not None:
        return f"{gpus} GPUs"  # not "num_gpus 1024" beside the table's 1,024
    label = plotly_text(row["labels"][axis])  # names come from requests: markup to Plotly
    return label if axis in CATALOG_PATHS else f"{axis.rsplit('.', 1)[-1]} {label}"


def time_vs_gpus(rows: list[dict[str, Any]], axes: list[str]) -> Figure | None:
    """Time to train against GPU count, one line per combination of the other axes (fabric, GPU type...),
    each with its ideal-scaling line: time × GPUs held at its smallest cluster's value."""
    done = [r for r in rows if r.get("time_to_train_days") and r.get("num_gpus")]
    if len({r["num_gpus"] for r in done}) < 2:
        return None
    series: dict[str, list[dict[str, Any]]] = {}
    for row in done:
        series.setdefault(_series_key(row, axes, GPUS), []).append(row)
    data = []
    for i, (name, items) in enumerate(series.items()):
        items.sort(key=lambda r: r["num_gpus"])
        colour = distinct_colour(i, len(series))  # twelve series had drawn two pairs alike
        gpus = [r["num_gpus"] for r in items]
        data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": gpus,
                     "y": [r["time_to_train_days"] for r in items], "marker": {"color": colour},
                     "text": [r.get("layout") or "" for r in items],
                     "hovertemplate": "%{x:,} GPUs: %{y:,.4~r} days<br>%{text}<extra>" + name + "</extra>"})
        n0, t0 = gpus[0], items[0]["time_to_train_days"]
        # Ideal (linear) scaling: time ∝ 1 / GPUs from the smallest cluster of the series.
        data.append({"type": "scatter", "mode": "lines", "name": f"ideal scaling ({name})", "x": gpus,
                     "y": [t0 * n0 / n for n in gpus], "line": {"color": colour, "dash": "dot", "width": 1},
                     "hoverinfo": "skip", "showlegend": i == 0 or len(series) <= 4})
    return {"data": data, "layout": _layout(
        "Time to train against GPU count (dotted: ideal scaling)", height=460,
        xaxis=log_axis("GPUs", [r["num_gpus"] for r in done], exact=True),
        yaxis=log_axis("days", [y for trace in data for y in trace["y"]]))}


def cost_vs_time(rows: list[dict[str, Any]], goal: dict[str, Any] | None) -> Figure | None:
    """Cost (or GPU-hours, where any scenario is unpriced) against time to train, the Pareto front joined,
    the goal's deadline marked."""
    done = [r for r in rows if r.get("time_to_train_days") and r.get("gpu_hours")]
    if not done:
        return None
    money = "cost" if all(r.get("cost") is not None for r in done) else "gpu_hours"
    title = "US dollars" if money == "cost" else "GPU-hours"
    unit = "USD" if money == "cost" else "GPU-hours"
    points = [(r["time_to_train_days"], r[money]) for r in done]
    front = [done[i] for i in pareto_front(points)]
    # The front first, as a line only, so that the scenarios' own markers (green where they meet the goal) lie
    # on top of it rather than under its markers.
    data = [{"type": "scatter", "mode": "lines", "name": "Pareto front",
             "x": [r["time_to_train_days"] for r in front], "y": [r[money] for r in front],
             "line": {"color": "#e45756"}, "hoverinfo": "skip"}]
    if len(front) == 1:  # a line of one point draws nothing: a ring around the one scenario on the front
        data[0].update(mode="markers", marker={"symbol": "circle-open", "size": 16, "color": "#e45756",
                                               "line": {"width": 2}})
    groups = ([("meets the goal", "#54a24b", [r for r in done if r.get("meets_goal")]),
               ("misses the goal", "#9aa5b1", [r for r in done if not r.get("meets_goal")])] if goal
              else [("scenarios", "#9aa5b1", done)])
    for name, colour, items in groups:
        if items:
            data.append({"type": "scatter", "mode": "markers", "name": name,
                         "x": [r["time_to_train_days"] for r in items], "y": [r[money] for r in items],
                         "text": [", ".join(_labelled(r, a) for a in r["labels"]) for r in items],
                         "marker": {"color": colour, "size": 9},
                         # whole dollars or GPU-hours with their unit, as the table writes them ("4.333e+6" was)
                         "hovertemplate": "%{text}<br>%{x:,.4~r} days, %{y:,.0f} " + unit + "<extra></extra>"})
    unpriced = sum(r.get("cost") is None for r in done)
    # Mixed: the chart cannot rank by cost, though the best (among priced scenarios) may be chosen by it.
    why = f" ({unpriced:,} of {len(done):,} scenarios have no GPU price)" if 0 < unpriced < len(done) else ""
    layout = _layout(f"{'Cost' if money == 'cost' else 'GPU-hours'} against time to train{why}",
                     height=460, xaxis={"title": {"text": "days"}, "rangemode": "tozero"},
                     yaxis={"title": {"text": title}, "rangemode": "tozero"})
    layout["shapes"], layout["annotations"] = [], []
    if goal and goal.get("deadline_days"):
        days = goal["deadline_days"]
        layout["shapes"].append({"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": days, "x1": days,
                                 "line": {"color": "#c0392b", "dash": "dash"}})
        # above the plot area, not across it: on a phone the label lay over the top y tick ("16M")
        layout["annotations"].append({"yref": "paper", "y": 1, "yanchor": "bottom", "x": days, "xref": "x",
                                      "showarrow": False, "text": f"deadline {days:g} days",
                                      "font": {"color": "#c0392b"}})
    if goal and goal.get("budget") and money == "cost":  # a budget is dollars: no line on a GPU-hours axis
        budget = goal["budget"]
        layout["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": budget, "y1": budget,
                                 "line": {"color": "#c0392b", "dash": "dot"}})
        layout["annotations"].append({"xref": "paper", "x": 1, "xanchor": "right", "yanchor": "bottom",
                                      "y": budget, "yref": "y", "showarrow": False,
                                      "text": f"budget {budget:,.0f} USD", "font": {"color": "#c0392b"}})
        top = max(y for _, y in points)
        if budget > top:  # above every scenario: the axis reaches it, or the line is off the chart
            layout["yaxis"]["range"] = [0, budget * 1.08]
    return {"data": data, "layout": layout}


def mfu_heatmap(rows: list[dict[str, Any]], axes: list[str]) -> Figure | None:
    """MFU over two axes: the GPU count (or the first axis) across, every other axis's combination down."""
    if not axes or not any(r.get("mfu") is not None for r in rows):
        return None
    across = GPUS if GPUS in axes else axes[0]
    # GPU counts left to right from the fewest, as the time chart's axis runs, whatever order they were listed in
    ordered = sorted(rows, key=lambda r: r["values"][across]) if across == GPUS and all(
        isinstance(r["values"].get(across), (int, float)) for r in rows) else rows
    def column(r: dict[str, Any]) -> str:
        return _gpu_count(r, across) or plotly_text(r["labels"][across])

    columns = list(dict.fromkeys(column(r) for r in ordered))
    lines = list(dict.fromkeys(_series_key(r, axes, across) for r in rows))
    z: list[list[float | None]] = [[None] * len(columns) for _ in lines]
    text = [[""] * len(columns) for _ in lines]
    for r in rows:
        y, x = lines.index(_series_key(r, axes, across)), columns.index(column(r))
        if r.get("mfu") is not None:
            z[y][x] = r["mfu"]
            text[y][x] = f"{r['mfu'] * 100:.1f}%"
    down = ", ".join(a for a in axes if a != across)
    # Both ends fixed (Plotly rescales to the data unless zmin and zmax are both given): 0 to the best MFU, so
    # 51.7% and 51.9% look alike rather than at the two ends of the scale.
    top = max(r["mfu"] for r in rows if r.get("mfu") is not None)
    title = (f"MFU of each scenario's best layout ({across} across; {down} down)" if down
             else f"MFU of each scenario's best layout, by {across}")
    if len({r["values"].get("training.precision") for r in rows if r.get("mfu") is not None}) > 1:
        # An fp8 scenario's MFU is against the FP8 peak, twice BF16's: the faster scenario may read the lower MFU.
        title += ("<br><span style='font-size:12px'>each against its precision's peak (FP8's for fp8, twice "
                  "BF16's): compare precisions by time to train, not by MFU</span>")
    return {"data": [{"type": "heatmap", "z": z, "x": columns, "y": lines, "text": text, "texttemplate": "%{text}",
                      "colorscale": "Viridis", "zmin": 0, "zmax": top, "zauto": False,
                      "colorbar": {"title": {"text": "MFU"}, "tickformat": ".0%"},
                      "hovertemplate": "%{y}<br>" + ("%{x} GPUs" if across == GPUS else across + " %{x}")
                                       + ": MFU %{text}<extra></extra>", "xgap": 2, "ygap": 2}],
            # room for the colour bar's labels where there are few rows (one row squashed 0% to 40% together)
            "layout": _layout(title, height=max(300, 160 + 36 * len(lines)),
                              xaxis={"title": {"text": across}, "type": "category"},
                              yaxis={"type": "category", "automargin": True})}


def sweep_figures(rows: list[dict[str, Any]], axes: list[str], goal: dict[str, Any] | None) -> dict[str, Figure]:
    """{chart id: figure} for every chart the finished scenarios have data for, in page order."""
    figures = {"time-vs-gpus": time_vs_gpus(rows, axes), "cost-vs-time": cost_vs_time(rows, goal),
               "mfu-heatmap": mfu_heatmap(rows, axes)}
    return {name: legend_below(fig) for name, fig in figures.items() if fig is not None}
