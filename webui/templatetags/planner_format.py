"""Numbers as capacity planners read them: durations in s/h/days, rates with thousands separators (the engine's
planner/units.py, which the command line uses too), and the page's own."""
from __future__ import annotations

from typing import Any

from django import template

from planner.spec import SECTIONS
from planner.units import count, duration, exact, number, step_time

register = template.Library()


# The engine's formats (planner/units.py), which the command line's table uses too.
for _format in (duration, number, count, step_time, exact):
    register.filter(_format.__name__, _format)


@register.filter
def percent(value: Any) -> str:
    try:
        return f"{float(value) * 100:.1f}%"
    except (TypeError, ValueError):
        return "–"


@register.filter
def get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def reason(key: str) -> str:
    """`tp_crosses_nvlink_domain` -> `TP crosses NVLink domain` when the engine gave no example."""
    words = str(key).replace("_", " ").split()
    known = {"tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "ep": "EP", "nvlink": "NVLink", "vpp": "VPP", "moe": "MoE",
             "sp": "SP", "zero": "ZeRO", "gpus": "GPUs"}
    text = " ".join(known.get(w, w) for w in words)
    return text[:1].upper() + text[1:]


@register.filter
def by_count(counts: Any) -> list[tuple[str, Any]]:
    """A {reason: count} dict as pairs, most frequent first."""
    if not isinstance(counts, dict):
        return []
    return sorted(counts.items(), key=lambda kv: (-(kv[1] if isinstance(kv[1], (int, float)) else 0), kv[0]))


@register.filter
def as_json(value: Any) -> str:
    """Pretty JSON for a <pre> block (autoescaped by the template)."""
    import json

    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def as_spec_json(spec: Any) -> str:
    """A spec document as pretty JSON, sections and fields in the engine's table order whatever order the database
    gave back (PostgreSQL's jsonb sorts keys by length)."""
    return as_json(_in_field_order(spec))


def _in_field_order(doc: Any, path: str = "") -> Any:
    if not isinstance(doc, dict):
        return doc
    names = {"": ["model", "training", "cluster", "layout"], "cluster": ["num_gpus", "gpu", "node", "fabric"]}.get(
        path) or [f.name for f in SECTIONS.get(path, ())]
    keys = [k for k in names if k in doc] + [k for k in doc if k not in names]
    return {k: _in_field_order(doc[k], f"{path}.{k}" if path else k) for k in keys}


@register.filter
def whole(value: Any) -> str:
    """An exact whole number with thousands separators (a batch of 40,320, 131,072 tokens); other values as they are."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


@register.filter
def signed_percent(value: Any) -> str:
    """+4.2% / -12.0%: a signed relative error."""
    try:
        return f"{float(value) * 100:+.1f}%"
    except (TypeError, ValueError):
        return "–"


@register.filter
def option_value(value: Any) -> str:
    """A modelling option as the form words it: on/off for a switch, a number as typed (0.8, 4), text as it is."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return "–" if value is None else str(value)


@register.filter
def fields_with_errors(form: Any) -> list[Any]:
    """The visible fields of `form` that carry a message, in page order: the error summary links each."""
    return [field for field in form.visible_fields() if field.errors]
