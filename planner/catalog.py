"""The shipped hardware catalog and model presets, read from `fixtures/*.json`.

The fixtures are Django fixtures (a list of {"model", "pk", "fields"}), which the web app loads into its
database and lets people edit in the admin. The engine never reads that database: the web app hands it rows
as plain dicts. This module reads the same files as plain JSON so the command line can resolve catalog names
(`"gpu": "H100 SXM5 80GB"`) without Django.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .spec import FABRIC_FIELDS, GPU_FIELDS, MODEL_FIELDS, NODE_FIELDS, Field, section_problems

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"

# fixture model label -> (catalog section, the spec fields a row contributes)
SECTIONS: dict[str, tuple[str, tuple[Field, ...]]] = {
    "webui.gputype": ("gpu", GPU_FIELDS),
    "webui.nodetype": ("node", NODE_FIELDS),
    "webui.fabric": ("fabric", FABRIC_FIELDS),
    "webui.modelpreset": ("model", MODEL_FIELDS),
}

Catalog = dict[str, dict[str, dict[str, Any]]]


def spec_fields_of(section: str, row: dict[str, Any]) -> dict[str, Any]:
    """Keep only the spec fields of a catalog row (rows also carry source notes and the like)."""
    wanted = next(fields for sec, fields in SECTIONS.values() if sec == section)
    return {f.name: row[f.name] for f in wanted if f.name in row and row[f.name] is not None}


def load_catalog(directory: Path | str | None = None) -> Catalog:
    """{"gpu"|"node"|"fabric"|"model": {name: spec fields}} from every fixture file in `directory`."""
    return catalog_of_rows(row for path in sorted(Path(directory or FIXTURES_DIR).glob("*.json"))
                           for row in json.loads(path.read_text()))


def catalog_of_rows(rows: Any, check: bool = False) -> Catalog:
    """The catalog of fixture-format rows ({"model": "webui.gputype", "fields": {"name": ..., ...}}), such as
    `manage.py catalog export` writes from the web app's database. Rows of other models are skipped; a row that
    is not of that shape, or with `check` one whose values the spec's field tables refuse, is a ValueError naming
    it (a spec naming the row would otherwise get the row's problems as its own fields')."""
    catalog: Catalog = {section: {} for section, _ in SECTIONS.values()}
    for i, row in enumerate(rows):
        label = row.get("model", "") if isinstance(row, dict) else None
        if label not in SECTIONS:
            if label is None:
                raise ValueError(f"row {i + 1} is not an object")
            continue
        fields = row.get("fields")
        if not isinstance(fields, dict) or not isinstance(fields.get("name"), str):
            raise ValueError(f"row {i + 1} ({label}) has no \"fields\" object with a \"name\"")
        section, spec_fields = SECTIONS[label]
        values = spec_fields_of(section, fields)
        problems = section_problems(values, spec_fields) if check else []
        if problems:
            said = "; ".join(f"{p.field}: {p.message}" for p in problems[:3])
            raise ValueError(f"row {i + 1} ({label} {fields['name'].strip()[:60]!r}): {said}")
        catalog[section][fields["name"].strip()] = values
    return catalog
