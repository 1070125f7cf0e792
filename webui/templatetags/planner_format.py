"""Numbers as capacity planners read them: durations in s/h/days, rates with thousands separators."""
from __future__ import annotations

from typing import Any

from django import template

from planner.spec import SECTIONS

register = template.Library()


@register.filter
def duration(seconds: Any) -> str:
    """3.2 s, 14.5 min, 6.3 h, 41.2 days, 2.1 years."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    for limit, unit, scale in ((1, "ms", 1e-3), (120, "s", 1), (7200, "min", 60), (172800, "h", 3600),
                               (2 * 365 * 86400, "days", 86400)):
        if s < limit:
            return f"{s / scale:.3g} {unit}" if unit != "ms" else f"{s * 1e3:.3g} ms"
    return f"{s / (365 * 86400):.3g} years"


@register.filter
def number(value: Any, digits: int = 3) -> str:
    """Three significant digits, with thousands separators for big ones: 104,500 / 0.449 / 1.2e+15."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    if abs(x) >= 1e12:
        return f"{x:.{digits}g}"
    if abs(x) >= 10 ** digits:
        return f"{round(x):,}"
    return f"{x:.{digits}g}"


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
def count(value: Any) -> str:
    """Large counts the way people say them: 15T, 2.1B, 300M, 45,000."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{round(x):,}"


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
