"""How numbers read on the plan page."""
from __future__ import annotations

import json

import pytest

from webui.templatetags import planner_format as fmt


@pytest.mark.parametrize("seconds,text", [(0.0123, "12.3 ms"), (2.9, "2.9 s"), (600, "10 min"), (36000, "10 h"),
                                          (1382400, "16 days"), (3 * 365 * 86400, "3 years"), (None, "–")])
def test_durations_read_in_the_largest_sensible_unit(seconds, text):
    assert fmt.duration(seconds) == text


# Ranked layouts 9.996, 10.031 and 10.037 s read "9.97 s, 10 s, 10 s" at three digits.
@pytest.mark.parametrize("seconds,text", [(9.996, "9.996 s"), (10.031, "10.03 s"), (10.037, "10.04 s"),
                                          (10.98, "10.98 s"), (0.12345, "123.5 ms"), (654.6, "10.91 min"),
                                          (10.104, "10.10 s"), (9.9996, "10.00 s"), (16.2, "16.20 s"),
                                          (0.99996, "1.000 s"), (119.996, "2.000 min")])  # was "1000 ms"
def test_step_times_read_to_four_digits(seconds, text):
    assert fmt.step_time(seconds) == text


# Compare's rows: "2.320 min" beside "93.93 s" had to be converted to be read.
@pytest.mark.parametrize("values,texts", [
    ([139.2, 93.93], ["139.2 s", "93.93 s"]), ([93.93, None, 139.2], ["93.93 s", "–", "139.2 s"]),
    ([0.5, 21600], ["500.0 ms", "6.000 h"]),  # 21,600,000 ms says less than 6 h: each in its own unit
    # "984.0 ms" sat above "1.017 s" in the ranked table: the next larger unit, where the shortest's needs 4 digits
    ([0.984, 1.017, 1.2], ["0.9840 s", "1.017 s", "1.200 s"]),
    ([4.382, 3.565, 0.0012], ["4.382 s", "3.565 s", "1.200 ms"]),  # not "4382 ms" beside "1.200 ms"
    ([None, "x"], ["–", "–"]), ([float("nan"), 3.0], ["–", "3.000 s"])])
def test_durations_side_by_side_read_in_one_unit(values, texts):
    from planner.units import durations

    assert durations(values, digits=4, zeros=True) == texts


# 1.5 tokens read "2".
@pytest.mark.parametrize("value,text", [(15e12, "15T"), (1e12, "1T"), (1e15, "1,000T"), (1e16, "10,000T"),
                                        (999.6e12, "1,000T"), (999.4e12, "999T"),
                                        (2.1e9, "2.1B"), (45000, "45,000"),
                                        (1.5, "1.5"), (1.0, "1"), ("x", "–")])
def test_counts_read_as_people_say_them(value, text):
    assert fmt.count(value) == text


def test_rates_percentages_and_reasons():
    assert fmt.number(724399.4) == "724,399" and fmt.number(0.4493) == "0.449"
    assert fmt.percent(0.663) == "66.3%"
    assert fmt.reason("tp_crosses_nvlink_domain") == "TP crosses NVLink domain"
    assert fmt.reason("moe_tp_needs_sp") == "MoE TP needs SP"  # was "Moe TP needs sp"
    assert fmt.by_count({"a": 1, "b": 5}) == [("b", 5), ("a", 1)]


def test_the_request_reads_in_the_engines_field_order_whatever_the_database_gives_back():
    """PostgreSQL's jsonb hands keys back sorted by length; the plan page shows the spec in the tables' order."""
    shuffled = {"layout": {"pp": 2, "tp": 8}, "cluster": {"node": "DGX H100", "num_gpus": 64, "gpu": "H100"},
                "training": {"precision": "bf16", "global_batch": 8}, "model": {"vocab": 5, "name": "m", "layers": 2}}
    text = fmt.as_spec_json(shuffled)
    assert list(json.loads(text)) == ["model", "training", "cluster", "layout"]
    assert list(json.loads(text)["model"]) == ["name", "layers", "vocab"]
    assert list(json.loads(text)["cluster"]) == ["num_gpus", "gpu", "node"]
    assert list(json.loads(text)["training"]) == ["global_batch", "precision"]
    assert list(json.loads(text)["layout"]) == ["tp", "pp"]


def test_a_plans_title_writes_its_gpu_count_as_the_tables_do():
    from webui.models import Plan
    spec = {"model": {"name": "Llama 3 405B"}, "cluster": {"num_gpus": 16384, "gpu": {"name": "H100 SXM5 80GB"}}}
    assert Plan(spec=spec).title == "Llama 3 405B on 16,384 × H100 SXM5 80GB"


@pytest.mark.parametrize("value,text", [(4382.3, "4,382"), (999.96, "1,000"), (12345.6, "12,346"), (9.9996, "10.00"),
                                        (0.0012, "0.001200"), (3.37e-05, "0.00003370"), (0.0, "0.000")])
def test_significant_digits_keep_thousands_separated(value, text):
    from planner.units import significant

    assert significant(value, 4) == text


@pytest.mark.parametrize("value,text", [(52.353, "52.353"), (90.0, "90"), (1200, "1,200"), (None, "None")])
def test_an_exact_number_reads_as_given(value, text):
    assert fmt.exact(value) == text  # a deadline of 52.353 days read "within 52.4 days"
