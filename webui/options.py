"""Modelling options: which of them a request set and which the engine assumed.

A modelling option is a field of the engine's training or GPU table (planner/spec.py) that has a value of its
own when left out: a mechanism (`training.tp_comm_overlap`) takes the engine's default, a GPU constant
(`cluster.gpu.gemm_efficiency`) the catalog row's value, or the engine's default for a GPU the catalog does not
know. The list is read from the field tables, so an option the engine adds shows up without a change here.

What a request stated is known only when it arrives (the plan keeps the canonical spec, every default filled
in), so `option_sources` runs at submission and the plan stores its answer (`Plan.option_sources`); the plan
page and the API read it back with `plan_options`.
"""
from __future__ import annotations

from typing import Any, Mapping

from planner.spec import REQUIRED, SECTIONS, Field, unmodified_name
from planner.stacks import preset

OPTION_SECTIONS = ("training", "cluster.gpu")
# The page words them (plan_detail.html): stated; the named GPU's catalog row; the named training stack's preset
# (training.framework, planner/stacks.py); the engine's default.
REQUEST, CATALOG, STACK, DEFAULT = "request", "catalog", "stack", "default"


def option_fields() -> list[tuple[str, Field]]:
    """(dotted spec path, field) of every modelling option, in the field tables' order. A free-text field
    (a name) is no option; nor is one whose default means "derive it" (None) or "required"."""
    return [(f"{section}.{f.name}", f) for section in OPTION_SECTIONS for f in SECTIONS[section]
            if f.default is not REQUIRED and f.default is not None and (f.kind is not str or f.choices)]


def _at(document: Any, path: str) -> Any:
    """The value at a dotted path of a spec document; None where it is absent (or a catalog name stands)."""
    for key in path.split("."):
        if not isinstance(document, Mapping):
            return None
        document = document.get(key)
    return document


def _catalog_row(data: Any, section: str, catalog: Mapping[str, Mapping] | None) -> Mapping | None:
    """The catalog row a hardware section of the request names (by a bare name or an inline object's name)."""
    if not section.startswith("cluster."):
        return None
    entry = _at(data, section)
    name = entry.get("name") if isinstance(entry, Mapping) else entry
    table = (catalog or {}).get(section.split(".", 1)[1])
    return table.get(name.strip()) if isinstance(name, str) and table is not None else None


def option_sources(*, data: Any, catalog: Mapping[str, Mapping] | None) -> dict[str, str]:
    """{path: "request" | "stack" | "catalog" | "default"} for a request document that `parse_spec` accepted:
    stated in it, else the named training stack's preset value, else the named catalog row's value, else the
    engine's default (the order `parse_spec` applies)."""
    sources = {}
    stack = preset(_at(data, "training.framework"))
    for path, f in option_fields():
        section = path.rsplit(".", 1)[0]
        stated = _at(data, path) not in (None, "")
        sources[path] = REQUEST if stated else _assumed(section, f, stack, _catalog_row(data, section, catalog))[0]
    return sources


def unstated(*, data: dict[str, Any], catalog: Mapping[str, Mapping] | None) -> dict[str, Any]:
    """The request with each option that holds the value it would be assumed to have left out (a copy).

    The form sends every field, so a field only counts as set when it differs from the default it showed.
    Leaving out a value equal to what the engine assumes in its place changes nothing the engine reads.
    """
    out = {key: dict(value) if isinstance(value, Mapping) else value for key, value in data.items()}
    if isinstance(out.get("cluster"), dict):
        out["cluster"] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in out["cluster"].items()}
    stack = preset(_at(out, "training.framework"))  # "generic", which the loop may leave out, sets nothing
    for path, f in option_fields():
        section, name = path.rsplit(".", 1)
        holder = _at(out, section)
        if not isinstance(holder, dict) or holder.get(name) in (None, ""):
            continue
        _, assumed = _assumed(section, f, stack, _catalog_row(out, section, catalog))
        if _same(holder[name], assumed, f):
            holder[name] = None
    return out


def _assumed(section: str, f: Field, stack: Mapping[str, Any], row: Mapping | None) -> tuple[str, Any]:
    """(source, value) an option the request leaves out takes, in the order `parse_spec` applies: the named
    training stack's setting, else the named catalog row's value, else the engine's default."""
    if section == "training" and f.name in stack:
        return STACK, stack[f.name]
    if row is not None and row.get(f.name) is not None:
        return CATALOG, row[f.name]
    return DEFAULT, f.default


def _same(value: Any, assumed: Any, f: Field) -> bool:
    """Whether a form value (text for numbers, as posted) is the assumed one."""
    if f.kind in (int, float) and isinstance(value, str):
        try:
            return float(value) == float(assumed)
        except ValueError:
            return False
    return value == assumed


def plan_options(*, spec: Any, sources: Any) -> list[dict[str, Any]]:
    """Each modelling option of a saved plan: {"field", "value", "source", "assumed", "help"}. The value is the
    one the engine used (the canonical spec); "source" and "assumed" are None for a plan saved before they were
    recorded. An option the saved spec lacks (added to the engine later) is left out."""
    recorded = sources if isinstance(sources, Mapping) and sources else None
    options = []
    for path, f in option_fields():
        section, name = path.rsplit(".", 1)
        holder = _at(spec, section)
        if not isinstance(holder, Mapping) or name not in holder:
            continue
        source = recorded.get(path) if recorded else None
        source = source if source in (REQUEST, CATALOG, STACK, DEFAULT) else None
        row = holder.get("name") if source == CATALOG else None
        options.append({"field": path, "value": holder[name], "unit": f.unit, "source": source,
                        "assumed": None if source is None else source != REQUEST, "help": f.help,
                        "catalog_row": catalog_name(row) if isinstance(row, str) else None})
    return options


def catalog_name(name: str) -> str:
    """The catalog row a section's values came from: "H100 SXM5 80GB" for a GPU the request changed, which the
    engine names "H100 SXM5 80GB (modified)" (planner.spec.modified_name)."""
    return unmodified_name(name) or name
