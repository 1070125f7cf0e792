"""Goal arithmetic: time to train, GPU-hours, cost, meeting a goal, the best scenario, the Pareto front."""
from __future__ import annotations

import pytest

from planner import SpecError
from planner.whatif.goal import Goal, best, meets, miss_advice, outcome, pareto_front, parse_goal, verdict


def test_time_gpu_hours_and_cost_follow_from_whole_steps():
    # 15T tokens in steps of 15M tokens = 1e6 steps of 10 s = 1e7 s = 115.74 days; × 1,024 GPUs × 24 h =
    # 2,844,444 GPU-hours.
    out = outcome(step_time_s=10.0, tokens_per_step=15e6, num_gpus=1024, tokens=15e12, price_per_gpu_hour=2.0)
    assert out["time_to_train_days"] == pytest.approx(1e7 / 86400, rel=1e-5)
    assert out["gpu_hours"] == pytest.approx(1e7 * 1024 / 3600, rel=1e-5)
    assert out["cost"] == pytest.approx(2 * 1e7 * 1024 / 3600, rel=1e-5)
    # A part of a step is a whole step: 1 token takes one step, 15e6 + 1 tokens two.
    assert outcome(step_time_s=10.0, tokens_per_step=15e6, num_gpus=8, tokens=1,
                   price_per_gpu_hour=None)["time_to_train_days"] == pytest.approx(10 / 86400, rel=1e-5)
    assert outcome(step_time_s=10.0, tokens_per_step=15e6, num_gpus=8, tokens=15e6 + 1,
                   price_per_gpu_hour=None)["time_to_train_days"] == pytest.approx(20 / 86400, rel=1e-5)


def test_without_a_price_or_a_layout_the_unknowns_are_none():
    assert outcome(step_time_s=1.0, tokens_per_step=1e6, num_gpus=8, tokens=1e12,
                   price_per_gpu_hour=None)["cost"] is None
    assert outcome(step_time_s=None, tokens_per_step=1e6, num_gpus=8, tokens=1e12, price_per_gpu_hour=2.0) == {
        "time_to_train_days": None, "gpu_hours": None, "cost": None}


def test_a_goal_is_met_within_the_deadline_and_the_budget():
    goal = Goal(tokens=1e12, deadline_days=90, budget_usd=1e6)
    assert meets(goal, {"time_to_train_days": 89.9, "cost": 9e5}) is True
    assert meets(goal, {"time_to_train_days": 90.1, "cost": 9e5}) is False
    assert meets(goal, {"time_to_train_days": 80, "cost": 2e6}) is False
    assert meets(goal, {"time_to_train_days": 80, "cost": None}) is False  # unpriced: the budget cannot be judged
    assert meets(Goal(1e12, 90), {"time_to_train_days": 80, "cost": None}) is True
    assert meets(goal, {"time_to_train_days": None, "cost": None}) is False  # no feasible layout
    assert meets(None, {"time_to_train_days": 1}) is None


def test_the_best_is_the_cheapest_meeting_the_goal_then_the_fewest_gpus():
    rows = [{"meets_goal": True, "cost": 300.0, "gpu_hours": 100, "num_gpus": 64, "time_to_train_days": 5},
            {"meets_goal": False, "cost": 100.0, "gpu_hours": 50, "num_gpus": 8, "time_to_train_days": 99},
            {"meets_goal": True, "cost": 200.0, "gpu_hours": 120, "num_gpus": 128, "time_to_train_days": 4},
            {"meets_goal": True, "cost": 200.0, "gpu_hours": 120, "num_gpus": 64, "time_to_train_days": 6}]
    assert best(rows) == 3
    rows[2]["cost"] = None  # one unpriced: compare GPU-hours across all
    assert best(rows) == 0
    assert best([{**r, "meets_goal": False} for r in rows]) is None


def test_the_pareto_front_keeps_points_nothing_beats_on_both():
    points = [(10, 5), (5, 10), (7, 7), (8, 8), (5, 12), (12, 1)]
    assert pareto_front(points) == [1, 2, 0, 5]


def test_a_bad_goal_names_each_field():
    with pytest.raises(SpecError) as caught:
        parse_goal({"tokens": -1, "deadline_days": "soon", "budget": 0, "extra": 1})
    errors = caught.value.as_dict()
    assert set(errors) == {"goal.tokens", "goal.deadline_days", "goal.budget", "goal.extra"}
    assert "must be more than 0" in errors["goal.tokens"][0]
    assert parse_goal(None) is None
    assert parse_goal({"tokens": "15e12", "deadline_days": 90}).as_dict() == {"tokens": 15e12, "deadline_days": 90}
    with pytest.raises(SpecError):
        parse_goal([1])


def test_a_plans_time_to_train_is_whole_steps(gpt3_doc, catalog):
    from planner import parse_spec
    from planner.report import plan

    gpt3_doc["training"]["tokens"] = 1  # less than one step's 1536 × 2048 tokens: still one whole step
    best = plan(parse_spec(gpt3_doc, catalog), top=1)["plans"][0]
    assert best["time_to_train_s"] == pytest.approx(best["step_time_s"], rel=1e-5)  # 6 digits
    gpt3_doc["training"]["tokens"] = 1536 * 2048 * 1000 + 1
    best = plan(parse_spec(gpt3_doc, catalog), top=1)["plans"][0]
    assert best["time_to_train_s"] == pytest.approx(1001 * best["step_time_s"], rel=1e-5)


def test_each_miss_says_why_and_the_advice_follows_the_causes():
    goal = Goal(tokens=1e12, deadline_days=30, budget_usd=1e6)
    late = {"time_to_train_days": 41.04, "cost": 5e5, "gpu": "H100 SXM5 80GB"}
    dear = {"time_to_train_days": 9.1, "cost": 7_612_000.4, "gpu": "B200"}
    unpriced = {"time_to_train_days": 4.6, "cost": None, "gpu": "H100 SXM5 80GB (modified)"}
    none_fits = {"time_to_train_days": None, "cost": None, "gpu": "B200"}
    assert verdict(goal, late) == (False, "41 days, past the 30-day deadline")
    # Just past: as many decimals as tell the two apart ("130 days, past the 130-day deadline" said nothing)
    close = Goal(tokens=1e12, deadline_days=130)
    assert verdict(close, {"time_to_train_days": 130.001, "cost": None}) == (
        False, "130.001 days, past the 130-day deadline")
    assert verdict(Goal(tokens=1e12, deadline_days=1200), {"time_to_train_days": 1200.4, "cost": None}) == (
        False, "1,200.4 days, past the 1,200-day deadline")
    assert verdict(Goal(tokens=1e12, deadline_days=52.353), {"time_to_train_days": 52.36, "cost": None}) == (
        False, "52.360 days, past the 52.353-day deadline")  # "52.4 days, past the 52.4-day deadline"
    assert verdict(Goal(tokens=1e12, deadline_days=52.353), {"time_to_train_days": 52.3531, "cost": None}) == (
        False, "52.3531 days, past the 52.353-day deadline")
    assert verdict(goal, dear) == (False, "costs 7,612,000 USD, over the 1,000,000 USD budget")
    assert verdict(goal, unpriced) == (False, "no price for H100 SXM5 80GB (modified) (a modified GPU has no price "
                                              "of its own), so no cost to hold to the budget")
    assert verdict(goal, none_fits) == (False, None)  # its layout cell says so
    # Every scenario on time and over budget was told "more GPUs, faster GPUs or a later deadline may".
    assert miss_advice(goal, [dear, dear]) == (
        "2 cost more than the budget. What may help: a larger budget, or fewer GPU-hours (fewer or cheaper GPUs, "
        "if the deadline allows).")
    assert miss_advice(goal, [late, dear, unpriced]) == (
        "1 misses the deadline; 1 costs more than the budget; 1 has no GPU price to hold to the budget. What may "
        "help: more or faster GPUs, or a later deadline; a larger budget, or fewer GPU-hours (fewer or cheaper GPUs, "
        "if the deadline allows); a price for each GPU in the catalog (a modified GPU has none of its own).")


def test_a_goal_value_that_is_not_a_number_is_said_in_json():
    with pytest.raises(SpecError) as err:
        parse_goal({"tokens": 1e12, "deadline_days": True})
    assert err.value.as_dict()["goal.deadline_days"] == ["must be a number, not true"]  # not Python's 'True'
    with pytest.raises(SpecError) as err:  # the sweep page writes a budget as "12,000,000 USD"
        parse_goal({"tokens": 1e12, "deadline_days": 30, "budget": "12,000,000"})
    assert err.value.as_dict()["goal.budget"] == [
        "must be a number, not '12,000,000': write 12000000 without thousands separators"]


@pytest.mark.parametrize("text", ['{"tokens": 1e400, "deadline_days": 30}', '{"tokens": "1e400", "deadline_days": 30}',
                                  '{"tokens": 1' + "0" * 400 + ', "deadline_days": 30}'])
def test_a_goal_number_past_a_double_is_past_the_bound_as_a_spec_field_says(text):
    from planner import jsonio

    with pytest.raises(SpecError) as err:
        parse_goal(jsonio.loads(text))
    # not "(got inf..., 3 digits)" or "(got 1e400..., 5 digits)"
    assert err.value.as_dict()["goal.tokens"] == ["must be more than 0 and at most 1e+16 tokens"]
