"""Training-stack presets: the training options a stack (Megatron-Core, torchtitan, PyTorch FSDP) runs with.

`training.framework` names one; parse_spec fills the training options a request leaves out from it, the way a
catalog name fills a GPU's constants, so a request states only where it differs from its stack. The presets are
data (`planner/data/stacks.json`), each value with its source, and each agrees with the published rows of its
stack (tests/engine/test_stacks.py). "generic" is no preset: every option at the engine's default.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

STACKS_PATH = Path(__file__).with_name("data") / "stacks.json"
GENERIC = "generic"

_DOC = json.loads(STACKS_PATH.read_text())
STACKS: dict[str, dict[str, Any]] = _DOC["stacks"]
FRAMEWORKS = (GENERIC, *STACKS)
# The training options some stack sets (a stack leaves the others at the engine's defaults).
SET_BY_A_STACK = frozenset(name for entry in STACKS.values() for name in entry["options"])
# Other names a request may give a stack by (issue #8 calls Megatron-Core's "megatron"); the spec keeps the
# canonical name.
ALIASES = {"megatron": "megatron_core", "megatron-core": "megatron_core", "mcore": "megatron_core"}


def canonical(name: Any) -> Any:
    """A stack's own name for a name a request may use ("megatron" -> "megatron_core"); anything else as it is."""
    return ALIASES.get(name.strip().lower(), name) if isinstance(name, str) else name


def preset(name: Any) -> dict[str, Any]:
    """The options a stack sets ({} for "generic", or a name that is no stack: parse_spec reports that)."""
    entry = STACKS.get(canonical(name).strip()) if isinstance(name, str) else None
    return dict(entry["options"]) if entry else {}


def with_stack(training: Any) -> Any:
    """The training section with the options it leaves out (absent, null or "") taken from its framework's preset,
    and the framework by its canonical name (ALIASES). Anything that is not an object is returned as it is, for
    parse_spec to report."""
    if not isinstance(training, Mapping):
        return training
    stated = {k: v for k, v in training.items() if v is not None and v != ""}
    if "framework" in stated:
        stated["framework"] = canonical(stated["framework"])
    return {**training, **preset(stated.get("framework")), **stated}


def describe() -> dict[str, Any]:
    """The presets for the form: {name: {"label", "options", "sources"}}."""
    return {name: {"label": s["label"], "options": dict(s["options"]), "sources": dict(s["sources"])}
            for name, s in STACKS.items()}
