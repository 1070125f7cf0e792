"""Mend text saved with a lone UTF-16 surrogate before requests refused it (planner.spec.text_problem).

JSON's "\\ud800" escape decodes to half of a surrogate pair, which UTF-8 cannot encode: a plan whose model name
held one failed to render, for good (its page, the admin's plan list, compare, its sweep). Such a character is
replaced with U+FFFD, the replacement character, so each of those plans shows again with everything else it saved.
Only SQLite can hold one: PostgreSQL's jsonb and text refuse it on the way in.
"""
from __future__ import annotations

from django.db import migrations
from django.db.models import Q, TextField
from django.db.models.functions import Cast

REPLACEMENT = "\ufffd"

# {model: its JSON columns}. Text columns cannot hold one: SQLite's driver refuses to encode it on the way in.
COLUMNS = {
    "Plan": ("spec", "result", "option_sources"),
    "Sweep": ("base", "vary", "axes", "goal"),
    "SweepScenario": ("values",),
}


def mended(value):
    """`value` (decoded JSON) with every lone surrogate replaced, and whether there was one."""
    if isinstance(value, str):
        if not any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            return value, False
        return "".join(REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF else c for c in value), True
    if isinstance(value, list):
        items = [mended(v) for v in value]
        return [v for v, _ in items], any(hit for _, hit in items)
    if isinstance(value, dict):
        items = [(mended(k), mended(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in items}, any(a or b for (_, a), (_, b) in items)
    return value, False


def mend(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return  # PostgreSQL's jsonb refuses the escape on the way in: nothing to mend
    for name, columns in COLUMNS.items():
        model = apps.get_model("webui", name)
        # SQLite keeps the JSON as written by json.dumps, which escapes every surrogate, paired or lone, as "\\udXXX"
        # (LIKE ignores the case of the hex): only rows holding one can need mending.
        texts = {f"_text_{c}": Cast(c, TextField()) for c in columns}
        holds = Q()
        for alias in texts:
            holds |= Q(**{f"{alias}__contains": "\\ud"})
        for row in model.objects.annotate(**texts).filter(holds).only("pk", *columns).iterator():
            changed = {}
            for c in columns:
                value, hit = mended(getattr(row, c))
                if hit:
                    changed[c] = value
            if changed:
                model.objects.filter(pk=row.pk).update(**changed)


class Migration(migrations.Migration):

    dependencies = [
        ("webui", "0009_model_router_groups"),
    ]

    operations = [
        migrations.RunPython(mend, migrations.RunPython.noop),
    ]
