"""Untrusted JSON is decoded with its nesting bounded: a ValueError, like any bad JSON, never a RecursionError."""
from __future__ import annotations

import pytest

from planner import jsonio


def test_nesting_up_to_the_bound_decodes():
    value = jsonio.loads("[" * 32 + "]" * 32)
    for _ in range(31):
        (value,) = value
    assert value == []
    assert jsonio.loads('{"a": {"b": [1, {"c": 2}]}}') == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.parametrize("text", ["[" * 33 + "]" * 33, '{"a": ' * 40 + "1" + "}" * 40, "[" * 100_000 + "]" * 100_000])
def test_deeper_nesting_is_bad_input(text):
    with pytest.raises(ValueError, match="nested more than 32 levels deep"):
        jsonio.loads(text)
