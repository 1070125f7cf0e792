"""Numbers as capacity planners read them, one rule for the command line's table and the web pages (whose template
filters, webui/templatetags/planner_format.py, are these): durations in ms/s/min/h/days/years, three significant
digits with thousands separators, and large counts the way people say them."""
from __future__ import annotations

from typing import Any


def duration(seconds: Any, digits: int = 3, zeros: bool = False) -> str:
    """3.2 s, 14.5 min, 6.3 h, 41.2 days, 2.1 years (`digits` significant digits; with `zeros`, trailing zeros
    kept: 10.10 s)."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    form = f"{'#' if zeros else ''}.{digits}g"
    for limit, unit, scale in ((1, "ms", 1e-3), (120, "s", 1), (7200, "min", 60), (172800, "h", 3600),
                               (2 * 365 * 86400, "days", 86400)):
        if s < limit:
            return f"{format(s / scale, form).rstrip('.')} {unit}"
    return f"{format(s / (365 * 86400), form).rstrip('.')} years"


def step_time(seconds: Any) -> str:
    """A step time, to four significant digits, zeros kept: ranked layouts 9.9996, 10.031, 10.104 s read "10.00 s",
    "10.03 s", "10.10 s", not "10 s", "10 s", "10.1 s" (the table of layouts and the headline above it)."""
    return duration(seconds, digits=4, zeros=True)


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


def count(value: Any) -> str:
    """Large counts the way people say them: 15T, 2.1B, 300M, 45,000."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "–"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{round(x):,}" if x == round(x) else number(x)  # 1.5 tokens: "1.5", not "2"
