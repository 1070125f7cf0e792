"""Goal-seeking over a sweep's scenarios: time to train, GPU-hours, cost, whether a goal is met, and the best.

A goal is {"tokens": T, "deadline_days": D} with an optional "budget" in US dollars. The best scenario is the
cheapest that meets the goal: by cost (GPU-hours × price per GPU-hour) when every such scenario has a price,
else by GPU-hours; then the fewest GPUs; then the shortest time to train.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import FieldError, SpecError
from ..report import training_seconds
from ..spec import as_number, fmt_number, not_a_number, unmodified_name
from .sweep import key_name

SECONDS_PER_DAY = 86_400.0
MAX_TOKENS = 1e16          # as training.tokens in planner/spec.py
MAX_DEADLINE_DAYS = 36_500.0  # a century: anything longer is a typo
MAX_BUDGET_USD = 1e13


@dataclass(frozen=True)
class Goal:
    tokens: float
    deadline_days: float
    budget_usd: float | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tokens": self.tokens, "deadline_days": self.deadline_days}
        if self.budget_usd is not None:
            data["budget"] = self.budget_usd
        return data


def parse_goal(data: Any) -> Goal | None:
    """None for no goal; else a Goal, or SpecError naming each bad field (goal.tokens, goal.deadline_days...)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise SpecError.one("goal", 'must be an object {"tokens": T, "deadline_days": D, "budget": optional}')
    errors = [FieldError(f"goal.{key_name(k)}", "unknown field (known: budget, deadline_days, tokens)")
              for k in data if k not in ("tokens", "deadline_days", "budget")]
    tokens = _positive(data.get("tokens"), "goal.tokens", MAX_TOKENS, "tokens", errors)
    days = _positive(data.get("deadline_days"), "goal.deadline_days", MAX_DEADLINE_DAYS, "days", errors)
    budget = None
    if data.get("budget") not in (None, ""):
        budget = _positive(data["budget"], "goal.budget", MAX_BUDGET_USD, "USD", errors)
    if errors:
        raise SpecError(errors)
    return Goal(tokens=tokens, deadline_days=days, budget_usd=budget)


def _positive(value: Any, field: str, hi: float, unit: str, errors: list[FieldError]) -> float:
    if value is None or value == "":
        errors.append(FieldError(field, "is required"))
        return 0.0
    number = as_number(value)  # the spec's own reading: 10**400 and "1e400" are past the bound, not errors
    if number is None:
        errors.append(FieldError(field, not_a_number(value)))
        return math.nan
    if not 0 < number <= hi:
        # past a double (1e400, 500 digits): no "(got inf)", as the spec's own fields say it
        got = f" (got {fmt_number(number)})" if math.isfinite(number) else ""
        errors.append(FieldError(field, f"must be more than 0 and at most {fmt_number(hi)} {unit}{got}"))
    return number


def outcome(*, step_time_s: float | None, tokens_per_step: float | None, num_gpus: int, tokens: float | None,
            price_per_gpu_hour: float | None) -> dict[str, float | None]:
    """Time to train (days), GPU-hours and cost (USD) of training `tokens` in whole steps of `tokens_per_step`
    tokens and `step_time_s` seconds on `num_gpus`, as the plan's page gives them (planner.report.training_seconds).
    None where an input is missing (no feasible layout, no token count, no price)."""
    if not step_time_s or not tokens_per_step or tokens is None:
        return {"time_to_train_days": None, "gpu_hours": None, "cost": None}
    days = training_seconds(tokens, tokens_per_step, step_time_s) / SECONDS_PER_DAY  # s / 86,400 s per day
    gpu_hours = num_gpus * days * 24.0                   # GPUs × hours
    cost = gpu_hours * price_per_gpu_hour if price_per_gpu_hour is not None else None  # GPU-h × USD/GPU-h
    return {"time_to_train_days": _r(days), "gpu_hours": _r(gpu_hours), "cost": _r(cost) if cost is not None else None}


def meets(goal: Goal | None, row: Mapping[str, Any]) -> bool | None:
    """Whether a scenario meets the goal; None without a goal (see verdict)."""
    return verdict(goal, row)[0]


def verdict(goal: Goal | None, row: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """(whether a scenario meets the goal, None without a goal; why one misses it, None where its layout cell says
    so already: no feasible layout). A scenario without a price does not meet a goal with a budget: its cost is
    unknown."""
    if goal is None:
        return None, None
    miss = _miss(goal, row)
    if miss is None:
        return True, None
    if miss == "deadline":
        days, deadline = _days_apart(row["time_to_train_days"], goal.deadline_days)
        return False, f"{days} days, past the {deadline}-day deadline"
    if miss == "price":
        gpu = row.get("gpu") or "its GPU"
        own = " (a modified GPU has no price of its own)" if unmodified_name(str(gpu)) else ""
        return False, f"no price for {gpu}{own}, so no cost to hold to the budget"
    if miss == "budget":
        return False, f"costs {row['cost']:,.0f} USD, over the {goal.budget_usd:,.0f} USD budget"
    return False, None


def _miss(goal: Goal, row: Mapping[str, Any]) -> str | None:
    """What a scenario misses the goal on: "layout" (none fits), "deadline", "price" (none, with a budget),
    "budget"; None where it meets it."""
    days = row.get("time_to_train_days")
    if days is None:
        return "layout"
    if days > goal.deadline_days:
        return "deadline"
    if goal.budget_usd is not None:
        if row.get("cost") is None:
            return "price"
        if row["cost"] > goal.budget_usd:
            return "budget"
    return None


# Why scenarios miss a goal: (what one does, what several do, what may help), in the order they are said.
MISSES = {
    "deadline": ("misses the deadline", "miss the deadline", "more or faster GPUs, or a later deadline"),
    "budget": ("costs more than the budget", "cost more than the budget",
               "a larger budget, or fewer GPU-hours (fewer or cheaper GPUs, if the deadline allows)"),
    "price": ("has no GPU price to hold to the budget", "have no GPU price to hold to the budget",
              "a price for each GPU in the catalog (a modified GPU has none of its own)"),
    "layout": ("has no feasible layout", "have no feasible layout", "a spec whose layouts fit (each plan says why)"),
}


def miss_advice(goal: Goal, rows: Sequence[Mapping[str, Any]]) -> str:
    """Why no scenario meets the goal, by count, and what may help, for the sweep page: "2 cost more than the
    budget. What may help: a larger budget, ..." ("more GPUs or a later deadline" alone was wrong for a sweep
    whose every scenario was on time and over budget)."""
    counts = {kind: sum(_miss(goal, row) == kind for row in rows) for kind in MISSES}
    found = [(kind, n) for kind, n in counts.items() if n]
    said = "; ".join(f"{n:,} {MISSES[kind][0] if n == 1 else MISSES[kind][1]}" for kind, n in found)
    helps = "; ".join(MISSES[kind][2] for kind, _ in found)
    return f"{said}. What may help: {helps}." if found else ""


def _fmt_days(days: float) -> str:
    return f"{days:.3g}" if days < 1000 else f"{days:,.0f}"


def _days_apart(days: float, deadline: float) -> tuple[str, str]:
    """A time to train and the deadline it misses, the deadline as given (52.353, not 52.4) and the time to at
    least as many decimals, and more until they differ: 130.001 days past a 130-day deadline read "130 days, past
    the 130-day deadline", and 52.36 past 52.353 "52.4, past the 52.4-day deadline"."""
    limit = _fmt_days(deadline)
    if float(limit.replace(",", "")) != deadline:
        limit = fmt_number(deadline)
    shown = _fmt_days(days)
    places = len(limit.partition(".")[2])
    if len(shown.partition(".")[2]) < places or float(shown.replace(",", "")) <= deadline:
        shown = f"{days:,.{places}f}"
        while float(shown.replace(",", "")) <= deadline and places < 6:  # reads as on or within the deadline
            places += 1
            shown = f"{days:,.{places}f}"
    return shown, limit


def best(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the best row among those with meets_goal true (see the module's docstring), or None."""
    meeting = [i for i, row in enumerate(rows) if row.get("meets_goal")]
    if not meeting:
        return None
    priced = all(rows[i].get("cost") is not None for i in meeting)
    money = "cost" if priced else "gpu_hours"
    return min(meeting, key=lambda i: (rows[i][money], rows[i]["num_gpus"], rows[i]["time_to_train_days"], i))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (lower is better), by the first one.
    Sorted by x, a point is on the front when its y is below every y before it (ties on x: lowest y first)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, lowest = [], math.inf
    for i in order:
        if points[i][1] < lowest:
            front.append(i)
            lowest = points[i][1]
    return front


def _r(x: float) -> float:
    """A JSON-native float with 6 significant digits."""
    return float(f"{float(x):.6g}")
