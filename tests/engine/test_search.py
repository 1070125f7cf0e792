"""The search: pins honoured, infeasible layouts rejected with readable reasons, ranking, answer shape."""
from __future__ import annotations

import json
import math

import pytest

from planner import parse_spec, plan

from .conftest import example


@pytest.fixture(scope="module")
def gpt3_answer(catalog):
    return plan(parse_spec(example("gpt3-175b-a100-1024"), catalog), top=10)


def test_answer_is_plain_json(gpt3_answer):
    assert json.loads(json.dumps(gpt3_answer)) == gpt3_answer


def test_time_parts_sum_to_the_step_time(gpt3_answer):
    for p in gpt3_answer["plans"]:
        assert sum(p["time_s"].values()) == pytest.approx(p["step_time_s"], rel=1e-4)


def test_plans_are_ranked_by_step_time_and_fit(gpt3_answer):
    steps = [p["step_time_s"] for p in gpt3_answer["plans"]]
    assert steps == sorted(steps) and len(steps) == 10
    assert all(p["memory_gib"]["total"] <= 80 for p in gpt3_answer["plans"])


def test_throughput_figures_are_consistent(gpt3_answer):
    best = gpt3_answer["plans"][0]
    tokens = 1536 * 2048
    assert best["tokens_per_s"] == pytest.approx(tokens / best["step_time_s"], rel=1e-4)
    flops = gpt3_answer["model"]["flops_per_step"]
    assert best["model_tflops_per_gpu"] == pytest.approx(flops / best["step_time_s"] / 1024 / 1e12, rel=1e-4)
    assert best["mfu"] == pytest.approx(best["model_tflops_per_gpu"] / 312, rel=1e-4)
    # A100 175B runs without flash attention reached 44-52% (SC21; Korthikanti et al. 2022); flash attention and
    # no recomputation do better.
    assert 0.4 < best["mfu"] < 0.7


def test_every_collective_is_listed_with_its_fabric(gpt3_answer):
    for p in gpt3_answer["plans"]:
        groups = {c["group"] for c in p["comm"]}
        assert ("tp" in groups) == (p["layout"]["tp"] > 1)
        for c in p["comm"]:
            assert c["fabric"] in ("nvlink", "infiniband")
            assert c["exposed_s"] <= c["time_s"] + 1e-12
            if c["group"] == "tp":
                assert c["fabric"] == "nvlink"
            # A collective that crosses nodes is said to run over the scale-out fabric, however its time splits (a
            # DP reduce-scatter over 32 nodes read "nvlink" where its NVLink hops took the longer)
            assert c["fabric"] == ("infiniband" if c["time_by_fabric_s"].get("infiniband") else "nvlink")


def test_rejections_are_counted_with_readable_examples(gpt3_answer):
    rejected, examples = gpt3_answer["rejected"], gpt3_answer["rejected_examples"]
    assert rejected["tp_crosses_nvlink_domain"] >= 1
    assert examples["tp_crosses_nvlink_domain"] == "TP=16 crosses the 8-GPU NVLink domain"
    assert rejected["out_of_memory"] > 0 and " GiB of 80" in examples["out_of_memory"]
    assert gpt3_answer["searched"] >= gpt3_answer["feasible"] + sum(rejected.values())


def test_tp_never_leaves_an_nvlink_domain(gpt3_answer):
    for p in gpt3_answer["plans"]:
        assert p["placement"]["tp_groups_inside_nvlink_domain"]
        assert 8 % p["layout"]["tp"] == 0


def test_selective_recompute_under_flash_attention_costs_time_and_saves_memory(catalog):
    doc = example("llama3-70b-h100-512-pinned")
    doc["layout"].update(cp=1, vpp=1, sequence_parallel=True, zero=1, rank_order="tp-cp-dp-pp")
    none = plan(parse_spec({**doc, "layout": {**doc["layout"], "recompute": "none"}}, catalog))["plans"][0]
    selective = plan(parse_spec({**doc, "layout": {**doc["layout"], "recompute": "selective"}}, catalog))["plans"][0]
    assert selective["step_time_s"] > none["step_time_s"]
    # It keeps the layer input, the attention output and every other GEMM output (torchtitan per-op SAC).
    assert selective["memory_gib"]["activations"] < 0.8 * none["memory_gib"]["activations"]
    # The search offers it too: it sits between the two others in time and memory.
    unpinned = plan(parse_spec(example("llama3-70b-h100-512-pinned"), catalog), top=500)
    assert {p["layout"]["recompute"] for p in unpinned["plans"]} >= {"none", "selective"}


def test_a_fully_pinned_infeasible_layout_is_an_empty_answer_with_the_reason(catalog):
    doc = example("gpt3-175b-a100-1024")
    doc["layout"] = {"tp": 16, "pp": 8, "dp": 8, "cp": 1, "micro_batch": 1, "vpp": 1, "recompute": "full",
                     "sequence_parallel": True, "zero": 1}
    answer = plan(parse_spec(doc, catalog))
    assert answer["plans"] == []
    assert answer["rejected"] == {"tp_crosses_nvlink_domain": 1}


def test_a_pinned_layout_may_split_a_stage_unevenly_into_virtual_stages(catalog):
    """GPT-3's 96 layers over PP 16 are 6 a stage: 4 virtual stages of 2, 2, 1 and 1 layers run (Megatron-Core's
    --num-virtual-stages-per-pipeline-rank), 8 would leave two of them empty. The search offers even splits only."""
    doc = example("gpt3-175b-a100-1024")
    base = {"tp": 8, "pp": 16, "dp": 8, "cp": 1, "micro_batch": 1, "recompute": "full",
            "sequence_parallel": True, "zero": 1, "rank_order": "tp-cp-dp-pp"}
    uneven = plan(parse_spec({**doc, "layout": {**base, "vpp": 4}}, catalog))
    assert uneven["plans"] and uneven["plans"][0]["layout"]["vpp"] == 4
    empty = plan(parse_spec({**doc, "layout": {**base, "vpp": 8}}, catalog))
    assert empty["plans"] == [] and empty["rejected_examples"]["vpp_invalid"] == (
        "8 virtual stages need PP > 1 and a layer each; a stage holds 6 layers")
    searched = plan(parse_spec({**doc, "layout": {k: v for k, v in base.items() if k != "micro_batch"}}, catalog),
                    top=200)
    assert {p["layout"]["vpp"] for p in searched["plans"]} <= {1, 2, 3, 6}
    # 1,536 sequences over DP 8 at micro-batch 16 are 12 micro-batches a step, fewer than PP 16.
    short = plan(parse_spec({**doc, "layout": {**base, "vpp": 2, "micro_batch": 16}}, catalog))
    assert short["rejected_examples"]["vpp_needs_microbatches"] == (
        "interleaving needs at least PP=16 micro-batches per step, not 12")
    # At micro-batch 8 they are 24: not a multiple of 16, which Megatron-Core runs in groups (memory.vp_group).
    grouped = plan(parse_spec({**doc, "layout": {**base, "vpp": 2, "micro_batch": 8}}, catalog))
    assert grouped["plans"] and grouped["plans"][0]["layout"]["vpp"] == 2


def test_partitioned_saved_inputs_let_opt_175bs_layout_fit_and_cost_a_gather_a_layer(catalog):
    """OPT-175B's layout (metaseq: TP 8 with FSDP over 124 ranks, no sequence parallelism, full recomputation,
    8 sequences per replica) holds 96 layers' whole 2-byte inputs for 8 sequences unless the stack splits them over
    the TP ranks (metaseq --distribute-checkpointed-activations); split, each recomputed layer first all-gathers
    its input."""
    doc = {"model": {"name": "OPT-175B", "layers": 96, "hidden": 12288, "heads": 96, "vocab": 50272,
                     "seq_len": 2048, "tied_embeddings": True},
           "training": {"global_batch": 992, "precision": "fp16", "zero_granularity": "layer"},
           "cluster": {"num_gpus": 992, "gpu": "A100 SXM4 80GB", "node": "DGX A100",
                       "fabric": "HDR InfiniBand fat tree"},
           "layout": {"tp": 8, "pp": 1, "dp": 124, "cp": 1, "micro_batch": 8, "recompute": "full", "zero": 2,
                      "sequence_parallel": False}}
    whole = plan(parse_spec(doc, catalog))
    assert whole["plans"] == [] and "out_of_memory" in whole["rejected_examples"]
    doc["training"]["partition_activations"] = True
    split = plan(parse_spec(doc, catalog))["plans"][0]
    gathers = [c for c in split["comm"] if c["group"] == "tp" and c["collective"] == "all_gather"]
    assert gathers and sum(c["calls_per_step"] for c in gathers) == 96 * 1


def test_zero_2_and_3_are_never_planned_across_pipeline_stages(catalog, gpt3_answer):
    """No stack shards weights or gradients across pipeline micro-batches: a pinned ZeRO-3 with PP 8 is one rejection
    with the reason; the search counts the ones it leaves out and never ranks one."""
    doc = example("gpt3-175b-a100-1024")
    doc["layout"] = {"tp": 8, "pp": 8, "dp": 16, "cp": 1, "micro_batch": 1, "vpp": 1, "recompute": "full",
                     "sequence_parallel": True, "zero": 3, "rank_order": "tp-cp-dp-pp"}
    answer = plan(parse_spec(doc, catalog))
    assert answer["plans"] == [] and answer["rejected"] == {"zero_with_pipeline": 1}
    assert "plan ZeRO-1 with PP, or ZeRO-3 without PP" in answer["rejected_examples"]["zero_with_pipeline"]
    assert gpt3_answer["rejected"]["zero_with_pipeline"] > 0
    assert all(p["layout"]["zero"] <= 1 for p in gpt3_answer["plans"] if p["layout"]["pp"] > 1)
    doc["layout"]["pp"], doc["layout"]["dp"] = 1, 128  # ZeRO-3 without a pipeline is planned as asked
    assert plan(parse_spec(doc, catalog))["rejected"].get("zero_with_pipeline") is None


def test_a_pinned_layout_that_does_not_fit_says_how_much_it_needs(catalog):
    doc = example("gpt3-175b-a100-1024")
    doc["layout"] = {"tp": 1, "pp": 1, "dp": 1024, "cp": 1, "zero": 1}
    doc["training"]["global_batch"] = 1024
    answer = plan(parse_spec(doc, catalog))
    assert answer["plans"] == []
    assert list(answer["rejected"]) == ["out_of_memory"]


def test_pins_are_honoured(catalog):
    doc = example("llama3-70b-h100-512-pinned")  # tp 8, pp 4, micro_batch 1
    answer = plan(parse_spec(doc, catalog), top=20)
    assert answer["plans"]
    for p in answer["plans"]:
        assert (p["layout"]["tp"], p["layout"]["pp"], p["layout"]["micro_batch"]) == (8, 4, 1)
        assert p["layout"]["dp"] == 512 // 32 // p["layout"]["cp"]
    assert answer["plans"][0]["time_to_train_s"] == pytest.approx(
        15e12 / answer["plans"][0]["tokens_per_s"], rel=1e-4)


def test_the_nvl72_domain_admits_tp_beyond_one_tray(catalog):
    answer = plan(parse_spec(example("gb200-nvl72-405b"), catalog), top=30)
    assert answer["plans"]
    assert "tp_crosses_nvlink_domain" not in answer["rejected"] or \
        "72-GPU NVLink domain" in answer["rejected_examples"]["tp_crosses_nvlink_domain"]
    assert all(72 % p["layout"]["tp"] == 0 for p in answer["plans"])


def test_a_tp_inside_the_domain_that_does_not_divide_it_is_rejected_for_that(catalog):
    # TP 16 is smaller than an NVL72 rack's 72 GPUs, but 72 is not a multiple of 16: some TP groups would span
    # two racks. The reason says so, rather than that TP 16 is larger than the domain.
    doc = example("gb200-nvl72-405b")
    doc["model"]["kv_heads"] = 16  # which TP 16 divides, as it divides the 128 heads
    doc["layout"] = {"tp": 16}
    answer = plan(parse_spec(doc, catalog))
    assert answer["plans"] == [] and list(answer["rejected"]) == ["tp_crosses_nvlink_domain"]
    assert answer["rejected_examples"]["tp_crosses_nvlink_domain"] == \
        "TP=16 does not divide the 72-GPU NVLink domain, so some TP groups cross it"


def test_moe_layouts_use_expert_parallelism(catalog, gpt3_doc):
    gpt3_doc["model"] = dict(catalog["model"]["Mixtral 8x7B"])
    gpt3_doc["cluster"].update(num_gpus=64, gpu="H100 SXM5 80GB", node="DGX H100", fabric="NDR InfiniBand fat tree")
    gpt3_doc["training"]["global_batch"] = 256
    answer = plan(parse_spec(gpt3_doc, catalog), top=50)
    assert any(p["layout"]["ep"] > 1 for p in answer["plans"])
    ep_plan = next(p for p in answer["plans"] if p["layout"]["ep"] > 1)
    assert any(c["group"] == "ep" and c["collective"] == "all_to_all" for c in ep_plan["comm"])


def test_candidates_carry_the_pareto_front(gpt3_answer):
    cands = gpt3_answer["candidates"]
    front = [c for c in cands if c["pareto"]]
    assert 1 <= len(front) and len(cands) <= 500
    mems = [c["memory_gib"] for c in sorted(front, key=lambda c: c["step_time_s"])]
    assert mems == sorted(mems, reverse=True)


def test_absurd_but_valid_inputs_stay_bounded(catalog, gpt3_doc):
    gpt3_doc["cluster"]["num_gpus"] = 1_048_576
    gpt3_doc["training"]["global_batch"] = 16_777_216
    gpt3_doc["model"]["seq_len"] = 1_048_576
    answer = plan(parse_spec(gpt3_doc, catalog), top=3)
    assert answer["elapsed_s"] < 30
    assert all(math.isfinite(p["step_time_s"]) for p in answer["plans"])


@pytest.mark.parametrize("name", ["gpt3-175b-a100-1024", "llama3-70b-h100-512-pinned", "gb200-nvl72-405b"])
def test_the_layout_estimate_bounds_the_search(catalog, name):
    from planner import estimate_layouts
    spec = parse_spec(example(name), catalog)
    answer = plan(spec, top=1)
    assert answer["searched"] <= estimate_layouts(spec) <= 20 * max(answer["searched"], 1000)


def test_a_pinned_cp_rejects_the_structures_it_does_not_divide(gpt3_doc):
    gpt3_doc["layout"] = {"cp": 4}  # e.g. TP 8 x PP 64 leaves 2 GPUs for CP = 4
    answer = plan(parse_spec(gpt3_doc))
    assert answer["feasible"] > 0
    assert answer["rejected"]["gpus_not_divisible"] > 0
    assert answer["rejected_examples"]["gpus_not_divisible"].endswith("does not divide 1024 GPUs")


def test_context_parallelism_needs_flash_attention(gpt3_doc):
    gpt3_doc["training"]["attention"] = "unfused"
    gpt3_doc["layout"] = {"cp": 2}
    answer = plan(parse_spec(gpt3_doc))
    assert answer["plans"] == []
    assert answer["rejected_examples"]["cp_needs_flash_attention"].startswith("CP=2 needs flash or cudnn attention")
    gpt3_doc["training"]["attention"] = "cudnn"  # Transformer Engine's context parallelism runs on cuDNN too
    assert plan(parse_spec(gpt3_doc))["plans"]


def test_unbalanced_context_parallelism_splits_the_sequence_into_cp_chunks(gpt3_doc):
    gpt3_doc["model"]["seq_len"] = 2040  # 2040 = 8 x 255: splits into 8 chunks, not 16
    gpt3_doc["layout"] = {"cp": 8, "tp": 8}
    balanced = plan(parse_spec(gpt3_doc))
    assert balanced["plans"] == []
    assert "into 16 equal chunks" in balanced["rejected_examples"]["cp_does_not_split_sequence"]
    gpt3_doc["training"]["cp_load_balance"] = False
    assert plan(parse_spec(gpt3_doc), top=1)["plans"][0]["layout"]["cp"] == 8


@pytest.mark.parametrize("values, ncols", [
    ((1, 2, 4, 8), 3),                     # small values: counted
    ((3, 1_000_003, 7, 2**40), 3),         # sparse values: each column's sorted, the code counted
    (tuple(range(0, 6000, 7)), 3),         # many combinations: the code sorted
    (tuple(range(0, 6000, 7)), 7),         # more than an int64 code holds: the rows sorted
])
def test_distinct_rows_agree_with_a_sort_whatever_path_counts_them(values, ncols):
    """search._distinct counts few codes and sorts the rest; every path must give each row the index of its
    combination in lexicographic order, and a representative row that has that combination."""
    import numpy as np

    from planner.search import _distinct
    rng = np.random.default_rng(7)
    cols = [rng.choice(np.array(values, dtype=np.int64), size=5000) for _ in range(ncols)]
    cols.append(rng.integers(0, 2, size=5000))
    first, which = _distinct(cols)
    combos, expected = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    assert np.array_equal(which, expected.reshape(-1))
    assert np.array_equal(np.stack([c[first] for c in cols], axis=1), combos)


def test_micro_batches_beyond_64_sequences_are_searched_while_short(catalog, gpt3_doc):
    """Up to 64 sequences a micro-batch, or more while it holds at most 131,072 tokens: llm-foundry's tuned runs
    of 125M-760M models at 512 tokens use 96-128 sequences, which the search must be able to find."""
    from planner.search import micro_batch_options
    sizes = {}
    for seq in (512, 1024, 2048, 8192):
        gpt3_doc["model"]["seq_len"] = seq
        sizes[seq] = micro_batch_options(parse_spec(gpt3_doc, catalog), 8)  # 1,536 / 8 = 192 a replica
    assert sizes[2048] == sizes[8192] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert sizes[1024] == sizes[2048] + [96] and sizes[512] == sizes[2048] + [96, 192]
    gpt3_doc["layout"] = {"micro_batch": 192}  # a pin is honoured whatever the bound
    assert micro_batch_options(parse_spec(gpt3_doc, catalog), 8) == [192]


def test_the_plans_costed_together_read_as_each_costed_alone(catalog):
    """report.plan_entries costs the plans shown in one vectorised call; each entry must be what costing its
    plan alone gives, down to each collective's algorithm and the fabrics its time is reported on, which differ
    between these plans (some DP groups stay inside an NVLink domain, others cross InfiniBand)."""
    import numpy as np

    from planner.report import plan_entries
    from planner.search import search
    from tests.engine.golden import cases

    spec = parse_spec(cases()["8b-h100-256-roce-cp"], catalog)
    ev, _, _, pc = search(spec)
    together = plan_entries(spec, pc, ev, ev.candidates(np.arange(10)))
    alone = [plan_entries(spec, pc, ev, ev.candidates(np.array([j])))[0] for j in range(10)]
    for j, (entry, single) in enumerate(zip(together, alone, strict=True)):
        assert entry["rank"] == j + 1 and single["rank"] == 1
        assert {**entry, "rank": 1} == single
    fabrics = {tuple(c["time_by_fabric_s"]) for e in together for c in e["comm"]
               if (c["group"], c["collective"]) == ("dp", "reduce_scatter")}
    algorithms = {c["algorithm"] for e in together for c in e["comm"] if (c["group"], c["collective"]) == (
        "dp", "reduce_scatter")}
    assert len(fabrics) > 1 and len(algorithms) > 1  # the case this test is for
    assert plan_entries(spec, pc, ev, ev.candidates(np.arange(0))) == []


@pytest.mark.parametrize("distinct_times", [3, 40, 100_000])
def test_the_ranking_is_the_lexsort_it_stands_for(distinct_times):
    """search._rank sorts the step times with an unstable sort and sorts runs of equal times again; it must give
    exactly np.lexsort((memory, round(step, 9))): time to the nanosecond, then memory, then enumeration order,
    with many ties of time and of time and memory alike (the unstable sort mixes such runs up)."""
    import numpy as np

    from planner.search import _rank
    rng = np.random.default_rng(11)
    step = rng.integers(0, distinct_times, size=50_000) * 0.25 + rng.integers(0, 2, size=50_000) * 1e-11
    memory = rng.integers(0, 5, size=50_000).astype(float)
    assert np.array_equal(_rank(step, memory), np.lexsort((np.arange(50_000), memory, np.round(step, 9))))


def test_an_moe_model_with_tp_runs_sequence_parallel_as_megatron_core_requires(catalog):
    # Megatron-Core refuses MoE with TP > 1 and no SP; the search had ranked TP2 PP32 DP32 EP8 (no SP) first for
    # DeepSeek-V3 on 2,048 H100, and its Megatron export was a command line Megatron refused.
    doc = {"model": "DeepSeek-V3 671B (MLA approximated as MHA)", "training": {"global_batch": 8192},
           "cluster": {"num_gpus": 2048, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                       "fabric": "NDR InfiniBand fat tree"}, "layout": {"tp": 2, "pp": 32, "ep": 8}}
    answer = plan(parse_spec(doc, catalog), top=5)
    assert answer["plans"] and all(p["layout"]["sequence_parallel"] for p in answer["plans"])
    assert "needs sequence parallelism" in answer["rejected_examples"]["moe_tp_needs_sp"]
    doc["layout"]["sequence_parallel"] = False  # pinned: no plan, and the reason
    answer = plan(parse_spec(doc, catalog), top=5)
    assert answer["plans"] == [] and set(answer["rejected"]) == {"moe_tp_needs_sp"}
    assert answer["searched"] == answer["rejected"]["moe_tp_needs_sp"]
    # Both rules broken by the pins: each count was taken over the axis the other had emptied, 0 and 0, and the
    # page said no layout was considered. A layout breaking both is counted once, as MoE SP's.
    doc["layout"].update(zero=3)
    answer = plan(parse_spec(doc, catalog), top=5)
    assert answer["plans"] == [] and answer["searched"] > 0
    assert answer["rejected"] == {"moe_tp_needs_sp": answer["searched"]}
    doc["layout"]["sequence_parallel"] = True  # SP as required: the ZeRO pin is what is left
    answer = plan(parse_spec(doc, catalog), top=5)
    assert answer["plans"] == [] and answer["rejected"] == {"zero_with_pipeline": answer["searched"]}


def test_a_tp_that_divides_the_heads_but_not_the_kv_heads_says_only_the_kv_heads(catalog):
    doc = {"model": "Llama 3 8B", "training": {"global_batch": 64},
           "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"},
           "layout": {"tp": 16}}
    answer = plan(parse_spec(doc, catalog), top=1)  # 16 divides the 32 heads: only the 8 KV heads are the problem
    assert answer["rejected_examples"]["tp_does_not_divide_heads"] == "TP=16 does not divide the 8 KV heads"
