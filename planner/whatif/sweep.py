"""Scenario sweeps: a base spec and axes of values, expanded into one spec document per scenario.

An axis is a dotted spec path (`cluster.num_gpus`, `training.precision`, `cluster.fabric.latency_us`) or a
catalog-name path (`cluster.gpu`, `cluster.node`, `cluster.fabric`, and `model` for a preset), with a list of
values. The scenarios are the product of the axes. Every scenario is parsed with `parse_spec` here, before
anything is saved, so a bad path, an empty list or a value that makes one scenario invalid is reported at
once, each message naming the axis (`vary.<path>`) or the base field (`base.<path>`) and the scenario.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..errors import FieldError, SpecError
from ..jsonio import Overflow
from ..spec import SECTIONS, PlanSpec, fmt_number, parse_spec, text_problem

MAX_SCENARIOS = 1024  # the bound: a sweep is a study, not a search of its own
# Combinations a sweep that leaves out what cannot run may make, of which at most MAX_SCENARIOS are planned: all
# 15 GPUs x 15 node types x 2 precisions x 3 counts (1,350) plan about 180. Parsing them takes about 1.5 s.
MAX_COMBINATIONS = 4 * MAX_SCENARIOS
MAX_AXES = 8
MAX_MESSAGES_PER_FIELD = 5  # past this, the same rule broken by more scenarios adds nothing a reader needs

# Paths whose values are catalog names; `model` is the one section parse_spec does not resolve by name.
CATALOG_PATHS = {"cluster.gpu": "gpu", "cluster.node": "node", "cluster.fabric": "fabric", "model": "model"}


def axis_paths() -> list[str]:
    """Every path a sweep may vary: each field of the engine's tables, the GPU count, the catalog names."""
    fields = [f"{section}.{f.name}" for section, table in SECTIONS.items() for f in table]
    return sorted({"cluster.num_gpus", *CATALOG_PATHS, *fields})


@dataclass(frozen=True)
class Scenario:
    values: dict[str, Any]   # {path: value} for this scenario, in axis order
    spec: PlanSpec


@dataclass(frozen=True)
class LeftOut:
    """A combination of axis values that cannot run, though each of its values runs in another scenario (FP8 on
    an A100 in a sweep of A100 and H100, BF16 and FP8): left out of a sweep asked to leave such ones out."""
    values: dict[str, Any]
    reasons: list[str]       # the engine's messages, each naming its field

    def as_dict(self) -> dict[str, Any]:
        return {"values": self.values, "reasons": self.reasons}


def expand(base: Any, vary: Any, catalog: Mapping[str, Mapping[str, Mapping]] | None = None) -> list[Scenario]:
    """Every scenario of the sweep, parsed; raises SpecError naming each bad axis, value or scenario."""
    return expand_leaving_out(base, vary, catalog, leave_out=False)[0]


def expand_leaving_out(base: Any, vary: Any, catalog: Mapping[str, Mapping[str, Mapping]] | None = None, *,
                       leave_out: bool = True, unbuilt: Callable[[PlanSpec], list[str]] | None = None
                       ) -> tuple[list[Scenario], list[LeftOut]]:
    """(scenarios, left out): as expand, but with `leave_out` a combination that cannot run (the engine refuses
    it) or cannot be bought (`unbuilt` gives reasons: a GPU in a node type not built for it) is left out, and
    said why, instead of refusing the sweep or planning hardware nobody sells. What pairs with nothing is not
    left out: a value every combination of which is unbuilt (a GPU none of the chosen node types is built with,
    a node type built with none of the chosen GPUs) is a what-if the sweep asked for, planned in each of its
    combinations; and a combination the engine refuses is left out only where each of its values runs in some
    planned scenario, one refused everywhere (a GPU count no node fills, FP8 where no GPU has it) being a
    mistake in the axis, and refused."""
    errors: list[FieldError] = []
    if not isinstance(base, Mapping):
        raise SpecError.one("base", "must be a spec object (model, training, cluster)")
    axes = _axes(vary, errors, MAX_COMBINATIONS if leave_out else MAX_SCENARIOS)
    if errors:
        raise SpecError(errors)
    scenarios: list[tuple[int, Scenario]] = []  # with their place in the product, kept when some come back
    failed: list[tuple[int, dict[str, Any], SpecError]] = []
    odd: list[tuple[int, Scenario, list[str]]] = []  # parsed, but not hardware that is built
    for i, combo in enumerate(itertools.product(*axes.values())):
        values = dict(zip(axes, combo, strict=True))
        try:
            doc = scenario_doc(base, values, catalog)
            scenario = Scenario(values=values, spec=parse_spec(doc, catalog))
        except SpecError as err:
            failed.append((i, values, err))
            continue
        reasons = unbuilt(scenario.spec) if unbuilt and leave_out else []
        if reasons:
            odd.append((i, scenario, reasons))
        else:
            scenarios.append((i, scenario))
    out: list[tuple[int, LeftOut]] = []
    if leave_out and (failed or odd):
        # Decided once, from the built scenarios alone, so that the answer does not hang on the axes' order.
        built = _runs(s for _, s in scenarios)
        for i, scenario, reasons in odd:
            if _all_run(scenario.values, built):
                out.append((i, LeftOut(scenario.values, reasons)))
            else:
                scenarios.append((i, scenario))  # pairs with nothing: the what-if asked for
        scenarios.sort(key=lambda pair: pair[0])
        runs = _runs(s for _, s in scenarios)
        refused = []
        for i, values, err in failed:
            if scenarios and _all_run(values, runs):
                out.append((i, LeftOut(values, [str(e) for e in err.errors])))
            else:
                refused.append((i, values, err))
        failed = refused
    left_out = [o for _, o in sorted(out, key=lambda pair: pair[0])]
    if failed:
        # A problem every scenario has, outside the axes' own fields, is the base's: said once, under its field.
        common = set.intersection(*({(e.field, e.message) for e in err.errors} for _, _, err in failed)) \
            if not scenarios else set()
        for _, values, err in failed:
            errors.extend(_scenario_errors(err, values, common))
        raise SpecError(_deduplicated(errors))
    planned = [s for _, s in scenarios]
    if len(planned) > MAX_SCENARIOS:
        once = f" once {len(left_out):,} combinations that cannot run are left out" if left_out else ""
        raise SpecError([FieldError("vary", f"makes {len(planned):,} scenarios{once}; at most {MAX_SCENARIOS:,}")])
    errors = _label_clashes(axes, planned)
    if errors:
        raise SpecError(errors)
    return planned, left_out


def _runs(scenarios: Iterable[Scenario]) -> set[tuple[str, str]]:
    """Every (axis, value) some scenario plans."""
    return {(path, _key(value)) for s in scenarios for path, value in s.values.items()}


def _all_run(values: Mapping[str, Any], runs: set[tuple[str, str]]) -> bool:
    return all((path, _key(value)) in runs for path, value in values.items())


def _label_clashes(axes: dict[str, list[Any]], scenarios: list[Scenario]) -> list[FieldError]:
    """An axis whose different values would be labelled alike (two inline models both named "m"; 64 and 64.0):
    the sweep's table showed them alike and its charts merged their scenarios into one series."""
    errors = []
    for path, values in axes.items():
        labels: dict[str, str] = {}  # value (as JSON) -> its label, from the first scenario that has it
        for s in scenarios:
            value, key = s.values[path], _key(s.values[path])
            if key not in labels:
                inline = path in CATALOG_PATHS and isinstance(value, Mapping)
                labels[key] = value_label(path, value, section_name(s.spec.to_dict(), path) if inline else None)
        for label, n in Counter(labels.values()).items():
            if n < 2:
                continue
            alike = [v for v in values if labels.get(_key(v)) == label]
            if any(isinstance(v, Mapping) for v in alike):
                why = "give each inline value a name of its own"
            else:  # 64 and 64.0: one value written twice
                why = f"list it once (as {' and '.join(_short(v) for v in alike)} it is the same value)"
            errors.append(FieldError(f"vary.{key_name(path)}", f"gives {n} different values the label "
                                     f"{label[:60]!r}, so its table and charts could not tell them apart: {why}"))
    return errors


def section_name(spec: Mapping[str, Any], path: str) -> str | None:
    """The name the engine gave the section at a catalog path ("cluster.gpu") of a scenario's spec, or None."""
    section: Any = spec
    for key in path.split("."):
        section = section.get(key) if isinstance(section, Mapping) else None
    name = section.get("name") if isinstance(section, Mapping) else None
    return name if isinstance(name, str) else None


def value_label(path: str, value: Any, name: str | None = None) -> str:
    """An axis value as the sweep's table, charts and messages label it: `value_text`, except that an inline
    object on a catalog path is labelled by the `name` the engine gave it in the scenario (`section_name`):
    {"name": "H100 SXM5 80GB", "memory_gib": 96} beside "H100 SXM5 80GB" is "H100 SXM5 80GB (modified)"."""
    if path in CATALOG_PATHS and isinstance(value, Mapping) and name:
        return name
    return value_text(value)


def _axes(vary: Any, errors: list[FieldError], limit: int = MAX_SCENARIOS) -> dict[str, list[Any]]:
    """The axes as {path: values}, checked: known paths, non-empty lists of distinct values, bounded product."""
    if not isinstance(vary, Mapping) or not vary:
        errors.append(FieldError("vary", "must be an object of {path: [values, ...]} with at least one axis"))
        return {}
    if len(vary) > MAX_AXES:
        errors.append(FieldError("vary", f"must have at most {MAX_AXES} axes (got {len(vary)})"))
        return {}
    known = set(axis_paths())
    axes: dict[str, list[Any]] = {}
    for path, values in vary.items():
        field = f"vary.{key_name(path)}"
        if path not in known:
            errors.append(FieldError(field, "unknown path (known: cluster.num_gpus, cluster.gpu, cluster.node, "
                                            "cluster.fabric, model, and model.*, training.*, layout.*, "
                                            "cluster.gpu.*, cluster.node.*, cluster.fabric.* fields)"))
        elif not isinstance(values, list) or not values:
            errors.append(FieldError(field, "must be a non-empty list of values"))
        elif (twice := _first_repeat(values)) is not None:
            errors.append(FieldError(field, f"lists {_short(values[twice])} twice"))  # which, in a list of hundreds
        else:
            axes[path] = values
    total = math.prod(len(v) for v in axes.values())
    if not errors and total > limit:
        sizes = " × ".join(str(len(v)) for v in axes.values())
        what = "scenarios" if limit == MAX_SCENARIOS else "combinations"
        made = f"makes {sizes} = {total:,} {what}" if len(axes) > 1 else f"makes {total:,} {what}"
        bound = (f"at most {limit:,}" if limit == MAX_SCENARIOS else
                 f"at most {limit:,}, of which {MAX_SCENARIOS:,} scenarios once those that cannot run are left out")
        errors.append(FieldError("vary", f"{made}; {bound}"))
    return axes


def scenario_doc(base: Mapping[str, Any], values: Mapping[str, Any],
                 catalog: Mapping[str, Mapping[str, Mapping]] | None = None) -> dict[str, Any]:
    """The base spec with this scenario's values set, as a spec document for parse_spec. A model preset
    (a name, in the base or on the `model` axis) becomes its catalog row; a field under a hardware entry given
    by name (`cluster.gpu.memory_gib` over "H100 SXM5 80GB") overrides that field of the named row, which the
    engine fills in. Either is then named "NAME (modified)" by the engine where a value differs from the row's
    (planner.spec._rename_if_changed), as the same request from the form, the API or the CLI is."""
    doc = copy.deepcopy(dict(base))
    if "model" in values:
        doc["model"] = copy.deepcopy(values["model"])
    if isinstance(doc.get("model"), str):  # before any model.* axis, which overrides a field of the preset
        problem = text_problem(doc["model"])
        if problem:  # as the plans API says it, before any catalog lookup
            raise SpecError.one("model", problem)
        preset = ((catalog or {}).get("model") or {}).get(doc["model"].strip())
        if preset is None:
            names = ", ".join(sorted((catalog or {}).get("model") or {})[:20])
            # In the plans API's words (spec._hardware); it was "unknown model preset" here.
            raise SpecError.one("model", f"unknown catalog name {doc['model'][:60]!r} (known: {names})")
        doc["model"] = dict(preset)  # an inline model inherits nothing from a preset of its name
    for path, value in sorted(values.items(), key=lambda kv: kv[0].count(".")):  # whole sections first
        if path != "model":
            _set(doc, path.split("."), copy.deepcopy(value))
    return doc


def _set(doc: dict[str, Any], keys: list[str], value: Any) -> None:
    target = doc
    for key in keys[:-1]:
        child = target.get(key)
        if isinstance(child, str):  # a catalog name: the named row with this field overridden
            child = {"name": child}
        elif not isinstance(child, dict):
            child = {}
        target[key] = child = dict(child)
        target = child
    target[keys[-1]] = value


def _scenario_errors(err: SpecError, values: dict[str, Any],
                     common: set[tuple[str, str]] = frozenset()) -> list[FieldError]:
    """A scenario's spec errors, filed under the axis that made the field bad, else under the base. An error in
    the axis's own field names only that axis's value (the other axes did not cause it); one that every scenario
    has (`common`) is the base's; one elsewhere in an axis's section names the whole scenario."""
    out = []
    for e in err.errors:
        axis = next((p for p in values if e.field == p or e.field.startswith(p + ".")), None)
        if axis is None and (e.field, e.message) in common:
            out.append(FieldError(f"base.{e.field}", e.message))
            continue
        label = scenario_label({axis: values[axis]}) if axis else scenario_label(values)
        if axis is None:
            axis = next((p for p in values if p.split(".")[0] == e.field.split(".")[0]), None)
        key = f"vary.{axis}" if axis else f"base.{e.field}"
        out.append(FieldError(key, f"scenario {label}: {e}" if axis else e.message))
    return out


def scenario_label(values: Mapping[str, Any]) -> str:
    """{cluster.num_gpus: 100, training.precision: fp8}: how a message names a scenario."""
    return "{" + ", ".join(f"{path}: {_short(v)}" for path, v in values.items()) + "}"


def value_text(value: Any) -> str:
    """An axis value as a table or a chart labels it: text as it is, true/false, numbers as JSON writes them, an
    inline object by its name when it has one (an inline node {"name": "6g", ...} is "6g"), else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, Overflow):
        return value.text  # 1e400 as written, not JSON's Infinity
    if isinstance(value, Mapping) and isinstance(value.get("name"), str) and value["name"].strip():
        return value["name"]
    if isinstance(value, float) and math.isfinite(value):
        return fmt_number(value)  # 1e12 as 1000000000000, not JSON's 1000000000000.0
    return json.dumps(value, default=str)


def _short(value: Any) -> str:
    text = value_text(value) if isinstance(value, (str, Overflow)) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _deduplicated(errors: list[FieldError]) -> list[FieldError]:
    """Each message once, and at most MAX_MESSAGES_PER_FIELD per field (then a count of the rest)."""
    per_field: dict[str, list[str]] = {}
    for e in errors:
        messages = per_field.setdefault(e.field, [])
        if e.message not in messages:
            messages.append(e.message)
    out = []
    for field, messages in per_field.items():
        out.extend(FieldError(field, m) for m in messages[:MAX_MESSAGES_PER_FIELD])
        if len(messages) > MAX_MESSAGES_PER_FIELD:
            out.append(FieldError(field, f"and {len(messages) - MAX_MESSAGES_PER_FIELD} more scenarios like these"))
    return out


def _first_repeat(values: list[Any]) -> int | None:
    """The index of the first value that repeats an earlier one (as JSON), or None."""
    seen: set[str] = set()
    for i, value in enumerate(values):
        key = _key(value)
        if key in seen:
            return i
        seen.add(key)
    return None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def key_name(key: Any) -> str:
    """A key from untrusted JSON as a printable, bounded, non-blank field name."""
    text = "".join(c if c.isprintable() else "?" for c in str(key))[:80]
    return text if text.strip() else repr(text)
