"""Plotly figures for the plan page, built from the stored answer as plain dicts ({"data", "layout"}).

The template hands them to the browser with `json_script`; static/webui/plan.js draws them. Every builder
reads the answer defensively (`.get` with a default) and returns None when it has nothing to draw, so an
answer from an older or newer engine still renders.
"""
from __future__ import annotations

import html
import math
from collections import Counter
from typing import Any

from plotly.colors import qualitative

from planner.placement import FABRIC_NAMES

Figure = dict[str, Any]

TIME_PARTS = ("compute", "bubble", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "offload", "optimizer")
TIME_LABELS = {"compute": "compute", "bubble": "pipeline bubble", "tp_comm": "TP comm", "cp_comm": "CP comm",
               "ep_comm": "EP comm (all-to-all)", "pp_comm": "PP comm", "dp_comm": "DP comm",
               "offload": "activation offload (host link)", "optimizer": "optimizer step"}
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other")
FABRIC_COLOURS = {"nvlink": "#76b900", "infiniband": "#1f5fa8", "roce": "#8e44ad", "ethernet": "#b35900",
                  "efa": "#d35400", "pcie": "#7f8c8d"}
# A collective's fabrics (time_by_fabric_s keys: the fabric kinds, NVLink and PCIe) as the pages name them.
FABRIC_LABELS = {"nvlink": "NVLink", "pcie": "PCIe", **FABRIC_NAMES}
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
           "#9d755d", "#bab0ac")
# One colour per part of the step time on every page (plan, compare), whichever parts a chart shows: red had been
# CP on one plan's page and PP on another's, as each chart coloured the parts it had in turn.
TIME_COLOURS = dict(zip(TIME_PARTS, PALETTE))
MAX_PLANS_CHARTED = 10
MAX_LABELLED_CELLS = 256  # past this, cell labels are unreadable; hover still tells
MAX_SLOT_TICKS = 36  # slot labels along a placement map's x axis (a 72-GPU NVL72 tray set: every second one)


LEGEND_GAP_PX = 62  # below the plot area: the x tick labels and the x-axis title (Plotly's default fonts)
LEGEND_ROW_PX = 21  # one row of a horizontal legend (Plotly's default 12 px font)
LEGEND_PER_ROW = 3  # entries one row holds in the narrowest chart the pages are read in (about 640 px)
DEFAULT_HEIGHT_PX = 450  # Plotly's figure height when the layout sets none


def log_axis(title: str, values: list[float], exact: bool = False, **extra: Any) -> dict[str, Any]:
    """A log axis labelled in whole numbers at 1-2-5 steps (50, 100, 200, 500 days) spanning `values`.
    Plotly's own log ticks label the steps between powers of ten by their first digit only ("2, 5, 100, 2"),
    which reads as a different scale. With `exact`, the values themselves are the ticks (GPU counts)."""
    positive = sorted({float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0})
    axis = {"title": {"text": title}, "type": "log", **extra}
    if not positive:
        return axis
    if exact and len(positive) <= 12:
        ticks = positive
    else:
        lo, hi = positive[0], positive[-1]
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        for steps in ((1, 2, 5), (1, 2, 3, 5, 7), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):  # finer until 3 labels show
            ticks = [m * 10.0 ** k for k in decades for m in steps if lo <= m * 10.0 ** k <= hi]
            if len(ticks) >= 3:
                break
    return axis | {"tickvals": ticks, "ticktext": [_tick_text(t) for t in ticks]}


def _tick_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    """The common layout; `legend_below` places the legend once the figure's traces are known."""
    return {"title": {"text": title, "x": 0, "font": {"size": 15}}, "margin": {"l": 60, "r": 20, "t": 70, "b": 50},
            "hovermode": "closest", **extra}


def legend_below(fig: Figure) -> Figure:
    """Put the legend under the x-axis title, with its rows in a bottom margin of their own.

    Plotly places a legend in fractions of the plot area's height, and widens a margin too small for it by
    shrinking the plot area (automargin), which moves a legend placed in pixels turned into a fraction up onto
    the axis title. So the margin is sized for the rows first (LEGEND_PER_ROW entries a row, rounded up), the
    figure grows by as much, and the fraction is taken of a plot area that no longer changes."""
    layout = fig["layout"]
    shown = [t for t in fig["data"] if t.get("name") and t.get("showlegend", True) and t.get("type") != "heatmap"]
    entries = len({t.get("legendgroup") or t["name"] for t in shown})
    if layout.get("showlegend") is False or (entries < 2 and not layout.get("showlegend")):
        return fig  # Plotly draws no legend for a single trace unless asked to
    rows = -(-entries // LEGEND_PER_ROW)
    margin = layout["margin"]
    grow = max(0, LEGEND_GAP_PX + rows * LEGEND_ROW_PX - margin["b"])
    height = layout.get("height", DEFAULT_HEIGHT_PX) + grow
    margin["b"] += grow
    plot_px = height - margin["t"] - margin["b"]
    layout.update(height=height, legend={"orientation": "h", "yanchor": "top", "y": -LEGEND_GAP_PX / plot_px})
    return fig


def _plans(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in (result.get("plans") or [])[:MAX_PLANS_CHARTED] if isinstance(p, dict)]


def fabric_label(kind: str) -> str:
    return FABRIC_LABELS.get(kind, kind)


def plotly_text(text: Any) -> str:
    """Text for a Plotly label, title or legend, its markup escaped: Plotly reads <br>, <b> and <a href> in
    them, so a model named '<a href="...">' was a live link in a shared compare or sweep page (Plotly shows
    &lt; and &amp; as the characters)."""
    return html.escape(str(text), quote=False)


def _plan_label(p: dict[str, Any]) -> str:
    return plotly_text(f"#{p.get('rank', '?')} {p.get('label', '')}".strip())


def step_time_breakdown(result: dict[str, Any]) -> Figure | None:
    """Stacked bars: where each top plan's step time goes (exposed time on the critical path)."""
    plans = _plans(result)
    if not plans:
        return None
    labels = [_plan_label(p) for p in plans]
    # Parts no plan spends time on (activation offloading, say, where the plan offloads nothing) get no bar.
    seen = [k for p in plans for k, v in (p.get("time_s") or {}).items() if v]
    parts = [k for k in TIME_PARTS if k in seen] + sorted(set(seen) - set(TIME_PARTS))
    data = [{"type": "bar", "orientation": "h", "name": TIME_LABELS.get(part, part), "y": labels,
             "x": [(p.get("time_s") or {}).get(part, 0) or 0 for p in plans],
             "marker": {"color": TIME_COLOURS.get(part, PALETTE[-1])},
             "hovertemplate": "%{y}<br>" + TIME_LABELS.get(part, part) + ": %{x:.4r} s<extra></extra>"}
            for part in parts]
    return {"data": data, "layout": _layout(
        "Step time breakdown, top plans", barmode="stack", height=140 + 32 * len(plans),
        xaxis={"title": {"text": "seconds per step"}}, yaxis={"autorange": "reversed", "automargin": True})}


def comm_by_fabric(result: dict[str, Any]) -> Figure | None:
    """The best plan's collectives: time per step split by the fabric it crosses, exposed time marked."""
    plans = _plans(result)
    comm = [c for c in (plans[0].get("comm") or []) if isinstance(c, dict)] if plans else []
    if not comm:
        return None
    names: list[str] = []
    for c in comm:
        name = f"{str(c.get('group', '?')).upper()} {str(c.get('collective', '')).replace('_', '-')}"
        if c.get("over") and c.get("over") != c.get("group"):
            name += f" (over {str(c['over']).upper()} ranks)"
        names.append(name if name not in names else f"{name} ({names.count(name) + 1})")
    by_fabric = [c.get("time_by_fabric_s") or {c.get("fabric", "unknown"): c.get("time_s", 0)} for c in comm]
    fabrics = list(dict.fromkeys(k for split in by_fabric for k in split))
    data: list[dict[str, Any]] = [
        {"type": "bar", "orientation": "h", "name": fabric_label(fabric), "y": names,
         "x": [split.get(fabric, 0) or 0 for split in by_fabric],
         "marker": {"color": FABRIC_COLOURS.get(fabric, PALETTE[i % len(PALETTE)])},
         "hovertemplate": "%{y} over " + fabric_label(fabric) + ": %{x:,.3~r} s<extra></extra>"}
        for i, fabric in enumerate(fabrics)]
    data.append({"type": "scatter", "mode": "markers", "name": "exposed (not overlapped)", "y": names,
                 "x": [c.get("exposed_s", 0) or 0 for c in comm],
                 "marker": {"symbol": "diamond", "size": 10, "color": "#222"},
                 "hovertemplate": "%{y}: %{x:,.3~r} s exposed<extra></extra>"})
    return {"data": data, "layout": _layout(
        f"Communication per collective by fabric, {plans[0].get('label', 'best plan')}", barmode="stack",
        height=140 + 34 * len(names), xaxis={"title": {"text": "seconds per step"}},
        yaxis={"autorange": "reversed", "automargin": True})}


def memory_breakdown(result: dict[str, Any]) -> Figure | None:
    """Stacked bars of memory per GPU for the top plans, against the GPU's capacity."""
    plans = [p for p in _plans(result) if isinstance(p.get("memory_gib"), dict)]
    if not plans:
        return None
    labels = [_plan_label(p) for p in plans]
    data = [{"type": "bar", "orientation": "h", "name": part, "y": labels,
             "x": [p["memory_gib"].get(part, 0) or 0 for p in plans], "marker": {"color": PALETTE[i % len(PALETTE)]},
             "hovertemplate": "%{y}<br>" + part + ": %{x:.1f} GiB<extra></extra>"}
            for i, part in enumerate(MEMORY_PARTS)]
    layout = _layout("Memory per GPU against capacity, top plans", barmode="stack", height=160 + 32 * len(plans),
                     xaxis={"title": {"text": "GiB per GPU"}}, yaxis={"autorange": "reversed", "automargin": True})
    capacities = [p["memory_gib"].get("capacity") or _gpu_memory(result) for p in plans]
    known = {c for c in capacities if c}
    if len(known) > 1:
        # Bars of different GPUs (the compare page): each its own capacity, a tick on its bar. One line, the
        # first bar's, made a 180 GiB B200 bar look as if it overflowed an H100's 80.
        data.append({"type": "scatter", "mode": "markers", "name": "capacity", "y": labels, "x": capacities,
                     "marker": {"symbol": "line-ns-open", "size": 26, "line": {"width": 3, "color": "#c0392b"}},
                     "hovertemplate": "%{y}<br>capacity %{x:g} GiB<extra></extra>"})
        return {"data": data, "layout": layout}
    capacity = next(iter(known), None)
    if capacity:
        layout["shapes"] = [{"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": capacity, "x1": capacity,
                             "line": {"color": "#c0392b", "dash": "dash", "width": 2}}]
        layout["annotations"] = [{"yref": "paper", "y": 1, "x": capacity, "xanchor": "right", "yanchor": "bottom",
                                  "text": f"capacity {capacity:g} GiB", "showarrow": False,
                                  "font": {"color": "#c0392b"}}]
    return {"data": data, "layout": layout}


def _gpu_memory(result: dict[str, Any]) -> float | None:
    return (((result.get("spec") or {}).get("cluster") or {}).get("gpu") or {}).get("memory_gib")


def placement_map(result: dict[str, Any]) -> Figure | None:
    """Physical GPUs by node (rows) and slot (columns), coloured by pipeline stage, NVLink domains outlined."""
    pm = result.get("placement_map") or {}
    cells = [c for c in (pm.get("cells") or []) if isinstance(c, dict) and "gpu" in c]
    per_node = int(pm.get("gpus_per_node") or 0) or max((c["gpu"] for c in cells), default=0) + 1
    if not cells or per_node < 1:
        return None
    # The engine may show a sample of nodes (the first nodes of a few pipeline stages): one row per node shown.
    node_of = {id(c): int(c.get("node", c["gpu"] // per_node)) for c in cells}
    nodes = sorted(set(node_of.values()))
    # Nodes left out between two shown (the next pipeline stage starts further on) get an empty row that says so:
    # rows of nodes 35 and 54 side by side read as neighbours.
    rows: list[str] = []
    row_of: dict[int, int] = {}
    for before, node in zip([None, *nodes], nodes):
        if before is not None and node > before + 1:
            rows.append(f"node {before + 1} not shown" if node == before + 2
                        else f"nodes {before + 1}-{node - 1} not shown")
        row_of[node] = len(rows)
        rows.append(f"node {node}")
    z: list[list[Any]] = [[None] * per_node for _ in rows]
    text = [[""] * per_node for _ in rows]
    hover = [[""] * per_node for _ in rows]
    domains: dict[Any, list[int]] = {}
    with_cp = any(c.get("cp") for c in cells)  # with CP > 1, TP and DP ranks alone repeat within a node
    for c in cells:
        row, col = row_of[node_of[id(c)]], int(c["gpu"]) % per_node
        z[row][col] = c.get("pp", 0)
        cp = f" CP{c.get('cp', '?')}" if with_cp else ""
        text[row][col] = f"TP{c.get('tp', '?')}{cp} DP{c.get('dp', '?')}"
        hover[row][col] = "<br>".join(f"{k}: {c[k]}" for k in ("gpu", "node", "rank", "domain", "tp", "cp", "dp",
                                                              "pp", "ep") if k in c)
        box = domains.setdefault(c.get("domain", row), [row, row, col, col])
        box[:] = [min(box[0], row), max(box[1], row), min(box[2], col), max(box[3], col)]
    stages = max(int(c.get("pp", 0) or 0) for c in cells) + 1
    colourscale = []
    for s in range(stages):
        colour = distinct_colour(s, stages)
        colourscale += [[s / stages, colour], [(s + 1) / stages, colour]]
    heatmap: dict[str, Any] = {
        "type": "heatmap", "z": z, "zmin": -0.5, "zmax": stages - 0.5, "colorscale": colourscale,
        "x": list(range(per_node)), "y": rows,
        "customdata": hover, "hovertemplate": "%{customdata}<extra></extra>", "xgap": 2, "ygap": 2,
        "colorbar": {"title": {"text": "PP stage"}}}
    labelled = len(cells) <= MAX_LABELLED_CELLS
    if labelled:
        heatmap.update(text=text, texttemplate="%{text}", textfont={"size": 10})
    if stages <= 32:
        heatmap["colorbar"]["tickvals"] = list(range(stages))
    data = [heatmap]
    shapes = [{"type": "rect", "x0": b[2] - 0.5, "x1": b[3] + 0.5, "y0": b[0] - 0.5, "y1": b[1] + 0.5,
               "line": {"color": "#111", "width": 3}, "fillcolor": "rgba(0,0,0,0)"} for b in domains.values()]
    shown, total = pm.get("gpus_shown", len(cells)), pm.get("gpus_total", len(cells))
    title = "Placement of the best plan"
    if total and shown and shown < total:
        title += f" ({shown:,} of {total:,} GPUs shown: {_shown_part(result, cells, total)})"
    title += ("<br><span style='font-size:12px'>GPUs by node; NVLink domains outlined; colour = pipeline stage; "
              + ("label = rank in its TP group and DP replica" if labelled else "hover a GPU for its ranks")
              + "</span>")
    # Tall enough for the colour bar's stage labels too (16 px each): a map of two 72-GPU nodes in nine stages
    # was 60 px high, and its labels 0-8 printed over each other.
    plot_px = max(30 * len(rows), 16 * min(stages, 32))
    return {"data": data, "layout": _layout(
        title, height=min(2000, 140 + plot_px), shapes=shapes,
        # A tick a slot up to MAX_SLOT_TICKS slots: Plotly lays out every tick label, and a tick for each of 1,024
        # slots took 7 s to draw (growing with the square of the slots), freezing the page.
        xaxis={"title": {"text": "GPU slot in node"}, "dtick": max(1, -(-per_node // MAX_SLOT_TICKS))},
        yaxis={"autorange": "reversed", "type": "category", "automargin": True})}


def distinct_colour(i: int, n: int) -> str:
    """Colour `i` of `n` that must all differ (pipeline stages, a sweep's series): the palette's colours while they
    last, then Plotly's 24 qualitative "Dark24" colours (stages 0 and 10 were both blue); past 24, hues spread by
    the golden ratio at three lightnesses, so that no two share a colour and neighbours differ."""
    if n <= len(PALETTE):
        return PALETTE[i]
    if n <= len(qualitative.Dark24):
        return qualitative.Dark24[i]
    return f"hsl({round(i * 222.4922) % 360}, 62%, {52 + 8 * (i % 3) - 8}%)"


def _shown_part(result: dict[str, Any], cells: list[dict[str, Any]], total: int) -> str:
    """Which GPUs of `total` a sampled map holds (planner.placement._shown_gpus: the first whole nodes of up to four
    pipeline stages, then the nodes after them): "the first 64 of each of the 4 pipeline stages", "all of pipeline
    stages 0-7 of 16"."""
    plans = result.get("plans") or [{}]
    pp = int(((plans[0] if isinstance(plans[0], dict) else {}).get("layout") or {}).get("pp") or 1)
    if pp <= 1:
        return f"the first {len(cells):,}"
    per_stage = Counter(int(c.get("pp") or 0) for c in cells)
    stages = sorted(per_stage)
    if len(stages) == pp:
        which = f"each of the {pp} pipeline stages"
    elif stages == list(range(stages[0], stages[-1] + 1)):
        which = f"pipeline stages {stages[0]}-{stages[-1]} of {pp}"
    else:
        which = f"pipeline stages {', '.join(map(str, stages))} of {pp}"
    counts = set(per_stage.values())
    if counts == {int(total) // pp}:
        return f"all of {which}"
    return f"the first {counts.pop():,} of {which}" if len(counts) == 1 else f"the first GPUs of {which}"


def candidates_scatter(result: dict[str, Any]) -> Figure | None:
    """Every feasible layout by step time and memory; the Pareto front joined; the best plan starred."""
    points = [c for c in (result.get("candidates") or []) if isinstance(c, dict)
              and c.get("step_time_s") is not None and c.get("memory_gib") is not None]
    if not points:
        return None
    front = sorted((c for c in points if c.get("pareto")), key=lambda c: c["step_time_s"])
    rest = [c for c in points if not c.get("pareto")]

    def trace(name: str, items: list[dict[str, Any]], **style: Any) -> dict[str, Any]:
        return {"type": "scatter", "name": name, "x": [c["step_time_s"] for c in items],
                "y": [c["memory_gib"] for c in items], "text": [c.get("label", "") for c in items],
                "hovertemplate": "%{text}<br>%{x:.4r} s per step, %{y:.1f} GiB<extra></extra>", **style}

    data = [trace("feasible layouts", rest, mode="markers", marker={"color": "#9aa5b1", "size": 6, "opacity": 0.6}),
            trace("Pareto front", front, mode="lines+markers", marker={"color": "#e45756", "size": 8},
                  line={"color": "#e45756"})]
    plans = _plans(result)
    if plans and plans[0].get("step_time_s") is not None:
        best = plans[0]
        mem = (best.get("memory_gib") or {}).get("total")
        if mem is not None:
            data.append({"type": "scatter", "mode": "markers", "name": "best plan", "x": [best["step_time_s"]],
                         "y": [mem], "text": [best.get("label", "")], "marker": {"symbol": "star", "size": 16,
                                                                                "color": "#f58518"},
                         # with its figures, as every other point has them (its label alone had)
                         "hovertemplate": "best: %{text}<br>%{x:.4r} s per step, %{y:.1f} GiB<extra></extra>"})
    feasible = result.get("feasible")
    # The answer carries the front and an even sample of the rest (report.chart_candidates): say which.
    shown = (f"the Pareto front and a sample, {len(points):,} of {feasible:,} feasible layouts"
             if isinstance(feasible, int) and feasible > len(points) else f"{len(points):,} feasible layouts")
    return {"data": data, "layout": _layout(
        f"Candidates: step time against memory ({shown})", height=460,
        xaxis=log_axis("seconds per step", [c["step_time_s"] for c in points]),
        yaxis={"title": {"text": "GiB per GPU"}})}


def plan_figures(result: dict[str, Any] | None) -> dict[str, Figure]:
    """{chart id: figure} for every chart the answer has data for, in page order."""
    if not isinstance(result, dict):
        return {}
    builders = {"step-time": step_time_breakdown, "comm": comm_by_fabric, "memory": memory_breakdown,
                "placement": placement_map, "candidates": candidates_scatter}
    figures = {name: build(result) for name, build in builders.items()}
    return {name: legend_below(fig) for name, fig in figures.items() if fig is not None}
