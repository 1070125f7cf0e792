"""How numbers read on the plan page."""
from __future__ import annotations

import pytest

from webui.templatetags import planner_format as fmt


@pytest.mark.parametrize("seconds,text", [(0.0123, "12.3 ms"), (2.9, "2.9 s"), (600, "10 min"), (36000, "10 h"),
                                          (1382400, "16 days"), (3 * 365 * 86400, "3 years"), (None, "–")])
def test_durations_read_in_the_largest_sensible_unit(seconds, text):
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize("value,text", [(15e12, "15T"), (1e12, "1T"), (2.1e9, "2.1B"), (45000, "45,000"),
                                        ("x", "–")])
def test_counts_read_as_people_say_them(value, text):
    assert fmt.count(value) == text


def test_rates_percentages_and_reasons():
    assert fmt.number(724399.4) == "724,399" and fmt.number(0.4493) == "0.449"
    assert fmt.percent(0.663) == "66.3%"
    assert fmt.reason("tp_crosses_nvlink_domain") == "TP crosses NVLink domain"
    assert fmt.by_count({"a": 1, "b": 5}) == [("b", 5), ("a", 1)]
