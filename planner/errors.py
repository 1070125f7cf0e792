"""Exceptions the engine raises at its boundary.

`SpecError` is the only exception a caller should ever need to catch for bad input: it carries every problem
found, each naming the spec field and the rule it breaks, so the CLI, the JSON API and the form can all show
the same message next to the same field.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    field: str      # dotted path into the spec, e.g. "model.heads"
    message: str    # the rule, e.g. "must divide model.hidden (12288)"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class SpecError(ValueError):
    """Bad input. `errors` lists every problem found, in spec order."""

    def __init__(self, errors: list[FieldError]):
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))

    @classmethod
    def one(cls, field: str, message: str) -> "SpecError":
        return cls([FieldError(field, message)])

    def as_dict(self) -> dict[str, list[str]]:
        """{field: [messages]}: the shape the JSON API returns with a 400."""
        out: dict[str, list[str]] = {}
        for e in self.errors:
            out.setdefault(e.field, []).append(e.message)
        return out
