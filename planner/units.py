"""Numbers as capacity planners read them, one rule for the command line's table and the web pages (whose template
filters, webui/templatetags/planner_format.py, are these): durations in ms/s/min/h/days/years, three significant
digits with thousands separators, and large counts the way people say them."""
from __future__ import annotations

import math
from typing import Any

from .spec import fmt_number


# (below this many seconds, unit, seconds in one) for durations
DURATION_UNITS = ((1, "ms", 1e-3), (120, "s", 1), (7200, "min", 60), (172800, "h", 3600),
                  (2 * 365 * 86400, "days", 86400), (math.inf, "years", 365 * 86400))


def duration(seconds: Any, digits: int = 3, zeros: bool = False) -> str:
    """3.2 s, 14.5 min, 6.3 h, 41.2 days, 2.1 years (`digits` significant digits; with `zeros`, trailing zeros
    kept: 10.10 s). The unit is the one the rounded figure stays under: 0.99996 s is "1.000 s", not "1000 ms"."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    for limit, unit, scale in DURATION_UNITS:
        text = significant(s / scale, digits) if zeros else f"{s / scale:.{digits}g}"
        if float(text.replace(",", "")) < limit / scale:
            return f"{text} {unit}"
    return "–"  # NaN


def finite_number(value: Any) -> bool:
    """A JSON number a page can write: an int or a float, not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def exact(value: Any) -> str:
    """A number as it was given, not rounded (a deadline of 52.353 days read "52.4"), a whole one with thousands
    separated ("1,000,000,000,000"); anything else as text."""
    if not finite_number(value):
        return str(value)
    return f"{int(value):,}" if value == int(value) else fmt_number(value)


def durations(values: list[Any], digits: int = 3, zeros: bool = False) -> list[str]:
    """Durations to be read side by side, all in one unit: the shortest's, or the next larger where the longest
    would need four digits or more in it ("139.2 s" beside "93.93 s", where each in its own unit read "2.320 min"
    beside "93.93 s"; "0.9840 s" above "1.017 s", not "984.0 ms"). Each in its own unit where no unit holds them
    all under a thousand, down to a tenth ("4.382 s" beside "1.200 ms"). "–" for a value that is not a
    number."""
    found = [float(v) if finite_number(v) else None for v in values]
    known = [s for s in found if s is not None]
    if not known:
        return ["–" for _ in values]
    first = duration(min(known), digits, zeros).rsplit(" ", 1)[1]
    scales = [(u, s) for _, u, s in DURATION_UNITS]
    start = next(i for i, (u, _) in enumerate(scales) if u == first)
    unit, scale = next(((u, s) for u, s in scales[start:] if max(known) / s < 1e3), scales[-1])
    together = max(known) / scale < 1e3 and min(known) / scale >= 0.1

    def shown(s: float) -> str:
        if not together:
            return duration(s, digits, zeros)
        return f"{significant(s / scale, digits) if zeros else number(s / scale, digits)} {unit}"
    return ["–" if s is None else shown(s) for s in found]


def significant(value: float, digits: int = 4) -> str:
    """`digits` significant digits with the trailing zeros kept and no exponent where it reads as a plain number:
    9.944, 10.10, 0.1234, 12,345 (a step time in the command line's table, as the pages write it)."""
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    rounded = float(format(value, f".{digits}g"))
    if abs(rounded) >= 1000:  # with its thousands separated, as every other count on the pages ("4382" was not)
        return f"{rounded:,.{max(0, digits - len(str(int(abs(rounded)))))}f}"
    text = format(value, f"#.{digits}g")
    if "e" in text and 0 < abs(value) < 1:  # 0.00003370, as the charts' hover writes it, not 3.37e-05
        return f"{value:.{digits - 1 - math.floor(math.log10(abs(rounded)))}f}"
    return format(value, f".{digits}g") if "e" in text else text.rstrip(".")


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
            # a thousand of the largest unit or more, whole with separators: 1e15 tokens read "1e+03T"
            text = f"{x / scale:.3g}"
            return f"{x / scale:,.0f}{suffix}" if "e" in text else f"{text}{suffix}"
    return f"{round(x):,}" if x == round(x) else number(x)  # 1.5 tokens: "1.5", not "2"
