"""The placement planner's engine: pure Python, numpy and networkx; no Django.

Public entry points:
    parse_spec(data, catalog=None) -> PlanSpec     validate a spec document (raises SpecError)
    plan(spec, top=10) -> dict                     search the layouts and return the JSON-able answer
"""
from .errors import FieldError, SpecError
from .spec import PlanSpec, parse_spec

__all__ = ["FieldError", "PlanSpec", "SpecError", "parse_spec"]
