"""The step-time mechanisms that published runs on newer stacks need, each with real values."""
from __future__ import annotations

import numpy as np
import pytest

from planner import SpecError, parse_spec
from planner.report import plan


def llama_8b_fsdp(catalog, gpus: int, **training) -> dict:
    return {"model": dict(catalog["model"]["Llama 3 8B"], seq_len=8192),
            "training": {"global_batch": gpus, "precision": "bf16", **training},
            "cluster": {"num_gpus": gpus, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                        "fabric": "NDR InfiniBand fat tree"},
            "layout": {"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "micro_batch": 1, "zero": 3, "recompute": "full"}}


def best(doc, catalog) -> dict:
    return plan(parse_spec(doc, catalog), top=1)["plans"][0]


def test_fsdp_gathers_every_layer_and_pays_each_ones_latency(catalog):
    p = best(llama_8b_fsdp(catalog, 64), catalog)
    gathers = [c for c in p["comm"] if c["group"] == "dp" and c["collective"] == "all_gather"]
    # 32 layers, gathered before the forward and again before the backward of the one micro-batch.
    assert sum(c["calls_per_step"] for c in gathers) == 64
    assert p["time_s"]["dp_comm"] > 0


def test_fsdp_exposure_grows_with_ranks_at_a_fixed_per_gpu_batch(catalog):
    small, large = (best(llama_8b_fsdp(catalog, n), catalog)["time_s"]["dp_comm"] for n in (16, 1024))
    assert large > small


def test_tp_comm_overlap_hides_most_tensor_parallel_traffic(catalog, gpt3_doc):
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": 1, "sequence_parallel": True,
                          "recompute": "full", "zero": 1}
    sync = best(gpt3_doc, catalog)["time_s"]["tp_comm"]
    gpt3_doc["training"]["tp_comm_overlap"] = True
    overlapped = best(gpt3_doc, catalog)["time_s"]["tp_comm"]
    assert 0 < overlapped < 0.5 * sync


@pytest.mark.parametrize("sp, reduction", [(True, "reduce_scatter"), (False, "all_reduce")])
def test_the_backward_reductions_of_qkv_and_mlp_up_hide_behind_their_weight_gradients(catalog, gpt3_doc, sp,
                                                                                      reduction):
    """Megatron's default: of a layer's 6 TP reductions (forward 2, full recomputation 2, backward 2) the backward's
    two run beside GPT-3's large weight-gradient GEMMs, leaving their interference; the gathers stay exposed."""
    from planner import constants as C
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": 1, "sequence_parallel": sp,
                          "recompute": "full", "zero": 1}

    def comm(overlap: bool) -> dict:
        gpt3_doc["training"]["tp_wgrad_overlap"] = overlap
        return {c["collective"]: c for c in best(gpt3_doc, catalog)["comm"] if c["group"] == "tp"}
    off, on = comm(False), comm(True)
    assert off[reduction]["exposed_s"] == pytest.approx(off[reduction]["time_s"])
    assert on[reduction]["time_s"] == pytest.approx(off[reduction]["time_s"])
    assert on[reduction]["exposed_s"] == pytest.approx(on[reduction]["time_s"] * (4 + 2 * C.COMM_INTERFERENCE) / 6,
                                                    rel=1e-5)
    if sp:
        assert on["all_gather"]["exposed_s"] == pytest.approx(off["all_gather"]["exposed_s"])
    # tp_comm_overlap overlaps every collective of a sequence-parallel layout, so the option changes nothing there;
    # the all-reduces of a layout without sequence parallelism, which that overlap does not reach, still hide.
    gpt3_doc["training"]["tp_comm_overlap"] = True
    if sp:
        assert comm(True)[reduction]["exposed_s"] == pytest.approx(comm(False)[reduction]["exposed_s"])
    else:
        assert comm(True)[reduction]["exposed_s"] == pytest.approx(on[reduction]["exposed_s"])
        assert comm(False)[reduction]["exposed_s"] == pytest.approx(off[reduction]["exposed_s"])


def test_fp8_gains_far_less_than_twice_end_to_end(catalog):
    bf16 = best(llama_8b_fsdp(catalog, 8), catalog)["step_time_s"]
    fp8 = best(llama_8b_fsdp(catalog, 8, precision="fp8"), catalog)["step_time_s"]
    assert 1.1 < bf16 / fp8 < 1.6


def test_hidden_communication_still_costs_its_interference():
    import numpy as np

    from planner import constants as C
    from planner.steptime import _exposed
    assert float(_exposed(np.array(1.0), np.array(10.0))) == pytest.approx(C.COMM_INTERFERENCE)
    assert float(_exposed(np.array(3.0), np.array(1.0))) == pytest.approx(2.0 + C.COMM_INTERFERENCE)


def test_gpu_constants_come_from_the_catalog_and_a_custom_gpu_may_set_them(catalog, gpt3_doc):
    spec = parse_spec(gpt3_doc, catalog)  # inline A100 80GB: the catalog row fills what it leaves out
    assert spec.cluster.gpu.gemm_efficiency == pytest.approx(0.869)
    gpt3_doc["cluster"]["gpu"] = {"name": "my accelerator", "peak_tflops": 500, "memory_gib": 96,
                                  "memory_gbytes_per_s": 3000, "gemm_efficiency": 0.6, "sustained_clock": 0.9}
    gpu = parse_spec(gpt3_doc, catalog).cluster.gpu
    assert (gpu.gemm_efficiency, gpu.sustained_clock, gpu.hbm_efficiency) == (0.6, 0.9, 0.85)
    gpt3_doc["cluster"]["gpu"]["gemm_efficiency"] = 1.5
    with pytest.raises(Exception, match="cluster.gpu.gemm_efficiency"):
        parse_spec(gpt3_doc, catalog)


def test_deduplicating_dispatch_sends_a_token_once_per_remote_domain():
    from planner.steptime import dedup_ratio
    # Top-8 over 2 domains: ~1 remote copy instead of 4 (DeepSeek-V3 report, sec. 3.2.2); one expert: no gain.
    assert dedup_ratio(2, 8) == pytest.approx((1 - 0.5 ** 8) * 2 / 8)
    assert dedup_ratio(4, 1) == pytest.approx(1.0)


def test_group_limited_routing_reaches_fewer_domains():
    from planner.steptime import dedup_ratio
    # DeepSeek-V3 (8 groups, 4 a token) with EP over 4 nodes, 2 groups each: a node is reached when one of its
    # groups is picked, 4 (1 - C(6,4)/C(8,4)) = 3.14 of 4, against 4 (1 - (3/4)^8) = 3.60 ungrouped.
    assert dedup_ratio(4, 8, 8, 4) == pytest.approx(4 * (1 - 15 / 70) / 8)
    assert dedup_ratio(4, 8) == pytest.approx(4 * (1 - 0.75 ** 8) / 8)
    assert dedup_ratio(8, 8, 8, 4) == pytest.approx(0.5)  # one group a node: exactly 4 of 8 nodes
    # 16 nodes: each group spans 2 and gets 2 experts: 16 x 4/8 x (1 - (1/2)^2) = 6 nodes
    assert dedup_ratio(16, 8, 8, 4) == pytest.approx(6 / 8)
    # every group allowed, a shape the groups do not tile, or one domain: as ungrouped
    assert dedup_ratio(4, 8, 8, 8) == pytest.approx(dedup_ratio(4, 8))
    assert dedup_ratio(3, 8, 8, 4) == pytest.approx(dedup_ratio(3, 8))
    assert dedup_ratio(1, 8, 8, 4) == 1.0
    assert list(dedup_ratio(np.array([1.0, 4.0, 8.0]), 8, 8, 4)) == pytest.approx([1.0, 4 * (1 - 15 / 70) / 8, 0.5])


def test_deepseek_v3_dispatch_over_four_nodes_sends_13_percent_fewer_bytes(catalog):
    v3 = catalog["model"]["DeepSeek-V3 671B (MLA approximated as MHA)"]
    assert (v3["router_groups"], v3["router_group_top_k"]) == (8, 4)
    doc = {"model": v3, "training": {"global_batch": 256, "precision": "bf16", "ep_dispatch": "dedup"},
           "cluster": {"num_gpus": 256, "gpu": "B200", "node": "DGX B200", "fabric": "NDR InfiniBand fat tree"},
           "layout": {"tp": 1, "pp": 8, "dp": 32, "ep": 32, "micro_batch": 1, "vpp": 2, "zero": 1,
                      "recompute": "selective"}}

    def dispatched() -> float:
        return next(c["bytes_per_step"] for c in best(doc, catalog)["comm"] if c["group"] == "ep")

    grouped = dispatched()
    doc["model"] = dict(v3, router_groups=1, router_group_top_k=None)
    assert grouped / dispatched() == pytest.approx((1 - 15 / 70) / (1 - 0.75 ** 8), rel=1e-4)
    doc["training"]["ep_dispatch"] = "all_to_all"  # a plain all-to-all sends every copy, grouped or not
    plain = dispatched()
    doc["model"] = v3
    assert dispatched() == pytest.approx(plain)


def test_eager_elementwise_streams_more_bytes_than_fused(catalog):
    import numpy as np

    from planner.compute import Shard, elementwise_bytes
    spec = parse_spec(llama_8b_fsdp(catalog, 8), catalog)
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    fused = elementwise_bytes(spec.model, spec.training, shard)[0]
    eager = elementwise_bytes(spec.model, parse_spec(llama_8b_fsdp(catalog, 8, elementwise="eager"),
                                                     catalog).training, shard)[0]
    h, kvd, f = 4096, 1024, 14336
    # RMSNorm 36 bytes instead of 4 (twice), rotary 20 instead of 4, SwiGLU 10 instead of 6 per element.
    assert eager - fused == pytest.approx(2 * 32 * h + 16 * (h + kvd) + 4 * f)


def test_fp8_parameter_gathers_move_half_the_bytes(catalog):
    def gathered(**training):
        p = best(llama_8b_fsdp(catalog, 64, precision="fp8", **training), catalog)
        return sum(c["bytes_per_step"] for c in p["comm"] if c["collective"] == "all_gather")
    assert gathered(fp8_param_gather=True) == pytest.approx(gathered() / 2)


def dp_calls(plan_entry: dict, collective: str) -> float:
    return sum(c["calls_per_step"] for c in plan_entry["comm"] if c["group"] == "dp" and c["collective"] == collective)


def test_fsdp_zero2_gathers_and_reduces_layer_by_layer_every_micro_batch(catalog):
    def calls(granularity: str) -> tuple[float, float]:
        doc = llama_8b_fsdp(catalog, 64, zero_granularity=granularity)
        doc["training"]["global_batch"] = 2 * 64  # two micro-batches of one sequence per rank
        doc["layout"].update(zero=2, recompute="none")
        p = best(doc, catalog)
        return dp_calls(p, "all_gather"), dp_calls(p, "reduce_scatter")
    # FSDP SHARD_GRAD_OP: 32 layers gathered before the forward (not again before the backward) and reduced after
    # the backward, for each of the two micro-batches; Megatron/DeepSpeed buckets: one gather, a reduction per
    # micro-batch.
    assert calls("layer") == (64, 64)
    assert calls("bucket") == (1, 2)


def test_gradients_reduced_in_bf16_move_half_the_bytes(catalog):
    def reduced(dtype: str) -> float:
        p = best(llama_8b_fsdp(catalog, 64, grad_reduce_dtype=dtype), catalog)
        return sum(c["bytes_per_step"] for c in p["comm"] if c["collective"] == "reduce_scatter")
    assert reduced("bf16") == pytest.approx(reduced("fp32") / 2)


def test_partial_recomputation_costs_and_keeps_its_share(catalog):
    def entry(fraction: float | None, recompute: str = "full") -> dict:
        doc = llama_8b_fsdp(catalog, 8)
        doc["layout"].update(recompute=recompute, recompute_fraction=fraction)
        return best(doc, catalog)
    none, half, full = entry(None, "none"), entry(0.5), entry(None)
    assert half["label"].endswith("full recompute of 50% of layers ZeRO-3")
    assert half["layout"]["recompute_fraction"] == 0.5
    for key in ("compute",):
        assert half["time_s"][key] == pytest.approx((none["time_s"][key] + full["time_s"][key]) / 2, rel=1e-6)
    mem = lambda e: e["memory_gib"]["activations"]  # noqa: E731
    assert mem(full) < mem(half) < mem(none)
    assert half["hfu"] == pytest.approx((none["hfu"] * none["step_time_s"] + full["hfu"] * full["step_time_s"])
                                        / 2 / half["step_time_s"], rel=1e-4)


def test_a_recompute_fraction_needs_full_recomputation(catalog):
    doc = llama_8b_fsdp(catalog, 8)
    doc["layout"].update(recompute="selective", recompute_fraction=0.5)
    with pytest.raises(Exception, match="layout.recompute_fraction: applies to full recomputation only"):
        parse_spec(doc, catalog)


def test_a_pinned_recompute_fraction_alone_pins_full_recomputation(catalog):
    # It was dropped: every ranked layout recomputed none or some, each with no fraction.
    from planner.report import plan

    doc = llama_8b_fsdp(catalog, 8)
    doc["layout"] = {"recompute_fraction": 0.5}
    answer = plan(parse_spec(doc, catalog), top=50)
    assert answer["plans"]
    assert {(p["layout"]["recompute"], p["layout"]["recompute_fraction"]) for p in answer["plans"]} == {("full", 0.5)}


def test_early_stopping_checkpoints_skip_the_mlp_output_projection(catalog):
    import numpy as np

    from planner.compute import Shard, gemm_time, hbm_bytes_per_s, layer_times
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    spec = lambda **t: parse_spec(llama_8b_fsdp(catalog, 8, **t), catalog)  # noqa: E731
    megatron, pytorch = (layer_times(s.model, s.cluster.gpu, s.training, shard)
                         for s in (spec(), spec(checkpoint_impl="pytorch")))
    assert megatron.full_fwd[0] == pytest.approx(megatron.fwd[0])
    gpu, t = spec().cluster.gpu, 8192
    down = float(gemm_time(t, 4096, 14336, gpu)) + 3 * 4096 * t * 2 / hbm_bytes_per_s(gpu)
    assert megatron.full_fwd[0] - pytorch.full_fwd[0] == pytest.approx(down)


def test_fp8_tensorwise_sequence_parallel_gathers_move_one_byte(catalog, gpt3_doc):
    gpt3_doc["cluster"].update(gpu="H100 SXM5 80GB", node="DGX H100")
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": 1, "sequence_parallel": True,
                          "recompute": "none", "zero": 1}

    def tp_bytes(**training) -> dict:
        gpt3_doc["training"].update(training)
        comm = best(gpt3_doc, catalog)["comm"]
        return {c["collective"]: c["bytes_per_call"] for c in comm if c["group"] == "tp"}
    bf16 = tp_bytes(precision="bf16")
    fp8 = tp_bytes(precision="fp8", fp8_recipe="tensorwise")
    rowwise = tp_bytes(precision="fp8", fp8_recipe="rowwise")
    assert fp8["all_gather"] == pytest.approx(bf16["all_gather"] / 2)
    assert fp8["reduce_scatter"] == pytest.approx(bf16["reduce_scatter"])
    assert rowwise["all_gather"] == pytest.approx(bf16["all_gather"])


def test_triton_flash_attention_runs_at_its_share_of_the_flash_rate(catalog):
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, attention_times
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    spec = lambda kernel: parse_spec(llama_8b_fsdp(catalog, 8, attention=kernel), catalog)  # noqa: E731
    flash, triton = (attention_times(s.model, s.cluster.gpu, s.training, shard)[0][0]
                     for s in (spec("flash"), spec("triton")))
    launches = 4e-6  # one kernel: the flash kernel's launch, charged the same for both
    assert (triton - launches) * C.TRITON_FLASH_RELATIVE == pytest.approx(flash - launches)


def test_rowwise_fp8_casts_every_input_again_along_the_other_axis(catalog):
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, elementwise_bytes
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    spec = lambda **t: parse_spec(llama_8b_fsdp(catalog, 8, precision="fp8", **t), catalog)  # noqa: E731
    tensorwise, rowwise = (elementwise_bytes(s.model, s.training, shard)[0]
                           for s in (spec(), spec(fp8_recipe="rowwise")))
    h, f = 4096, 14336
    assert rowwise - tensorwise == pytest.approx(C.FP8_ROWWISE_EXTRA_BYTES * (3 * h + f))


def test_rowwise_second_cast_scans_its_columns_first_where_block_scales_cast_in_one_pass(catalog):
    """torchao rowwise's other-axis scale is a column amax over every token (a scan, then the cast: 4 bytes an
    element beyond the transposed copy it replaces); MXFP8's 32-element blocks are local (one pass: 2 bytes)."""
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, elementwise_bytes
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    spec = lambda **t: parse_spec(llama_8b_fsdp(catalog, 8, precision="fp8", elementwise="fused", **t),  # noqa: E731
                                  catalog)
    tensorwise, rowwise, blockwise = (elementwise_bytes(s.model, s.training, shard)[0] for s in
                                      (spec(), spec(fp8_recipe="rowwise"), spec(fp8_recipe="blockwise")))
    assert (C.FP8_ROWWISE_EXTRA_BYTES, C.FP8_BLOCKWISE_EXTRA_BYTES) == (4.0, 2.0)
    # Per token of a Llama 3 8B layer with fused projections: the QKV, gate/up and output-projection inputs (h
    # each) and the down projection's (f).
    h, f = 4096, 14336
    assert blockwise - tensorwise == pytest.approx(2.0 * (3 * h + f))
    assert rowwise - tensorwise == pytest.approx(4.0 * (3 * h + f))


def test_separate_fp8_linears_cast_their_shared_input_each_unless_sequence_parallelism_cast_it_once(catalog):
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, elementwise_bytes
    h = 4096
    spec = lambda **t: parse_spec(llama_8b_fsdp(catalog, 8, precision="fp8", elementwise="fused", **t),  # noqa: E731
                                  catalog)

    def extra(recipe: str, tp: int, sp: bool) -> float:
        shard = Shard(*(np.array([v]) for v in (tp, 1, 1, 1, sp)))
        fused, separate = (elementwise_bytes(s.model, s.training, shard)[0]
                           for s in (spec(fp8_recipe=recipe), spec(fp8_recipe=recipe, projections="separate")))
        return separate - fused
    # wq, wk, wv and w1, w3 each cast the h-wide input: 5 casts where one fused QKV and one fused gate/up GEMM cast 2.
    assert extra("tensorwise", 1, False) == pytest.approx(C.FP8_CAST_BYTES_FUSED * 3 * h)
    rowwise = C.FP8_CAST_BYTES_FUSED + C.FP8_ROWWISE_EXTRA_BYTES
    assert extra("rowwise", 8, True) == pytest.approx(rowwise * 3 * h)
    # Tensorwise sequence parallelism casts each rank's shard once, before the gather, for every linear.
    assert extra("tensorwise", 8, True) == 0.0


def test_each_expert_casts_its_own_copy_of_a_dispatched_token(catalog):
    """FP8 MoE layers: Transformer Engine's GroupedLinear quantizes the permuted input, so the MLP-up input is cast
    once per routed and shared expert a token reaches (top_k + shared copies of h), not once per token."""
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, elementwise_bytes
    from planner.model import mlp_inputs_per_token
    shard = Shard(*(np.array([v]) for v in (1, 1, 8, 1, False)))
    doc = {"model": "DeepSeek-V3 671B (MLA approximated as MHA)",
           "training": {"global_batch": 64, "precision": "fp8", "elementwise": "fused"},
           "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                       "fabric": "NDR InfiniBand fat tree"}}
    m = parse_spec(doc, catalog).model
    h, copies = m.hidden, m.top_k + m.shared_experts
    assert mlp_inputs_per_token(m) == pytest.approx((3 * h + 58 * copies * h) / 61)  # 3 dense layers, 58 MoE
    fp8 = elementwise_bytes(m, parse_spec(doc, catalog).training, shard)[0]
    doc["training"]["precision"] = "bf16"
    bf16 = elementwise_bytes(m, parse_spec(doc, catalog).training, shard)[0]
    f = (3 * m.ffn_hidden + 58 * copies * m.expert_ffn_hidden) / 61
    assert fp8 - bf16 == pytest.approx(C.FP8_CAST_BYTES_FUSED * (h + mlp_inputs_per_token(m) + h + f))


def dsv3_ep(catalog, **training) -> dict:
    return {"model": "DeepSeek-V3 671B (MLA approximated as MHA)",
            "training": {"global_batch": 32, "ep_dispatch": "dedup", **training},
            "cluster": {"num_gpus": 256, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                        "fabric": "NDR InfiniBand fat tree"},
            "layout": {"tp": 1, "pp": 16, "dp": 16, "cp": 1, "ep": 16, "micro_batch": 1, "vpp": 1,
                       "recompute": "full", "zero": 1}}


def ep_bytes(plan_entry: dict) -> float:
    return sum(c["bytes_per_step"] for c in plan_entry["comm"] if c["group"] == "ep")


def test_moe_tokens_travel_in_16_bits_unless_the_dispatch_quantises_them(catalog):
    """Megatron-Core's dispatchers send bf16 hidden states even in FP8 training (the experts' first linear
    quantises them on arrival), so FP8 moves the same expert all-to-all bytes as BF16. FP8 dispatch (DeepSeek-V3's
    framework, Megatron-Core's ncclep MXFP8) sends the forward dispatch and the gradient sent back that way at 1
    byte plus a 4-byte scale per 128 values, the two combines at 2: half the calls at 1.03 bytes."""
    bf16 = ep_bytes(best(dsv3_ep(catalog, precision="bf16"), catalog))
    assert bf16 > 0
    assert ep_bytes(best(dsv3_ep(catalog, precision="fp8"), catalog)) == pytest.approx(bf16)
    fp8_wire = ep_bytes(best(dsv3_ep(catalog, precision="fp8", ep_dispatch_dtype="fp8"), catalog))
    assert fp8_wire == pytest.approx(bf16 * (1 + 4 / 128 + 2) / 2 / 2)
    # The switch is an FP8 one: BF16 training sends 16 bits whatever it says.
    assert ep_bytes(best(dsv3_ep(catalog, precision="bf16", ep_dispatch_dtype="fp8"), catalog)) == pytest.approx(bf16)


def test_zero2_reduce_scatters_every_micro_batch_and_zero1_once_a_step(catalog):
    def reductions(zero: int) -> float:
        doc = llama_8b_fsdp(catalog, 64)
        doc["training"]["global_batch"] = 4 * 64  # four micro-batches of one sequence per rank
        doc["layout"].update(zero=zero)
        comm = best(doc, catalog)["comm"]
        return sum(c["calls_per_step"] for c in comm if c["group"] == "dp" and c["collective"] == "reduce_scatter")
    assert reductions(1) == 1
    assert reductions(2) == 4


def test_pytorch_selective_recompute_gathers_the_sequence_parallel_inputs_again(catalog):
    """torchtitan's per-operator selective policy keeps matmul outputs, not the all-gathered inputs: with SP the
    backward gathers the two forward all-gathers' inputs again (2 per layer per micro-batch); Megatron's selective
    recomputation repeats no collective."""
    doc = llama_8b_fsdp(catalog, 16)
    doc["layout"] = {"tp": 2, "pp": 1, "cp": 1, "dp": 8, "micro_batch": 1, "sequence_parallel": True,
                     "recompute": "selective", "zero": 1}
    plans = {}
    for impl in ("megatron", "pytorch"):
        doc["training"]["checkpoint_impl"] = impl
        plans[impl] = best(doc, catalog)
    gathers = {k: sum(c["calls_per_step"] for c in p["comm"] if c["group"] == "tp" and c["collective"] == "all_gather")
               for k, p in plans.items()}
    # 32 layers; a global batch of 16 over DP 8 at micro-batch 1 is 2 micro-batches per step.
    micro = 16 // 8
    assert gathers["pytorch"] - gathers["megatron"] == pytest.approx(2 * 32 * micro)
    assert plans["pytorch"]["time_s"]["tp_comm"] > plans["megatron"]["time_s"]["tp_comm"]
    assert plans["pytorch"]["step_time_s"] > plans["megatron"]["step_time_s"]


def test_tp_overlap_cannot_hide_the_backward_re_gathers(catalog):
    """Async TP decomposes a GEMM along the rows of the operand gathered before it; the backward's re-gathers feed
    only weight-gradient GEMMs, which contract over the gathered tokens, so each stays exposed whole: with
    overlap, PyTorch's checkpointing adds exactly those gathers' time to the exposed TP communication."""
    doc = llama_8b_fsdp(catalog, 16)
    doc["layout"] = {"tp": 2, "pp": 1, "cp": 1, "dp": 8, "micro_batch": 1, "sequence_parallel": True,
                     "recompute": "selective", "zero": 1}
    doc["training"]["tp_comm_overlap"] = True
    exposed, per_gather = {}, {}
    for impl in ("megatron", "pytorch"):
        doc["training"]["checkpoint_impl"] = impl
        p = best(doc, catalog)
        ag = next(c for c in p["comm"] if c["group"] == "tp" and c["collective"] == "all_gather")
        exposed[impl], per_gather[impl] = p["time_s"]["tp_comm"], ag["time_s"] / ag["calls_per_step"]
    assert per_gather["pytorch"] == pytest.approx(per_gather["megatron"], rel=1e-4)
    regathers = 2 * 32 * (16 // 8)  # two per layer per micro-batch, 32 layers, 2 micro-batches
    assert exposed["pytorch"] - exposed["megatron"] == pytest.approx(regathers * per_gather["pytorch"], rel=1e-3)


def test_separate_projections_run_each_gemm_on_its_own(catalog):
    """torchtitan's wq, wk, wv and w1, w3 are separate GEMMs: the layer's forward is the fused one's with the QKV
    and gate+up GEMMs replaced by their parts, and with grouped-query attention at TP 8 the narrow K and V GEMMs
    (N = 1024 / 8) make it slower."""
    import numpy as np

    from planner.compute import Shard, gemm_fwd_bwd, layer_times
    doc = llama_8b_fsdp(catalog, 64)
    spec = {}
    for how in ("fused", "separate"):
        doc["training"]["projections"] = how
        spec[how] = parse_spec(doc, catalog)
    m, gpu = spec["fused"].model, spec["fused"].cluster.gpu
    shard = Shard(np.array([8]), np.array([1]), np.array([1]), np.array([1]), np.array([True]))
    t, h, kvd, f = 8192, 4096, 1024, 14336
    fused, separate = (layer_times(m, gpu, spec[how].training, shard) for how in ("fused", "separate"))
    gemm = lambda n, k: gemm_fwd_bwd(t, n, k, gpu, False)[0]  # noqa: E731
    parts = gemm(h / 8, h) + 2 * gemm(kvd / 8, h) + 2 * gemm(f / 8, h)
    whole = gemm((h + 2 * kvd) / 8, h) + gemm(2 * f / 8, h)
    assert float(separate.fwd[0] - fused.fwd[0]) == pytest.approx(float(parts - whole), rel=1e-9)
    assert separate.fwd[0] > fused.fwd[0] and separate.bwd[0] > fused.bwd[0]
    assert spec["separate"].training.projections == "separate" and spec["fused"].training.projections == "fused"


def test_specs_saved_with_recompute_early_stop_still_parse(catalog):
    doc = llama_8b_fsdp(catalog, 8)
    doc["training"]["recompute_early_stop"] = True
    assert parse_spec(doc, catalog).training.checkpoint_impl == "pytorch"
    doc["training"]["recompute_early_stop"] = False
    assert parse_spec(doc, catalog).training.checkpoint_impl == "megatron"


@pytest.mark.parametrize("vpp", [1, 3])
def test_interleaved_pipeline_hand_offs_run_behind_compute(catalog, gpt3_doc, vpp):
    # GPT-3 on 1,024 A100s, PP 16 with v virtual stages: 2 (m v + p - 1) hand-offs per step. Overlapped (Megatron-Core's
    # interleaved default), only the (p - 1) / (m v + p - 1) that fill and drain the pipeline wait, the rest at
    # COMM_INTERFERENCE (0.3); without virtual stages Megatron does not overlap them.
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": vpp, "sequence_parallel": True,
                          "recompute": "full", "zero": 1}
    times = {}
    for overlap in (False, True):
        gpt3_doc["training"]["pp_comm_overlap"] = overlap
        p = best(gpt3_doc, catalog)
        times[overlap] = p["time_s"]["pp_comm"]
        (sends,) = [c for c in p["comm"] if c["group"] == "pp"]
        micro = gpt3_doc["training"]["global_batch"] // 8
        assert sends["calls_per_step"] == 2 * (micro * vpp + 16 - 1)
        # the report rounds comm entries to 6 significant digits
        assert times[overlap] == pytest.approx(sends["exposed_s"], rel=1e-5)
        assert sends["time_s"] == pytest.approx(times[False], rel=1e-5)
    fill = 15 / (micro * vpp + 15)
    assert times[True] == pytest.approx(times[False] * (fill + 0.3 * (1 - fill) if vpp > 1 else 1.0))
    assert (times[True] < times[False]) == (vpp > 1)


def llama_70b_gb200(catalog, offload: int, host: float | None = None) -> dict:
    """Llama 3 70B on 64 GB200, FSDP without recomputation at 8K tokens (NeMo's GB300 BF16 recipe keeps 30 of the
    80 layers' activations in Grace memory)."""
    node = dict(catalog["node"]["GB200 NVL72 compute tray"], **({"host_gbytes_per_s": host} if host else {}))
    return {"model": dict(catalog["model"]["Llama 3 70B"], seq_len=8192),
            "training": {"global_batch": 64, "precision": "bf16", "activation_offload_layers": offload},
            "cluster": {"num_gpus": 64, "gpu": "GB200", "node": node, "fabric": "XDR InfiniBand fat tree"},
            "layout": {"tp": 1, "pp": 1, "dp": 64, "cp": 1, "micro_batch": 1, "zero": 3, "recompute": "none"}}


def layer_activation_bytes(spec) -> float:
    """Saved activation bytes of one layer and micro-batch of the pinned TP1 PP1 ZeRO-3 layout, no recomputation."""
    import numpy as np

    from planner.memory import Layouts, activation_bytes_per_token
    lay = Layouts(*(np.array([v]) for v in (1, 1, 64, 1, 1, 1, 1, 0, 0.0, False, 3, 0)))
    return float(activation_bytes_per_token(spec.model, spec.training, lay)[0][0]) * spec.model.seq_len


def test_offloading_makes_a_run_that_ran_fit(catalog):
    """Without offloading the recipe needs 210 GiB of the GB200's 186; with 30 of 80 layers offloaded, 50 keep
    their activations and 2 more are in flight; with 79, 1 keeps them and 2 are in flight: 49 layers apart."""
    answer = plan(parse_spec(llama_70b_gb200(catalog, 0), catalog), top=1)
    assert answer["plans"] == [] and "needs 209.7 GiB of 186" in answer["rejected_examples"]["out_of_memory"]
    thirty, most = (best(llama_70b_gb200(catalog, k), catalog) for k in (30, 79))
    layer = layer_activation_bytes(parse_spec(llama_70b_gb200(catalog, 30), catalog)) / 1024 ** 3
    assert thirty["memory_gib"]["activations"] - most["memory_gib"]["activations"] == pytest.approx(49 * layer,
                                                                                                   rel=1e-4)
    assert thirty["memory_gib"]["total"] < 150
    # NVLink-C2C (450 GB/s a GPU) moves a layer's activations well within its compute: nothing exposed.
    assert thirty["time_s"]["offload"] == 0.0 and thirty["step_time_s"] == most["step_time_s"]


def llama_405b_gb200(catalog, expandable: bool) -> dict:
    """Megatron-Bridge's Llama 3.1 405B recipe on 256 GB200 (perf_recipes/llama/gb200/llama31.py,
    llama31_405b_pretrain_256gpu_gb200_fp8cs_config): FP8, TP4 PP16 VP4, no recomputation, gradients reduced in
    bf16, TP overlap, and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. NeMo's performance summary (26.04.01)
    publishes 2,144 TFLOP/s a GPU for it."""
    return {"model": dict(catalog["model"]["Llama 3.1 405B"], seq_len=8192),
            "training": {"global_batch": 1536, "precision": "fp8", "attention": "cudnn", "tp_comm_overlap": True,
                         "grad_reduce_dtype": "bf16", "expandable_segments": expandable},
            "cluster": {"num_gpus": 256, "gpu": "GB200", "node": "GB200 NVL72 compute tray",
                        "fabric": "XDR InfiniBand fat tree"},
            "layout": {"tp": 4, "pp": 16, "dp": 4, "cp": 1, "vpp": 4, "micro_batch": 1, "recompute": "none",
                       "zero": 1}}


def test_expandable_segments_drop_the_fragmentation_allowance_and_admit_a_run_that_ran(catalog):
    """The default allocator keeps 8% of the activations free for its gaps, so the recipe would need 193.9 GiB of
    the GB200's 186; the recipe sets expandable segments, and without the allowance it needs 183.1 and runs, as
    it did, at the same speed."""
    answer = plan(parse_spec(llama_405b_gb200(catalog, False), catalog), top=1)
    assert answer["plans"] == [] and "needs 193.9 GiB of 186" in answer["rejected_examples"]["out_of_memory"]
    p = best(llama_405b_gb200(catalog, True), catalog)
    mem = p["memory_gib"]
    assert mem["total"] == pytest.approx(183.07, abs=0.01) and mem["total"] <= mem["capacity"]
    roomy = llama_405b_gb200(catalog, False)  # the allowance kept, on a GB200 with room for it
    roomy["cluster"]["gpu"] = dict(catalog["gpu"]["GB200"], memory_gib=250)
    forced = best(roomy, catalog)
    assert forced["memory_gib"]["other"] - mem["other"] == pytest.approx(0.08 * mem["activations"], rel=1e-4)
    assert forced["step_time_s"] == pytest.approx(p["step_time_s"], rel=1e-9)


def test_a_slow_host_link_exposes_the_copies_the_compute_cannot_cover(catalog):
    """The same offload over PCIe 3.0 x16 (32 GB/s, 12.8 GB/s each way at 80%): 30 layers of 8,192 tokens of
    saved activations take longer each way than the whole 80-layer forward pass."""
    doc = llama_70b_gb200(catalog, 30, host=32)
    copies = 30 * layer_activation_bytes(parse_spec(doc, catalog)) / (16e9 * 0.8)
    p = best(doc, catalog)
    compute_fwd = p["time_s"]["compute"] / 3.0  # one micro-batch; the backward is about twice the forward
    assert copies > compute_fwd
    assert p["time_s"]["offload"] > 0.5 * copies
    assert p["step_time_s"] == pytest.approx(sum(p["time_s"].values()), rel=1e-6)


def test_a_stage_offloads_at_most_all_but_one_of_its_layers(catalog):
    """The spec refuses as many as the model's layers; a stage of 20 (PP 4) offloads at most 19 of the 79 asked."""
    def four_stages(k: int) -> dict:
        doc = llama_70b_gb200(catalog, k)
        doc["layout"].update(pp=4, dp=16, zero=1)  # ZeRO-1: no stack shards weights across pipeline micro-batches
        return best(doc, catalog)

    many, most, fewer = (four_stages(k) for k in (79, 19, 18))
    assert many["memory_gib"] == most["memory_gib"] != fewer["memory_gib"]
    with pytest.raises(SpecError, match="training.activation_offload_layers: must be less than model.layers"):
        parse_spec(llama_70b_gb200(catalog, 80), catalog)


def test_a_cached_fp8_weight_cast_is_paid_once_a_step_not_every_micro_batch(catalog):
    # Transformer Engine casts each layer's weights (and their transposes) to FP8 in the first micro-batch of a step
    # and reuses them (is_first_microbatch, which Megatron-Core passes); without the cache every forward casts them.
    from planner.compute import Shard, fp8_weight_cast_bytes, hbm_bytes_per_s

    def doc(**training):
        d = llama_8b_fsdp(catalog, 8, precision="fp8", **training)
        d["training"]["global_batch"] = 8 * 6  # six micro-batches of one sequence per rank
        d["layout"].update(zero=1)  # full recomputation, as llama_8b_fsdp sets
        return d
    per_step, per_micro = (best(doc(fp8_weight_cache=c), catalog)["time_s"]["compute"] for c in (True, False))
    spec = parse_spec(doc(), catalog)
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    cast = fp8_weight_cast_bytes(spec.model, shard)[0] / hbm_bytes_per_s(spec.cluster.gpu)
    # Llama 3 8B: 32 layers of 4 bytes per weight (2-byte read, FP8 copy and transpose), at 0.85 of 3.35 TB/s.
    assert cast == pytest.approx(4 * (2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) / (3350e9 * 0.85))
    # Uncached, each of the 6 micro-batches casts in its forward and again in its recomputed forward; cached, once.
    assert per_micro - per_step == pytest.approx(32 * (2 * 6 - 1) * cast, rel=1e-6)
    # BF16 training casts nothing either way.
    bf16 = [best(dict(doc(fp8_weight_cache=c), training={"global_batch": 48, "precision": "bf16",
                                                          "fp8_weight_cache": c}), catalog)["time_s"]["compute"]
            for c in (True, False)]
    assert bf16[0] == bf16[1]


def test_bf16_optimizer_states_shrink_the_sharded_state_as_stated(catalog, gpt3_doc):
    """12, 8 and 6 bytes a parameter (fp32 master and moments; bf16 moments; bf16 moments and the master's low 16
    bits), sharded over DP by the distributed optimizer; only the optimizer part changes."""
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": 1, "sequence_parallel": True,
                          "recompute": "full", "zero": 1}

    def entry(states: str) -> dict:
        gpt3_doc["training"]["optimizer_states"] = states
        return best(gpt3_doc, catalog)
    fp32, bf16, rem = entry("fp32"), entry("bf16"), entry("bf16_remainder")
    assert bf16["memory_gib"]["optimizer"] == pytest.approx(fp32["memory_gib"]["optimizer"] * 8 / 12, rel=1e-3)
    assert rem["memory_gib"]["optimizer"] == pytest.approx(fp32["memory_gib"]["optimizer"] * 6 / 12, rel=1e-3)
    for key in ("weights", "gradients", "activations"):
        assert rem["memory_gib"][key] == fp32["memory_gib"][key]
    # The Adam step moves 2 x state + 10 bytes a parameter: 34, 26 and 22.
    assert rem["time_s"]["optimizer"] == pytest.approx(fp32["time_s"]["optimizer"] * 22 / 34, rel=1e-3)


def test_the_master_remainder_needs_a_sharded_bf16_weight_beside_it(catalog):
    """ZeRO-3 keeps no 16-bit shard for the remainder to complete, so bf16_remainder holds bf16's 8 bytes."""
    def optimizer(states: str) -> float:
        return best(llama_8b_fsdp(catalog, 64, optimizer_states=states), catalog)["memory_gib"]["optimizer"]
    assert optimizer("bf16_remainder") == optimizer("bf16")
    assert optimizer("bf16") == pytest.approx(optimizer("fp32") * 8 / 12, rel=1e-3)
    # The Adam step reads and writes the state it holds: 2 x 8 + 10 bytes a parameter, as bf16's.
    def step(states: str) -> float:
        return best(llama_8b_fsdp(catalog, 64, optimizer_states=states), catalog)["time_s"]["optimizer"]
    assert step("bf16_remainder") == step("bf16") == pytest.approx(step("fp32") * 26 / 34, rel=1e-2)


def test_fp16_weights_cannot_carry_a_master_remainder(catalog):
    doc = llama_8b_fsdp(catalog, 8, precision="fp16", optimizer_states="bf16_remainder")
    with pytest.raises(SpecError) as err:
        parse_spec(doc, catalog)
    assert [e.field for e in err.value.errors] == ["training.optimizer_states"]
    doc["training"]["optimizer_states"] = "bf16"
    assert parse_spec(doc, catalog).training.optimizer_states == "bf16"


def test_ring_attention_merges_cost_hbm_traffic_per_step_and_pytorchs_several_times_more(catalog):
    """Llama 3 8B at 256K tokens over CP 8 (torchtitan's run): 32K local tokens, 4,096-wide queries, 1,024-wide K/V
    (grouped-query) for Transformer Engine, K/V repeated to 4,096 wide for PyTorch's context_parallel."""
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, attention_times, hbm_bytes_per_s, ring_merge_bytes
    doc = llama_8b_fsdp(catalog, 8)
    doc["model"]["seq_len"] = 262144
    ring, single = (Shard(*(np.array([v]) for v in (1, cp, 1, 1, False))) for cp in (8, 1))
    te, torch = (parse_spec(dict(doc, training=dict(doc["training"], cp_impl=impl)), catalog)
                 for impl in ("te", "pytorch"))
    q, kv = 32768 * 4096, 32768 * 1024
    te_f, te_b = ring_merge_bytes(te.model, te.training, ring)
    assert te_f[0] == pytest.approx(7 * 6.0 * q)                       # 7 merges after the first step
    assert te_b[0] == pytest.approx(7 * (6.0 * q + 12.0 * kv))
    pt_f, pt_b = ring_merge_bytes(torch.model, torch.training, ring)
    assert pt_f[0] == pytest.approx(7 * (38.0 + 8.0) * q + (6.0 + 8.0) * q)
    assert pt_b[0] == pytest.approx(8 * (10.0 + 42.0) * q + 7 * 8.0 * q + (10.0 + 28.0) * q)
    assert 8 < (pt_f[0] + pt_b[0]) / (te_f[0] + te_b[0]) < 12
    # Without CP there is nothing to merge, whichever implementation.
    assert all(float(b[0]) == 0.0 for s in (te, torch) for b in ring_merge_bytes(s.model, s.training, single))
    # The traffic is charged at the GPU's HBM rate on top of the kernels: ~45 GB a forward pass with PyTorch's ring
    # (16 ms on the H100 SXM's 3.35 TB/s x 0.85) against the attention kernels' ~0.27 s at 32K x 256K.
    gpu = te.cluster.gpu
    (f_te, b_te), (f_pt, b_pt) = (attention_times(s.model, gpu, s.training, ring) for s in (te, torch))
    assert f_pt[0] - f_te[0] == pytest.approx((pt_f[0] - te_f[0]) / hbm_bytes_per_s(gpu))
    assert b_pt[0] - b_te[0] == pytest.approx((pt_b[0] - te_b[0]) / hbm_bytes_per_s(gpu))
    assert 0.03 < (f_pt[0] - f_te[0]) / f_te[0] < 0.15
    assert C.CP_MERGE_BYTES_PYTORCH / C.CP_MERGE_BYTES_TE > 6


def test_torchtitan_context_parallel_rows_run_pytorchs_ring_and_megatron_rows_transformer_engines(catalog):
    from planner.published import load_rows, row_to_spec_doc
    rows = {r["id"]: r for r in load_rows("planner/data/calibration_runs.json")}
    assert row_to_spec_doc(rows["tt24_t2_8b_g8_fsdp1_cp8_s262144"], catalog)["training"]["cp_impl"] == "pytorch"
    assert row_to_spec_doc(rows["mcore_moe_qwen3_235b_h100_bf16_256gpu_tp2pp8ep32"],
                           catalog)["training"]["cp_impl"] == "te"


def test_the_context_parallel_ring_follows_the_overlap_rule_of_every_collective(catalog):
    # Llama 3 8B at 64K tokens, CP 8 in one node: the ring's hops hide behind the attention (its window), and the
    # hidden part still costs COMM_INTERFERENCE, as every other overlapped collective does. It was exposed only in
    # excess of the whole attention: 0 here, where the DP and PP traffic beside it paid 30%.
    from planner import constants as C
    doc = llama_8b_fsdp(catalog, 8)
    doc["model"]["seq_len"] = 65536
    doc["layout"] = {"tp": 1, "pp": 1, "dp": 1, "cp": 8, "micro_batch": 1, "zero": 3, "recompute": "full"}
    (ring,) = [c for c in best(doc, catalog)["comm"] if c["group"] == "cp"]
    assert ring["collective"] == "send_recv" and ring["time_s"] > 0
    assert ring["exposed_s"] == pytest.approx(C.COMM_INTERFERENCE * ring["time_s"], rel=1e-4)  # all of it hides
