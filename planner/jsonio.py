"""Decoding JSON from untrusted input (the API, the CLI, catalog imports) with its nesting bounded.

Python's decoder recurses once per level and gives up near 1,000 levels with a RecursionError, and code that walks
the decoded value (deepcopy, json.dumps) recurses too; a spec is at most four levels deep, so anything past
MAX_DEPTH is refused as bad input, with a ValueError like the decoder's own.
"""
from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32  # a plan spec nests 3 levels (cluster.gpu.name), a sweep 5 (vary.model: [{...}])


def loads(text: str | bytes) -> Any:
    """json.loads, raising ValueError (never RecursionError) for text nested deeper than MAX_DEPTH."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    if _depth_exceeds(data, MAX_DEPTH):
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return data


def _depth_exceeds(data: Any, limit: int) -> bool:
    """Whether lists/objects nest more than `limit` levels (iterative: no recursion of its own)."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False
