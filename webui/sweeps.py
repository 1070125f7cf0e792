"""Sweeps: a base spec and axes, each scenario an ordinary plan; their progress, goal and best scenario.

Each scenario goes through `services.plan_create`, so identical-request reuse, the outbox, leases and recovery
apply to it unchanged, and each is its own Celery task, which any number of workers share. A sweep keeps no
counter of its own: its progress is read from its plans' statuses every time, so it cannot go stale.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable, Iterable, Mapping

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min
from django.urls import reverse
from django.utils import timezone

from planner import PlanSpec, SpecError
from planner.spec import TOP, describe_value, fmt_number, unmodified_name
from planner.units import duration, exact, finite_number
from planner.whatif.goal import Goal, best, miss_advice, outcome, parse_goal, verdict
from planner.whatif.sweep import LeftOut, Scenario, expand_leaving_out, key_name, scenario_doc, value_label

from . import services
from .models import CATALOG_MODELS, GPUType, NodeType, Plan, Sweep, SweepScenario

FINISHED = (Plan.Status.DONE, Plan.Status.FAILED)
# The few parts of each plan a sweep shows, read inside the database (a plan's whole answer is large).
_PLAN_KEYS = {
    "code": "plan__code", "status": "plan__status", "num_gpus": "plan__spec__cluster__num_gpus",
    "gpu": "plan__spec__cluster__gpu__name", "node": "plan__spec__cluster__node__name",
    "fabric": "plan__spec__cluster__fabric__name", "model": "plan__spec__model__name",
    "precision": "plan__spec__training__precision",
    "spec_tokens": "plan__spec__training__tokens", "global_batch": "plan__spec__training__global_batch",
    "seq_len": "plan__spec__model__seq_len", "layout": "plan__result__plans__0__label",
    "step_time_s": "plan__result__plans__0__step_time_s", "tokens_per_s": "plan__result__plans__0__tokens_per_s",
    "mfu": "plan__result__plans__0__mfu", "dispatched_at": "plan__dispatched_at",
}
# The row key holding the name the engine gave each catalog path's section (an axis value's label).
NAME_KEYS = {"cluster.gpu": "gpu", "cluster.node": "node", "cluster.fabric": "fabric", "model": "model"}
# The CSV's columns after the axes: what the API gives each scenario (its node too, which no axis may name).
ROW_FIELDS = ("plan", "status", "num_gpus", "gpu", "node", "fabric", "precision", "layout", "step_time_s",
              "tokens_per_s", "mfu", "time_to_train_days", "gpu_hours", "cost", "meets_goal", "goal_note", "url")
# The CSV's last column: why a combination was left out (its rows come after the scenarios').
LEFT_OUT_FIELD = "why_left_out"


# The fields of a sweep request.
SWEEP_KEYS = ("base", "goal", "leave_out_invalid", "vary")


class SweepQuotaExceeded(Exception):
    """The client's earlier sweeps still have too many scenarios waiting or running for this one (a 429).
    `retry_after_s`: when enough of them should have finished, at the pace its scenarios finished lately (the
    429's Retry-After); None when none finished lately, and no pace can be told."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def sweep_create(*, data: Any, top: int = TOP.default, client: str = "") -> Sweep:
    """Check the whole sweep (sweep_check) and then save it with one plan per scenario, each sent to the workers
    once the sweep is committed. Raises SpecError as sweep_check; SweepQuotaExceeded when the `client`'s
    unfinished scenarios and this sweep's would pass settings.SWEEP_MAX_PENDING_PER_CLIENT."""
    checked = sweep_check(data)
    catalog, scenarios, goal = checked.catalog, checked.scenarios, checked.goal
    prices = dict(GPUType.objects.values_list("name", "price_per_gpu_hour_usd"))
    client = client[:64]
    with transaction.atomic():  # the plans' tasks are sent when this commits (plan_create's on_commit)
        _lock_client(client)
        sweep = Sweep.objects.create(base=data["base"], vary=data["vary"], axes=list(data["vary"]),
                                     goal=goal.as_dict() if goal else None, top=top, client=client,
                                     left_out=[s.as_dict() for s in checked.left_out])
        SweepScenario.objects.bulk_create(
            SweepScenario(sweep=sweep, position=i, values=s.values,
                          plan=services.plan_create(spec=s.spec, top=top,
                                                    sources=_sources(data["base"], s.values, catalog)),
                          price_per_gpu_hour_usd=prices.get(s.spec.cluster.gpu.name))
            for i, s in enumerate(scenarios))
        _within_quota(sweep)  # raising rolls the sweep and its plans back; no task was sent
    return sweep


def sweep_check(data: Any) -> Checked:
    """Every scenario of a sweep request parsed against the catalog, and its goal, saving nothing. Raises
    SpecError naming each problem: `vary.<path>` for an axis or a scenario it makes invalid, `base.<path>`,
    `goal.<field>`; with `"leave_out_invalid": true`, a combination that cannot run though each of its values
    runs elsewhere is left out instead (planner.whatif.sweep.expand_leaving_out)."""
    if not isinstance(data, Mapping):
        raise SpecError.one("sweep", 'must be a JSON object {"base": SPEC, "vary": {PATH: [VALUES]}, "goal": {...}}')
    errors = [SpecError.one(key_name(key), f"unknown field (known: {', '.join(SWEEP_KEYS)})")
              for key in data if key not in SWEEP_KEYS]
    leave_out = data.get("leave_out_invalid", False)
    if not isinstance(leave_out, bool):
        errors.append(SpecError.one("leave_out_invalid", f"must be true or false, not {describe_value(leave_out)}"))
    catalog = {section: services.CatalogTable(model) for section, model in CATALOG_MODELS.items()}
    scenarios, left_out, goal = [], [], None
    vary = data.get("vary")
    # A catalog-only field (the GPU-hour price) is no field of a request, so the engine's "unknown path (known: ...
    # cluster.gpu.* fields)" read as if it should have matched: say where the price lives.
    catalog_only = [p for p in (vary if isinstance(vary, Mapping) else {})
                    if isinstance(p, str) and p.startswith("cluster.gpu.") and p.split(".")[-1] in GPUType.CATALOG_ONLY]
    for path in catalog_only:
        errors.append(SpecError.one(f"vary.{path}", "is the catalog's, not a field of a request: each scenario is "
                                                    "priced from its GPU's row, so set the price on the GPU in the "
                                                    "admin, or sweep GPUs whose rows have the prices to compare"))
    try:
        scenarios, left_out = expand_leaving_out(
            data.get("base"), {p: v for p, v in vary.items() if p not in catalog_only} if catalog_only else vary,
            catalog, leave_out=leave_out is True, unbuilt=_unbuilt_by(NodeType.objects.all()))
    except SpecError as err:
        errors.append(err)
    try:
        goal = parse_goal(data.get("goal"))
    except SpecError as err:
        errors.append(err)
    if errors:
        raise SpecError([e for err in errors for e in err.errors])
    if goal is not None:  # the goal's tokens are what each scenario's plan trains
        _tokens_agree(data, scenarios, goal.tokens)
        scenarios = [_with_tokens(s, goal.tokens) for s in scenarios]
    return Checked(catalog, scenarios, left_out, goal)


def _unbuilt_by(nodes: Iterable[NodeType]) -> Callable[[PlanSpec], list[str]]:
    """Why a scenario's GPU is not one its node type is built with (the node types' GPU types in the catalog):
    a GPU, or a node, that a sweep's axis changes a field of is still the row it modifies."""
    held = {node.name: node.held_gpus() for node in nodes}

    def unbuilt(spec: PlanSpec) -> list[str]:
        node = unmodified_name(spec.cluster.node.name) or spec.cluster.node.name
        gpu = unmodified_name(spec.cluster.gpu.name) or spec.cluster.gpu.name
        gpus = held.get(node)
        if not gpus or gpu in gpus:
            return []
        return [f"cluster.node: {node} is built with {' or '.join(gpus)}, not {gpu} (the node type's GPU types in "
                f"the catalog)"]
    return unbuilt


@dataclass(frozen=True)
class Checked:
    """A sweep request that sweep_check found sound: its catalog, scenarios, the combinations it left out, goal."""
    catalog: dict[str, services.CatalogTable]
    scenarios: list[Scenario]
    left_out: list[LeftOut]
    goal: Goal | None


def _lock_client(client: str) -> None:
    """Hold the client's quota for the rest of the transaction, so that sweeps asked for at once are counted one
    after the other (three parallel 1,024-scenario requests got two through the quota). PostgreSQL: a transaction
    advisory lock on the client's name. SQLite: its transactions are IMMEDIATE (settings.DATABASES), so this one
    holds the database's one write lock from its start, and its count sees every sweep committed before."""
    if connection.vendor == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"sweep quota {client}".encode()).digest()[:8], "big", signed=True)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def _within_quota(sweep: Sweep) -> None:
    """One client's sweeps may hold at most settings.SWEEP_MAX_PENDING_PER_CLIENT scenarios waiting or running:
    the workers take sweep scenarios in turn with single plans, but without a bound one client's sweeps could keep
    everyone else's waiting for hours. A scenario answered at once (the same request planned before) adds none."""
    limit = settings.SWEEP_MAX_PENDING_PER_CLIENT
    pending = SweepScenario.objects.filter(sweep__client=sweep.client,
                                           plan__status__in=(Plan.Status.QUEUED, Plan.Status.RUNNING))
    adding = pending.filter(sweep=sweep).count()
    before = pending.exclude(sweep=sweep).count()
    if adding and before + adding > limit:
        # Waiting helps only if this sweep fits once earlier ones finish: one over the limit alone never will (a
        # client that honoured Retry-After would ask forever).
        if adding > limit:
            advice, wait = "This sweep alone is more than that: vary fewer values, or split it.", None
        else:
            advice, wait = "Ask again once some have finished, or vary fewer values.", \
                _quota_wait_s(sweep.client, before + adding - limit)
        when = f" At the pace your scenarios finished lately, that is in about {duration(wait)}." if wait else ""
        raise SweepQuotaExceeded(
            f"{before:,} scenarios of your earlier sweeps are still waiting or running, and this sweep adds "
            f"{adding:,}: at most {limit:,} at a time. {advice}{when}", retry_after_s=wait)


QUOTA_PACE_WINDOW_S = 600  # the recent past whose finished scenarios give a client's pace


def _quota_wait_s(client: str, excess: int) -> int | None:
    """Seconds until `excess` more of the client's scenarios should have finished, at the pace they finished over
    the last QUOTA_PACE_WINDOW_S, or since the first of them started where that is later (a sweep 40 s old that
    finished 160 scenarios runs 4 a second, not 160 in 600 s: its first 429 had said 24 h, not 4 min); None when
    none did (no pace to go by). At least one recovery sweep's time."""
    now = timezone.now()
    since = now - timedelta(seconds=QUOTA_PACE_WINDOW_S)
    recent = SweepScenario.objects.filter(sweep__client=client, plan__status__in=FINISHED, plan__finished_at__gte=since)
    found = recent.aggregate(finished=Count("pk"), first=Min("plan__started_at"))
    if not found["finished"]:
        return None
    first = max(found["first"] or since, since)
    elapsed = max((now - first).total_seconds(), 1.0)
    return max(math.ceil(settings.PLAN_RECOVER_EVERY_S), math.ceil(excess * elapsed / found["finished"]))


def _tokens_agree(data: Mapping[str, Any], scenarios: list[Scenario], tokens: float) -> None:
    """A goal judges every scenario on its own tokens: a scenario stating others (the base's training.tokens, or
    an axis over it) would show one time to train in the sweep and another on its plan's page. Refused, naming
    where the other figure comes from."""
    stated = {s.spec.training.tokens for s in scenarios} - {None, tokens}
    if not stated:
        return
    where = "vary.training.tokens" if "training.tokens" in (data.get("vary") or {}) else "base.training.tokens"
    raise SpecError.one(where, f"the goal trains {fmt_number(tokens)} tokens (goal.tokens), which every scenario's "
                               f"time to train is judged on; give tokens once, in the goal, not also here (got "
                               f"{', '.join(fmt_number(t) for t in sorted(stated))})")


def _with_tokens(scenario: Scenario, tokens: float) -> Scenario:
    training = scenario.spec.training
    if training.tokens is not None:
        return scenario
    return replace(scenario, spec=replace(scenario.spec, training=replace(training, tokens=tokens)))


def _sources(base: Any, values: dict[str, Any], catalog: dict[str, Any]) -> dict[str, str]:
    """Which modelling options the scenario's own request (the base with its values set) states."""
    return services.spec_option_sources(data=scenario_doc(base, values, catalog), catalog=catalog)


def sweep_rows(*, sweep: Sweep) -> list[dict[str, Any]]:
    """One row per scenario, in order: its values, its plan's status and best layout, and the goal's figures."""
    goal = parse_goal(sweep.goal)
    rows = []
    for found in sweep.scenarios.values("values", "price_per_gpu_hour_usd", *_PLAN_KEYS.values()):
        plan = {key: found[path] for key, path in _PLAN_KEYS.items()}
        spec_tokens, batch, seq_len = plan.pop("spec_tokens"), plan.pop("global_batch"), plan.pop("seq_len")
        # Saved but not handed to the broker (it was down): as the plan's own page says (Plan.is_waiting_for_broker)
        sent_at = plan.pop("dispatched_at")
        plan["waiting_for_broker"] = plan["status"] == Plan.Status.QUEUED and sent_at is None
        values = {axis: found["values"].get(axis) for axis in sweep.axes}  # in axis order (jsonb sorts keys)
        per_step = batch * seq_len if isinstance(batch, (int, float)) and isinstance(seq_len, (int, float)) else None
        row = {"values": values, "plan": str(plan.pop("code")), **plan,
               **outcome(step_time_s=plan["step_time_s"], tokens_per_step=per_step, num_gpus=plan["num_gpus"],
                         tokens=goal.tokens if goal else spec_tokens,
                         price_per_gpu_hour=found["price_per_gpu_hour_usd"])}
        # Each axis value as the page labels it: an inline GPU by the name the engine gave it ("(modified)").
        row["labels"] = {axis: value_label(axis, value, row.get(NAME_KEYS.get(axis, "")))
                         for axis, value in values.items()}
        row["url"] = reverse("plan-detail", args=[row["plan"]])
        # Unknown (None) until the plan is finished; a failed plan or one with no feasible layout does not meet it.
        row["meets_goal"], row["goal_note"] = verdict(goal, row) if row["status"] in FINISHED else (None, None)
        rows.append(row)
    return rows


def sweep_as_dict(*, sweep: Sweep, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON API's view: {"code", "url", "status", "done", "total", "goal", "axes", "scenarios", "left_out",
    "best"}."""
    rows = sweep_rows(sweep=sweep) if rows is None else rows
    done = sum(row["status"] in FINISHED for row in rows)
    winner = best(rows) if done == len(rows) else None  # named once every scenario has its answer
    goal = parse_goal(sweep.goal)
    return {"code": str(sweep.code), "url": sweep.get_absolute_url(), "status": sweep_status(rows),
            "done": done, "total": len(rows), "goal": sweep.goal, "axes": sweep.axes,
            "waiting_for_broker": sum(row["waiting_for_broker"] for row in rows),
            "created_at": sweep.created_at.isoformat(), "scenarios": rows,
            "left_out": [{**c, "labels": {axis: value_label(axis, c["values"].get(axis)) for axis in sweep.axes}}
                         for c in sweep.left_out],
            "best": rows[winner] if winner is not None else None,
            # Why none meets the goal, once all are answered: by count, with what may help.
            "miss_advice": miss_advice(goal, rows) if goal and done == len(rows) and winner is None else None}


def sweep_fixed(*, sweep: Sweep, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What the base sets that no axis varies, as (path, label): the hardware, precision and batch every scenario
    shares. A sweep of B200 in DGX H100 over precisions named neither anywhere on its page. A GPU, node or fabric
    by the name the engine gave it (`rows`, sweep_rows): "H100 SXM5 80GB (modified)", as the plans say."""
    base = sweep.base if isinstance(sweep.base, Mapping) else {}
    fixed = []
    for section in ("cluster", "training"):
        entries = base.get(section) if isinstance(base.get(section), Mapping) else {}
        for key, value in entries.items():
            path = f"{section}.{key}"
            if path in sweep.axes or value in (None, "") or any(a.startswith(path + ".") for a in sweep.axes):
                continue
            named = rows[0].get(NAME_KEYS[path]) if path in NAME_KEYS and rows else None
            # a number as the page writes it ("1,000,000,000,000", not "1000000000000")
            fixed.append((path, exact(value) if finite_number(value) else value_label(path, value, named)))
    return fixed


def sweep_status(rows: list[dict[str, Any]]) -> str:
    """done once every plan is done or failed; running once any has started; else queued."""
    statuses = [row["status"] for row in rows]
    if all(s in FINISHED for s in statuses):
        return "done"
    return "running" if any(s != Plan.Status.QUEUED for s in statuses) else "queued"


def sweep_csv(*, sweep: Sweep, rows: list[dict[str, Any]] | None = None, site: str = "") -> str:
    """The scenario rows as CSV: one column per axis, then the figures (empty where unknown). An inline object on
    an axis (a model, a GPU) is written as the page labels it, by its name ("H100 SXM5 80GB (modified)"), not as
    its JSON; the plan's page, at `url`, has the whole request. `site` ("http://host:8000") makes each plan's `url`
    a whole address, as the API gives it: a spreadsheet has no page to resolve "/plans/..." against. Then each
    combination left out, with status "left out" and why in the last column."""
    rows = sweep_rows(sweep=sweep) if rows is None else rows
    axes = sweep.axes
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*axes, *ROW_FIELDS, LEFT_OUT_FIELD])
    for row in rows:
        row = {**row, "url": site + row["url"]} if row.get("url") else row
        values = [row["values"].get(a) for a in axes]
        cells = ([_cell(row["labels"][a] if isinstance(v, Mapping) else v) for a, v in zip(axes, values)]
                 + [_cell(row.get(f)) for f in ROW_FIELDS] + [""])
        writer.writerow(cells)
    # The combinations left out (leave_out_invalid), after the scenarios: status "left out", and why in a column
    # of their own; the file had dropped them without a word.
    for combination in sweep.left_out:
        values = [combination["values"].get(a) for a in axes]
        cells = ([_cell(value_label(a, v) if isinstance(v, Mapping) else v) for a, v in zip(axes, values)]
                 + [_cell("left out" if f == "status" else None) for f in ROW_FIELDS]
                 + [_cell("; ".join(combination["reasons"]))])
        writer.writerow(cells)
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)  # JSON for objects, true/false
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not _is_number(text) else text  # no spreadsheet formulas


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
