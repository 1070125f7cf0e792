"""Plans side by side: the same rows for 2 to 4 plans, each row marked when the plans differ on it.

Rows are read from each plan's stored answer (its best layout) with `.get` and defaults, so a pending or
failed plan, or one with no feasible layout, shows dashes instead of breaking the page (but its GPU's memory
capacity, which its spec gives).
"""
from __future__ import annotations

import re
import uuid
from typing import Any, Callable

from planner.spec import SECTIONS
from planner.units import durations, finite_number, significant
from planner.whatif.goal import outcome

from .charts import (MEMORY_PARTS, TIME_LABELS, TIME_PARTS, Figure, fabric_label, legend_below, memory_breakdown,
                     plotly_text, step_time_breakdown)
from .forms import field_label
from .models import Plan, SweepScenario
from .templatetags.planner_format import count, percent

MIN_PLANS, MAX_PLANS = 2, 4
IN_TITLE = ("model", "GPUs", "GPU")  # the request rows a plan's title names (Plan.title)
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp", "recompute", "recompute_fraction",
               "sequence_parallel", "zero", "rank_order")


class CompareError(ValueError):
    """A request the compare page cannot answer; `status` is 400 (bad list) or 404 (no such plan)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def compare_codes(values: list[str]) -> list[uuid.UUID]:
    """Plan codes from ?plans=A,B (or repeated ?plans=), each a code or a plan's link; 2 to 4, distinct."""
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    codes: list[uuid.UUID] = []
    for item in items:
        found = _UUID.search(item)
        if found is None:
            raise CompareError(f"plans: {item[:80]!r} is not a plan code (a UUID, or a plan's link)")
        code = uuid.UUID(found.group(0))
        if code not in codes:
            codes.append(code)
    if not MIN_PLANS <= len(codes) <= MAX_PLANS:
        raise CompareError(f"plans: give {MIN_PLANS} to {MAX_PLANS} different plan codes, separated by commas "
                           f"(got {len(codes)})")
    return codes


def compare_plans(*, codes: list[uuid.UUID]) -> list[Plan]:
    """The plans in the order asked; CompareError (404) naming any code with no plan."""
    found = {plan.code: plan for plan in Plan.objects.filter(code__in=codes)}
    missing = [str(code) for code in codes if code not in found]
    if missing:
        raise CompareError(f"plans: no plan with the code {', '.join(missing)}", status=404)
    return [found[code] for code in codes]


def compare_sections(*, plans: list[Plan]) -> list[dict[str, Any]]:
    """[{"title", "rows": [{"label", "cells", "differs"}]}] for the compare page, in reading order."""
    bests = [_best(plan) or _unplaced(plan) for plan in plans]
    # A plan of a priced sweep costs its GPU-hours at the price its sweep was made with (as the sweep's table);
    # a plan asked for alone has no price, the catalog's having been set or changed after it.
    prices = dict(SweepScenario.objects.filter(plan__in=plans).values_list("plan_id", "price_per_gpu_hour_usd"))
    bests = [dict(b, cost_usd=_cost(plan, b, prices.get(plan.pk))) for plan, b in zip(plans, bests)]
    priced = any(b["cost_usd"] is not None for b in bests)
    sections = [
        ("Request", _request_rows(plans)),
        ("Best layout", [(key, lambda b, k=key: (b.get("layout") or {}).get(k)) for key in LAYOUT_KEYS]),
        ("Throughput and time to train", _throughput_rows()
         + ([("cost (USD, at its sweep's price per GPU-hour)", lambda b: b["cost_usd"])] if priced else [])),
        # Seconds to four significant digits and GiB to a tenth, as the plan page writes them ("3.7" beside its
        # 3.704 s, "3.37e-05", and "174" beside its 173.7 GiB)
        ("Step time breakdown (exposed s per step)",
         [(TIME_LABELS.get(p, p), lambda b, p=p: (b.get("time_s") or {}).get(p), _seconds)
          for p in _time_parts(bests)]),
        ("Communication by fabric (total s per step, overlapped included)",
         [(fabric_label(f), lambda b, f=f: _comm_by(b, "fabric").get(f), _seconds) for f in _keys(bests, "fabric")]),
        ("Communication by collective (total s per step, overlapped included)",
         [(c, lambda b, c=c: _comm_by(b, "collective").get(c), _seconds) for c in _keys(bests, "collective")]),
        ("Memory per GPU (GiB)",
         [(m, lambda b, m=m: (b.get("memory_gib") or {}).get(m), _gib) for m in (*MEMORY_PARTS, "total", "capacity")]),
    ]
    return [{"title": title, "rows": _table(rows, plans if title == "Request" else bests)}
            for title, rows in sections]


def _cost(plan: Plan, best: dict[str, Any], price: Any) -> float | None:
    """USD, as the sweep's table has it (planner.whatif.goal.outcome, from the unrounded step time: the rounded
    GPU-hours times the price came out 20 USD apart), or None without a price or a layout."""
    batch, seq_len = _spec_at(plan, "training", "global_batch"), _spec_at(plan, "model", "seq_len")
    if not all(finite_number(v) for v in (price, best.get("step_time_s"), batch, seq_len)):
        return None
    return outcome(step_time_s=best["step_time_s"], tokens_per_step=batch * seq_len,
                   num_gpus=_spec_at(plan, "cluster", "num_gpus"), tokens=_spec_at(plan, "training", "tokens"),
                   price_per_gpu_hour=price)["cost"]


def _table(rows: list[tuple[Any, ...]], source: list[Any]) -> list[dict[str, Any]]:
    """Each row's formatted cells, one per plan, and whether they differ. A row (label, read) formats each value
    alone; a row (label, read, cells) formats the row's values together (durations in one unit)."""
    table = []
    for label, read, *together in rows:
        values = [read(item) for item in source]
        cells = together[0](values) if together else [_format(v) for v in values]
        table.append({"label": label, "cells": cells, "differs": len(set(cells)) > 1})
    return table


def compare_figures(*, plans: list[Plan]) -> dict[str, Figure]:
    """The plan page's step-time and memory charts, one bar per plan (its best layout) instead of per layout."""
    labels, shared = _chart_labels(plans)
    bests = [dict(_best(plan), rank=i + 1, label=label) for i, (plan, label) in enumerate(zip(plans, labels))
             if _best(plan)]
    result = {"plans": bests}
    figures = {"step-time": step_time_breakdown(result), "memory": memory_breakdown(result)}
    titles = {"step-time": "Step time breakdown, best layout of each plan",
              "memory": "Memory per GPU against capacity, best layout of each plan"}
    for name, fig in figures.items():
        if fig is not None:
            fig["layout"]["title"]["text"] = titles[name] + (f": {plotly_text(shared)}" if shared else "")
    # The legend below the axis as on the plan page: beside a chart of 2-4 bars it would need a scroll bar.
    return {name: legend_below(fig) for name, fig in figures.items() if fig is not None}


def _chart_labels(plans: list[Plan]) -> tuple[list[str], str]:
    """Each plan's title (less the words every plan's title starts with, which the chart's title says: all of it
    where every plan has the same one) with as few of the request values that tell it from the others as that
    takes, in the table's order ("..., global batch 2,048"): plans of one sweep often share their title, and a
    chart's bars must say which is which without a label so long that the bars shrink to nothing. Returns the
    labels and what the chart's title adds ("" for none)."""
    titles = [plan.title for plan in plans]
    # One title for all: the bars say only what differs ("global batch 2,048, pinned: TP 2"); the shared title
    # came first and was all a phone's shortened label kept. Titles that differ only after shared parts ("Llama 3
    # 70B on 512 × H100 ..." and "... × A100 ...") lose those parts, whole: a phone kept "#1 Llama 3 70B on…" of
    # each, and shared words had cut "Llama 3.1 405B" to "3.1 405B".
    if len(plans) < 2:
        labels, shared = titles, ""
    elif len(set(titles)) == 1:
        labels, shared = [""] * len(plans), titles[0]
    else:
        parts = [plan.title_parts for plan in plans]
        lead = 0
        while all(len(p) > lead + 1 for p in parts) and len({p[lead] for p in parts}) == 1:
            lead += 1
        labels = [" ".join(p[lead:]) for p in parts]
        shared = " ".join(parts[0][:lead]) + " …" if lead else ""
    for row in _table(_request_rows(plans), plans):
        tied = [[i for i, other in enumerate(labels) if other == label] for label in set(labels)]
        tied = [group for group in tied if len(group) > 1]
        if not tied:
            break
        # Only a row that tells apart bars still labelled alike: each row added to every bar made a label of
        # ~700 characters whose one telling difference ("pinned: TP") came last and was cut off.
        if row["label"] not in ("status", *IN_TITLE) and any(len({row["cells"][i] for i in g}) > 1 for g in tied):
            labels = [f"{label}, {row['label']} {row['cells'][i]}".lstrip(", ") for i, label in enumerate(labels)]
    return [label or title for label, title in zip(labels, titles, strict=True)], shared


def _best(plan: Plan) -> dict[str, Any]:
    plans = (plan.result or {}).get("plans") if plan.status == Plan.Status.DONE else None
    return plans[0] if plans and isinstance(plans[0], dict) else {}


def _spec_at(plan: Plan, *keys: str) -> Any:
    """The value at `keys` in the plan's stored spec, or None where the path stops."""
    value: Any = plan.spec
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _unplaced(plan: Plan) -> dict[str, Any]:
    """What a plan with no best layout (pending, failed, none feasible) still shows: its GPU's memory capacity,
    from the spec, so the memory rows say what every layout was measured against."""
    capacity = _spec_at(plan, "cluster", "gpu", "memory_gib")
    return {"memory_gib": {"capacity": capacity}} if isinstance(capacity, (int, float)) else {}


def _request_rows(plans: list[Plan]) -> list[tuple[str, Callable[[Plan], Any]]]:
    """The request's main rows, then every other spec field on which the plans differ: two plans of one name can
    differ in what it stands for (a catalog GPU edited in the admin between them)."""
    def spec(*keys: str) -> Callable[[Plan], Any]:
        return lambda plan: _spec_at(plan, *keys)
    def tokens(plan: Plan) -> Any:  # as the plan page writes it: "15T", not 15,000,000,000,000
        value = _spec_at(plan, "training", "tokens")
        return count(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    def status(plan: Plan) -> str:  # "done" with dashes below it said nothing of why
        return "done: no layout fits" if plan.status == Plan.Status.DONE and not _best(plan) else plan.status
    rows = [("status", status)] + [(label, tokens if path == ("training", "tokens") else spec(*path))
                                               for label, path in REQUEST_ROWS]
    shown = {path for _, path in REQUEST_ROWS}
    moe_paths = {("model", name) for name in MOE_ONLY}

    def moe_only(path: tuple[str, ...]) -> Callable[[Plan], Any]:  # "–" for a dense model beside an MoE one
        return lambda plan: _spec_at(plan, *path) if _is_moe(plan) else None
    if not any(_is_moe(plan) for plan in plans):
        # Dense models all: an expert's fields say nothing (the expert FFN width is the FFN width, and differed
        # wherever that did).
        shown |= moe_paths
    for section, (title, *keys) in SPEC_SECTIONS.items():
        for f in SECTIONS[section]:
            path = (*keys, f.name)
            if path in shown:  # the names too
                continue
            if len({_format(_spec_at(plan, *path)) for plan in plans}) > 1:
                rows.append((f"{title}: {field_label(f)}", moe_only(path) if path in moe_paths else spec(*path)))
    return rows


def _is_moe(plan: Plan) -> bool:
    return (_spec_at(plan, "model", "experts") or 1) > 1


# Model fields that mean something only with routed experts (model.experts > 1)
MOE_ONLY = ("top_k", "router_groups", "router_group_top_k", "expert_ffn_hidden", "shared_experts", "dense_layers")

# The request's main rows, always shown: (label, path in a stored spec)
REQUEST_ROWS = (("model", ("model", "name")), ("GPUs", ("cluster", "num_gpus")), ("GPU", ("cluster", "gpu", "name")),
                ("node", ("cluster", "node", "name")), ("fabric", ("cluster", "fabric", "name")),
                ("precision", ("training", "precision")), ("training stack", ("training", "framework")),
                ("global batch", ("training", "global_batch")), ("sequence length", ("model", "seq_len")),
                ("tokens to train", ("training", "tokens")))

# Spec section -> (its title on the compare page, its path in a stored spec)
SPEC_SECTIONS = {"model": ("model", "model"), "training": ("training", "training"),
                 "cluster.gpu": ("GPU", "cluster", "gpu"), "cluster.node": ("node", "cluster", "node"),
                 "cluster.fabric": ("fabric", "cluster", "fabric"), "layout": ("pinned", "layout")}


def _throughput_rows() -> list[tuple[Any, ...]]:
    def mfu(b: dict[str, Any]) -> Any:  # a percentage, as the plan and sweep pages show it
        return percent(b["mfu"]) if isinstance(b.get("mfu"), (int, float)) else None
    # Durations in one unit across the row ("139.2 s" beside "93.93 s", not "2.320 min" beside it); the step time
    # to four digits, as the plan page's table (10.03 and 10.04 s, not 10 and 10); time to train as the plan page
    # writes it ("7.5 s" was "8.68e-05" days).
    return [("layout", lambda b: b.get("label")),
            ("step time", lambda b: b.get("step_time_s"), lambda values: durations(values, digits=4, zeros=True)),
            ("tokens/s", lambda b: b.get("tokens_per_s")), ("MFU (of the precision's peak)", mfu),
            ("memory per GPU (GiB)", lambda b: (b.get("memory_gib") or {}).get("total"), _gib),
            ("time to train", lambda b: b.get("time_to_train_s"), durations),
            ("GPU-hours", lambda b: b.get("gpu_hours"))]


def _time_parts(bests: list[dict[str, Any]]) -> list[str]:
    """The parts of the step time some plan spends time on, as the chart draws them: two dense plans had rows of
    "EP comm 0 0" and "CP comm 0 0" that the chart left out."""
    seen = {k for b in bests for k, v in (b.get("time_s") or {}).items() if v}
    return [p for p in TIME_PARTS if p in seen] + sorted(seen - set(TIME_PARTS))


def _comm_by(best: dict[str, Any], by: str) -> dict[str, float]:
    """Seconds per step of the best layout's collectives, summed by fabric or by "GROUP collective"."""
    totals: dict[str, float] = {}
    for c in best.get("comm") or []:
        if not isinstance(c, dict):
            continue
        if by == "fabric":
            for fabric, seconds in (c.get("time_by_fabric_s") or {}).items():
                totals[fabric] = totals.get(fabric, 0.0) + (seconds or 0.0)
        else:
            name = f"{str(c.get('group', '?')).upper()} {str(c.get('collective', '')).replace('_', '-')}"
            totals[name] = totals.get(name, 0.0) + (c.get("time_s") or 0.0)
    return totals


def _keys(bests: list[dict[str, Any]], by: str) -> list[str]:
    return list(dict.fromkeys(k for b in bests for k in _comm_by(b, by)))


def _seconds(values: list[Any]) -> list[str]:
    return [significant(v, 4) if finite_number(v) else _format(v) for v in values]


def _gib(values: list[Any]) -> list[str]:
    return [f"{v:,.1f}" if finite_number(v) else _format(v) for v in values]


def _format(value: Any) -> str:
    """Three significant digits, so the noise of float arithmetic is never marked as a difference."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
