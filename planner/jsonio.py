"""Decoding JSON from untrusted input (the API, the CLI, catalog imports) with its nesting bounded.

Python's decoder recurses once per level and gives up near 1,000 levels with a RecursionError, and code that walks
the decoded value (deepcopy, json.dumps) recurses too; a spec is at most four levels deep, so anything past
MAX_DEPTH is refused as bad input, with a ValueError like the decoder's own.
"""
from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32  # a plan spec nests 3 levels (cluster.gpu.name), a sweep 5 (vary.model: [{...}])
# The most any door reads: the API's request body (webui.settings.DATA_UPLOAD_MAX_MEMORY_SIZE) and the CLI's file.
MAX_BYTES = 1024 * 1024
TOO_LARGE = "is too large (at most 1 MiB)"


class Overflow(float):
    """A JSON number past the largest double (1e400, -1e400): +-inf, like the non-standard literal Infinity, but
    a number the user wrote, so the engine says it is past a field's bound, as it does for the text "1e400".
    `text` is the number as written, for messages that quote it."""

    text: str


def _float(text: str) -> float:
    value = float(text)
    if math.isfinite(value):
        return value
    overflow = Overflow(value)
    overflow.text = text[:40]
    return overflow


def _int(text: str) -> int | float:
    """A JSON integer; one of more digits than any double's integer part (309) is an Overflow as 1e400 is.
    Python refuses to read an integer of more than 4,300 digits, with a message about its own settings."""
    return _float(text) if len(text.lstrip("-")) > 309 else int(text)


def loads(text: str | bytes) -> Any:
    """json.loads, raising ValueError (never RecursionError) for text nested deeper than MAX_DEPTH. A number
    too large for a double is an Overflow, not the inf that Infinity also decodes to. Bytes are read as JSON's
    encodings are told apart (UTF-8, with or without a byte-order mark, UTF-16 or UTF-32), by every door alike;
    `error_text` says any ValueError in the words every door uses."""
    if isinstance(text, (bytes, bytearray)):
        encoding = json.detect_encoding(text)
        try:
            text = bytes(text).decode(encoding)
        except UnicodeDecodeError as exc:
            raise ValueError(f"is not {encoding.upper().replace('-SIG', '')} text (byte 0x{exc.object[exc.start]:02x} "
                             f"at position {exc.start:,})") from None
    if not text.strip():
        raise ValueError("is empty (a JSON object was expected)")
    try:
        data = json.loads(text, parse_float=_float, parse_int=_int, object_pairs_hook=_object)
    except RecursionError:
        raise ValueError(f"is nested more than {MAX_DEPTH} levels deep") from None
    if _depth_exceeds(data, MAX_DEPTH):
        raise ValueError(f"is nested more than {MAX_DEPTH} levels deep")
    return data


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: of {"num_gpus": 64, "num_gpus": 8} Python keeps the last
    silently, where the writer may have meant either."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"is ambiguous: the key {twice[:40]!r} appears twice in one object (give it once)")
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


def error_text(exc: ValueError) -> str:
    """A decoding problem from `loads` as every door words it, after the name of what was read ("spec: ..."):
    "is not valid JSON: Unterminated string starting at line 1, column 193"."""
    if isinstance(exc, json.JSONDecodeError):
        return f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    text = str(exc)
    return text if text.startswith("is ") else f"is not valid JSON: {text}"
