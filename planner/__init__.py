"""The placement planner's engine: pure Python, numpy and networkx; no Django.

Public entry points:
    parse_spec(data, catalog=None) -> PlanSpec     validate a spec document (raises SpecError)
    plan(spec, top=10) -> dict                     search the layouts and return the JSON-able answer
"""
from .errors import FieldError, SpecError
from .spec import TOP, PlanSpec, parse_spec


def plan(spec: PlanSpec, top: int = TOP.default) -> dict:
    """Search every layout of `spec`; see planner.report.plan. Imported lazily so that parsing a spec
    does not load the cost model."""
    from .report import plan as _plan
    return _plan(spec, top=top)


def estimate_layouts(spec: PlanSpec) -> int:
    """Upper bound on the layouts plan(spec) will consider (see planner.search.estimate_layouts)."""
    from .search import estimate_layouts as _estimate
    return _estimate(spec)


__all__ = ["FieldError", "PlanSpec", "SpecError", "estimate_layouts", "parse_spec", "plan"]
