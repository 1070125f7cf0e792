"""Charts are plain Plotly figure dicts built from the stored answer, and survive missing optional keys."""
from __future__ import annotations

import copy
import json

import pytest

from webui import charts, services
from webui.models import Plan

# An answer in the shape of the engine's contract, small enough to check values by hand: two plans on 16 GPUs
# (2 nodes of 8), with one collective split across NVLink and InfiniBand.
ANSWER = {
    "spec": {"cluster": {"gpu": {"memory_gib": 80}}},
    "plans": [
        {"rank": 1, "label": "TP8 PP2 DP1", "step_time_s": 2.0, "mfu": 0.4,
         "time_s": {"compute": 1.5, "bubble": 0.3, "tp_comm": 0.2},
         "memory_gib": {"weights": 10, "gradients": 10, "optimizer": 20, "activations": 15, "other": 2,
                        "total": 57, "capacity": 80, "headroom": 23},
         "comm": [{"group": "tp", "collective": "all_reduce", "fabric": "nvlink", "time_s": 0.4, "exposed_s": 0.2,
                   "time_by_fabric_s": {"nvlink": 0.4}},
                  {"group": "pp", "collective": "send_recv", "fabric": "infiniband", "time_s": 0.1, "exposed_s": 0}]},
        {"rank": 2, "label": "TP4 PP4 DP1", "step_time_s": 2.5, "time_s": {"compute": 1.6, "bubble": 0.9},
         "memory_gib": {"weights": 5, "gradients": 5, "optimizer": 10, "activations": 30, "other": 2, "total": 52}},
    ],
    "candidates": [{"label": "TP8 PP2 DP1", "step_time_s": 2.0, "memory_gib": 57, "pareto": True},
                   {"label": "TP4 PP4 DP1", "step_time_s": 2.5, "memory_gib": 52, "pareto": True},
                   {"label": "TP2 PP8 DP1", "step_time_s": 3.5, "memory_gib": 60, "pareto": False}],
    "placement_map": {"gpus_total": 16, "gpus_shown": 16, "gpus_per_node": 8, "nvlink_domain_gpus": 8,
                      "cells": [{"gpu": g, "node": g // 8, "domain": g // 8, "rank": g, "tp": g % 8, "cp": 0,
                                 "dp": 0, "pp": g // 8, "ep": 0} for g in range(16)]},
}


def test_all_five_charts_are_built_from_a_full_answer():
    figures = charts.plan_figures(ANSWER)
    assert list(figures) == ["step-time", "comm", "memory", "placement", "candidates"]
    json.dumps(figures)  # travels to the page as JSON


def test_the_step_time_chart_stacks_each_part_per_plan():
    fig = charts.step_time_breakdown(ANSWER)
    by_part = {t["name"]: t["x"] for t in fig["data"]}
    assert by_part == {"compute": [1.5, 1.6], "pipeline bubble": [0.3, 0.9], "TP comm": [0.2, 0]}
    assert fig["data"][0]["y"] == ["#1 TP8 PP2 DP1", "#2 TP4 PP4 DP1"]


def test_a_part_no_plan_spends_time_on_gets_no_bar_and_the_legend_clears_the_axis_title():
    answer = copy.deepcopy(ANSWER)
    for p in answer["plans"]:
        p["time_s"]["offload"] = 0.0  # engine 2.7 reports every part, activation offloading included
    fig = charts.legend_below(charts.step_time_breakdown(answer))
    assert [t["name"] for t in fig["data"]] == ["compute", "pipeline bubble", "TP comm"]
    # Two plans: 84 px of plot (140 + 2 x 32 = 204 px less the 70 + 50 px margins). Three entries are one legend
    # row: the bottom margin grows to 62 + 21 px and the figure by as much, so the plot keeps its 84 px, which
    # Plotly's automargin no longer shrinks, and the legend's top is 62 px under it.
    assert fig["layout"]["height"] == 204 + 33 and fig["layout"]["margin"]["b"] == 83
    assert fig["layout"]["legend"]["y"] == pytest.approx(-62 / 84)
    memory = charts.legend_below(charts.memory_breakdown(answer))["layout"]  # five entries: two rows
    assert memory["margin"]["b"] == 62 + 42 and memory["legend"]["y"] == pytest.approx(-62 / 104)
    assert charts.plan_figures(answer)["memory"]["layout"] == memory
    # One trace draws no legend: nothing changes.
    single = {"data": [{"type": "bar", "name": "compute"}], "layout": charts._layout("t", height=300)}
    assert charts.legend_below(copy.deepcopy(single)) == single
    answer["plans"][0]["time_s"]["offload"] = 0.25
    assert "activation offload (host link)" in [t["name"] for t in charts.step_time_breakdown(answer)["data"]]


def test_each_part_of_the_step_time_keeps_its_colour_whichever_parts_a_chart_shows():
    """Red had been CP comm on one plan's page and PP comm on another's: each chart coloured its parts in turn."""
    def colours(time_s: dict) -> dict:
        answer = {"plans": [{"rank": 1, "label": "x", "step_time_s": 1.0, "time_s": time_s}]}
        return {bar["name"]: bar["marker"]["color"] for bar in charts.step_time_breakdown(answer)["data"]}

    with_cp = colours({"compute": 1.0, "cp_comm": 0.1, "pp_comm": 0.2, "dp_comm": 0.1})
    without = colours({"compute": 1.0, "pp_comm": 0.2, "optimizer": 0.01})
    assert with_cp["PP comm"] == without["PP comm"] and with_cp["compute"] == without["compute"]
    assert len(set(charts.TIME_COLOURS.values())) == len(charts.TIME_PARTS)  # no two parts share one


def test_the_comm_chart_splits_each_collective_by_fabric():
    fig = charts.comm_by_fabric(ANSWER)
    bars = {t["name"]: t["x"] for t in fig["data"] if t["type"] == "bar"}
    # The second has no split: its fabric takes all. Fabrics as the pages name them ("roce" was a legend entry).
    assert bars == {"NVLink": [0.4, 0], "InfiniBand": [0, 0.1]}
    assert fig["data"][0]["y"] == ["TP all-reduce", "PP send-recv"]


def test_the_memory_chart_draws_the_capacity_line():
    fig = charts.memory_breakdown(ANSWER)
    assert [t["name"] for t in fig["data"]] == ["weights", "gradients", "optimizer", "activations", "other"]
    assert fig["data"][3]["x"] == [15, 30]  # activations of plans 1 and 2
    assert fig["layout"]["shapes"][0]["x0"] == 80
    # Bars of different GPUs (compare): a capacity tick on each bar, not the first bar's line across all.
    mixed = {"plans": [dict(ANSWER["plans"][0]), dict(ANSWER["plans"][1], memory_gib={"total": 170, "capacity": 180})]}
    fig = charts.memory_breakdown(mixed)
    assert "shapes" not in fig["layout"]
    assert next(t for t in fig["data"] if t["name"] == "capacity")["x"] == [80, 180]


def test_the_placement_map_has_one_row_per_node_and_outlines_each_nvlink_domain():
    fig = charts.placement_map(ANSWER)
    heat = fig["data"][0]
    assert heat["z"] == [[0] * 8, [1] * 8]  # coloured by pipeline stage
    assert heat["text"][1][3] == "TP3 DP0"
    assert [(s["y0"], s["y1"], s["x0"], s["x1"]) for s in fig["layout"]["shapes"]] == [
        (-0.5, 0.5, -0.5, 7.5), (0.5, 1.5, -0.5, 7.5)]


def test_a_map_of_few_nodes_in_many_stages_is_tall_enough_for_the_stage_labels():
    # Two 72-GPU nodes in nine pipeline stages: 200 px high, its colour bar's labels 0-8 printed over each other.
    answer = copy.deepcopy(ANSWER)
    answer["placement_map"] = {"gpus_per_node": 72, "cells": [
        {"gpu": g, "node": g // 72, "domain": 0, "tp": g % 8, "dp": 0, "pp": g // 16} for g in range(144)]}
    fig = charts.placement_map(answer)
    assert fig["data"][0]["colorbar"]["tickvals"] == list(range(9))
    plot = fig["layout"]["height"] - 140
    assert plot >= 16 * 9 and len(fig["data"][0]["z"]) == 2
    assert charts.placement_map(ANSWER)["layout"]["height"] == 140 + 60  # two nodes in two stages: as before


@pytest.mark.parametrize("per_node, dtick", [(8, 1), (36, 1), (72, 2), (1024, 29)])
def test_a_node_of_many_gpus_gets_a_tick_every_few_slots_not_one_a_slot(per_node, dtick):
    """A tick label a slot for 1,024 GPUs a node took Plotly 7 s to lay out, freezing the plan page."""
    answer = {"placement_map": {"gpus_per_node": per_node, "gpus_total": per_node, "gpus_shown": per_node,
                                "cells": [{"gpu": g, "node": 0, "domain": 0, "pp": 0, "tp": g, "dp": 0}
                                          for g in range(per_node)]}}
    axis = charts.placement_map(answer)["layout"]["xaxis"]
    assert axis["dtick"] == dtick and per_node / axis["dtick"] <= charts.MAX_SLOT_TICKS


def test_past_ten_pipeline_stages_no_two_share_a_colour():
    # PP 18 on 72-GPU nodes: stages 0 and 10 were the same blue. 1,296 GPUs: no cell labels, and the subtitle
    # no longer says "label = rank ...".
    answer = copy.deepcopy(ANSWER)
    answer["placement_map"] = {"gpus_per_node": 72, "cells": [
        {"gpu": g, "node": g // 72, "domain": g // 72, "tp": g % 8, "dp": 0, "pp": g // 72} for g in range(1296)]}
    fig = charts.placement_map(answer)
    scale = fig["data"][0]["colorscale"]
    colours = [scale[2 * s][1] for s in range(18)]
    assert len(set(colours)) == 18 and all(scale[2 * s + 1][1] == colours[s] for s in range(18))
    assert "text" not in fig["data"][0] and "hover a GPU for its ranks" in fig["layout"]["title"]["text"]
    assert "label = rank" in charts.placement_map(ANSWER)["layout"]["title"]["text"]


def test_with_context_parallelism_each_gpu_is_labelled_with_its_cp_rank():
    answer = copy.deepcopy(ANSWER)
    for c in answer["placement_map"]["cells"]:  # TP 4 x CP 2 in each node: TP and DP alone repeat
        c.update(tp=c["gpu"] % 4, cp=c["gpu"] // 4 % 2)
    text = charts.placement_map(answer)["data"][0]["text"]
    assert text[0][0] == "TP0 CP0 DP0" and text[0][4] == "TP0 CP1 DP0"
    assert len(set(text[0])) == 8


def test_an_nvlink_domain_larger_than_a_node_is_outlined_across_nodes():
    answer = copy.deepcopy(ANSWER)
    answer["placement_map"] = {"gpus_per_node": 4, "gpus_total": 144, "gpus_shown": 16, "cells": [
        {"gpu": g, "node": g // 4, "domain": 0, "tp": g % 4, "dp": g // 4, "pp": 0} for g in range(16)]}
    fig = charts.placement_map(answer)
    assert len(fig["data"][0]["z"]) == 4
    assert [(s["y0"], s["y1"]) for s in fig["layout"]["shapes"]] == [(-0.5, 3.5)]
    assert "16 of 144 GPUs" in fig["layout"]["title"]["text"]


def test_nodes_left_out_of_a_sampled_map_get_a_row_that_says_so():
    # A sample of NVL72 racks (trays 0-35, then the next stage from tray 54): rows of trays 35 and 54 side by side
    # read as neighbours. The gap gets an empty row naming the trays left out; the domains' outlines stay whole.
    answer = copy.deepcopy(ANSWER)
    nodes = [0, 1, 3, 7, 8]
    answer["placement_map"] = {"gpus_per_node": 4, "gpus_total": 64, "gpus_shown": 20, "cells": [
        {"gpu": 4 * n + g, "node": n, "domain": n // 2, "tp": g, "dp": n, "pp": n // 4}
        for n in nodes for g in range(4)]}
    fig = charts.placement_map(answer)
    heat = fig["data"][0]
    assert heat["y"] == ["node 0", "node 1", "node 2 not shown", "node 3", "nodes 4-6 not shown", "node 7", "node 8"]
    assert heat["z"][2] == [None] * 4 and heat["z"][4] == [None] * 4 and heat["z"][5] == [1] * 4
    assert [(s["y0"], s["y1"]) for s in fig["layout"]["shapes"]] == [(-0.5, 1.5), (2.5, 3.5), (4.5, 5.5), (5.5, 6.5)]
    assert fig["layout"]["height"] == 140 + 30 * 7


@pytest.mark.parametrize("pp, shown", [(4, "the first 64 of each of the 4 pipeline stages"),
                                       (16, "all of pipeline stages 0-7 of 16"), (1, "the first 256")])
def test_a_sampled_placement_map_says_which_gpus_it_shows(pp, shown):
    # From the engine's own sample (planner.placement.placement_map): whole nodes from the start of up to four
    # stages. The title said "from the first pipeline stages" where the map held every stage's first nodes.
    from planner.catalog import load_catalog
    from planner.placement import placement_map
    from planner.spec import parse_spec

    from tests.engine.conftest import example

    spec = parse_spec(example("llama3-70b-h100-512-pinned"), load_catalog())  # the shipped catalog
    answer = copy.deepcopy(ANSWER)
    answer["plans"][0]["layout"] = {"pp": pp}
    answer["placement_map"] = placement_map(spec.cluster, 4, 1, 512 // 4 // pp, pp, 1, "tp-cp-dp-pp")
    title = charts.placement_map(answer)["layout"]["title"]["text"]
    assert title.startswith(f"Placement of the best plan (256 of 512 GPUs shown: {shown})<br>")


def test_the_candidates_chart_joins_the_pareto_front_and_stars_the_best():
    fig = charts.candidates_scatter(ANSWER)
    names = {t["name"]: (t["x"], t["y"]) for t in fig["data"]}
    assert names["Pareto front"] == ([2.0, 2.5], [57, 52])
    assert names["feasible layouts"] == ([3.5], [60])
    assert names["best plan"] == ([2.0], [57])
    # The log axis is labelled in whole steps across the data (2 to 3.5 s), not Plotly's "2, 5" digits.
    assert fig["layout"]["xaxis"]["ticktext"] == ["2", "3"]
    assert fig["layout"]["title"]["text"].endswith("(3 feasible layouts)")
    # The answer carries the front and a sample of a larger search: the title says so, not "3 feasible".
    sampled = charts.candidates_scatter({**ANSWER, "feasible": 15925})
    assert sampled["layout"]["title"]["text"].endswith("(the Pareto front and a sample, 3 of 15,925 feasible layouts)")


def test_log_axes_are_labelled_at_1_2_5_steps_or_at_the_values_given():
    assert charts.log_axis("days", [42.4, 348])["ticktext"] == ["50", "100", "200"]
    assert charts.log_axis("s", [0.3, 160])["ticktext"] == ["0.5", "1", "2", "5", "10", "20", "50", "100"]
    # Under a third of a decade, 1-2-5 leaves too few labels: finer steps take over.
    assert charts.log_axis("s", [5.5, 9.0])["ticktext"] == ["6", "7", "8", "9"]
    assert charts.log_axis("GPUs", [512, 2048, 1024, 512], exact=True)["ticktext"] == ["512", "1,024", "2,048"]
    axis = charts.log_axis("s", [], range=[0, 1])
    assert axis == {"title": {"text": "s"}, "type": "log", "range": [0, 1]}  # nothing to label: Plotly's own


@pytest.mark.parametrize("answer", [None, {}, {"plans": []}, {"plans": [{}]}, {"plans": "nonsense"},
                                    {"placement_map": {"cells": [{"node": 1}]}}, {"candidates": [{"label": "x"}]}])
def test_answers_with_missing_parts_give_fewer_charts_not_errors(answer):
    figures = charts.plan_figures(answer)
    json.dumps(figures)


def test_an_infeasible_answer_has_no_charts():
    assert charts.plan_figures({"plans": [], "rejected": {"out_of_memory": 4}, "candidates": []}) == {}


@pytest.mark.django_db
def test_a_real_engine_answer_gives_every_chart(seeded, small_spec):
    plan = Plan.objects.create(spec=services.spec_parse(data=small_spec).to_dict(), spec_hash="x")
    plan = services.plan_run(plan_id=plan.pk)
    assert plan.status == "done", plan.error
    figures = charts.plan_figures(plan.result)
    assert list(figures) == ["step-time", "comm", "memory", "placement", "candidates"]
    heat = figures["placement"]["data"][0]
    assert sum(v is not None for row in heat["z"] for v in row) == plan.result["placement_map"]["gpus_shown"]


def test_a_sample_of_nodes_from_several_stages_is_drawn_with_one_row_for_a_gap_not_one_for_each_node_left_out():
    answer = copy.deepcopy(ANSWER)
    answer["placement_map"] = {"gpus_per_node": 8, "gpus_total": 512, "gpus_shown": 32, "cells": [
        {"gpu": g, "node": g // 8, "domain": g // 8, "tp": g % 8, "dp": 0, "pp": g // 128}
        for node in (0, 1, 16, 17) for g in range(node * 8, node * 8 + 8)]}
    fig = charts.placement_map(answer)
    heat = fig["data"][0]
    assert heat["y"] == ["node 0", "node 1", "nodes 2-15 not shown", "node 16", "node 17"]
    assert [row[0] for row in heat["z"]] == [0, 0, None, 1, 1]
    assert len(fig["layout"]["shapes"]) == 4
