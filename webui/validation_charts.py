"""Plotly figures for the /validation/ page, built from the validation snapshot (planner/data/validation.json).

Same conventions as charts.py: plain {"data", "layout"} dicts passed with `json_script`, None when there is
nothing to draw; static/webui/charts.js draws them.
"""
from __future__ import annotations

import math
from typing import Any

from .charts import PALETTE, Figure, _layout, legend_below, log_axis

BAND = 0.10  # the ±10% band of the scatter, the `within_10pct` figure
SHAPES = ("circle", "square", "diamond", "triangle-up")  # Plotly marker symbols, each with an "-open" variant


def _modelled(validation: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in validation.get("rows") or [] if isinstance(r, dict)
            and r.get("measured_s") and r.get("predicted_s") and r.get("err") is not None]


def predicted_vs_measured(validation: dict[str, Any]) -> Figure | None:
    """Each modelled run: published step time across, predicted up, log axes; y = x and the ±10% band;
    one colour (and shape) per group, held-out runs as open markers."""
    rows = _modelled(validation)
    if not rows:
        return None
    low = min(min(r["measured_s"], r["predicted_s"]) for r in rows) / 1.5
    high = max(max(r["measured_s"], r["predicted_s"]) for r in rows) * 1.5
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "x": [low, high, high, low], "y": [low * (1 - BAND), high * (1 - BAND),
         high * (1 + BAND), low * (1 + BAND)], "fill": "toself", "fillcolor": "rgba(84,162,75,0.12)",
         "line": {"width": 0}, "name": "±10%", "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines", "x": [low, high], "y": [low, high], "name": "predicted = published",
         "line": {"color": "#555", "dash": "dash", "width": 1}, "hoverinfo": "skip"}]
    groups = sorted({r["group"] for r in rows})
    for i, group in enumerate(groups):
        # Fitted rows first: the legend shows a group's first marker, which must not look held out.
        mine = sorted((r for r in rows if r["group"] == group), key=lambda r: bool(r.get("holdout")))
        # Past the palette's colours (12 groups, 10 colours) a group takes the next shape, so none look alike.
        shape = SHAPES[i // len(PALETTE) % len(SHAPES)]
        data.append({
            "type": "scatter", "mode": "markers", "name": group,
            "x": [r["measured_s"] for r in mine], "y": [r["predicted_s"] for r in mine],
            "customdata": [[r["id"], r["group"], f"{r['generation']} {r['precision']}", r.get("gpus") or "",
                            r["err"], " (held out)" if r.get("holdout") else ""] for r in mine],
            "marker": {"color": PALETTE[i % len(PALETTE)], "size": 8,
                       "symbol": [shape + "-open" if r.get("holdout") else shape for r in mine]},
            "hovertemplate": ("%{customdata[0]}%{customdata[5]}<br>%{customdata[1]}<br>%{customdata[2]}, "
                              "%{customdata[3]} GPUs<br>published %{x:.3g} s, predicted %{y:.3g} s "
                              "(%{customdata[4]:+.1%})<extra></extra>")})
    span = [math.log10(low), math.log10(high)]  # log axes take their range in decades; equal ranges keep y = x
    return {"data": data, "layout": _layout(
        f"Predicted against published step time ({len(rows)} runs; open markers: held out of every fit)",
        height=620, xaxis=log_axis("published seconds per step", [low, high], range=span),
        yaxis=log_axis("predicted seconds per step", [low, high], range=span))}


def error_by(validation: dict[str, Any], key: str, title: str) -> Figure | None:
    """Signed error of every modelled run, one box per value of `key` (each point drawn), ±10% marked."""
    rows = _modelled(validation)
    if not rows:
        return None
    names = sorted({_key(r, key) for r in rows})
    data = []
    for i, name in enumerate(names):
        mine = [r for r in rows if _key(r, key) == name]
        data.append({"type": "box", "name": f"{name} ({len(mine)})", "y": [r["err"] for r in mine],
                     "text": [r["id"] for r in mine], "boxpoints": "all", "jitter": 0.4, "pointpos": 0,
                     "marker": {"color": PALETTE[i % len(PALETTE)], "size": 5},
                     "hovertemplate": "%{text}: %{y:+.1%}<extra></extra>"})
    shapes = [{"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": -BAND, "y1": BAND,
               "fillcolor": "rgba(84,162,75,0.12)", "line": {"width": 0}, "layer": "below"}]
    return {"data": data, "layout": _layout(
        title, height=460, showlegend=False, shapes=shapes,
        yaxis={"title": {"text": "predicted / published - 1"}, "tickformat": "+.0%", "zeroline": True},
        xaxis={"automargin": True})}


def _key(row: dict[str, Any], key: str) -> str:
    return f"{row['generation']} {row['precision']}" if key == "cohort" else str(row.get(key))


def validation_figures(validation: dict[str, Any] | None) -> dict[str, Figure]:
    """{chart id: figure} for the page, in page order; empty without a snapshot."""
    if not isinstance(validation, dict):
        return {}
    figures = {"scatter": predicted_vs_measured(validation),
               "by-group": error_by(validation, "group", "Error by group of published runs"),
               "by-cohort": error_by(validation, "cohort", "Error by GPU generation and precision")}
    return {name: legend_below(fig) for name, fig in figures.items() if fig is not None}
