"""Untrusted JSON is decoded with its nesting bounded: a ValueError, like any bad JSON, never a RecursionError."""
from __future__ import annotations

import json

import pytest

from planner import SpecError, jsonio, parse_spec


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


@pytest.mark.parametrize("literal, message", [
    ("1e400", "must be at most 16777216"), ("-1E+400", "must be at least 1"), ("1.5e999", "must be at most 16777216"),
    ("Infinity", "must be a number, not Infinity"), ("NaN", "must be a number, not NaN"),
    # An integer of 5,000 digits was "Exceeds the limit (4300 digits) for integer string conversion ... use
    # sys.set_int_max_str_digits()" from Python's decoder.
    ("9" * 5000, "must be at most 16777216"), ("-" + "9" * 400, "must be at least 1")])
def test_a_number_past_a_double_is_past_the_bound_as_the_same_text_is(gpt3_doc, literal, message):
    # JSON's 1e400 decodes to inf, as the non-standard Infinity does: it was "not a number, Infinity", where the
    # text "1e400" (a query string, a form box) is "must be at most ...". A number written out is a number.
    text = json.dumps(gpt3_doc).replace('"global_batch": 1536', f'"global_batch": {literal}')
    with pytest.raises(SpecError) as err:
        parse_spec(jsonio.loads(text))
    assert err.value.as_dict()["training.global_batch"][0].startswith(message)


def test_integers_a_double_holds_stay_integers():
    assert jsonio.loads("[12, -3, " + "9" * 309 + "]") == [12, -3, int("9" * 309)]
    assert isinstance(jsonio.loads("9" * 310), jsonio.Overflow)


def test_an_overflowing_number_where_text_belongs_is_a_number(gpt3_doc):
    text = json.dumps(gpt3_doc).replace('"name": "GPT-3 175B"', '"name": 1e400')
    with pytest.raises(SpecError) as err:
        parse_spec(jsonio.loads(text))
    assert err.value.as_dict()["model.name"] == ["must be a string, not a number"]
