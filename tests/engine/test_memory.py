"""Memory per GPU against hand-computed values (Korthikanti et al. 2022; ZeRO)."""
from __future__ import annotations

import numpy as np
import pytest

from planner import parse_spec
from planner.memory import (GIB, RECOMPUTE_CODES, Layouts, activation_bytes_per_token, end_stage_layers, memory_per_gpu,
                            params_on_gpu, vp_group)
from planner.model import param_count


def layouts(**axes) -> Layouts:
    base = dict(tp=1, pp=1, dp=1, cp=1, ep=1, micro_batch=1, vpp=1, recompute=0, sp=False, zero=0, order=0)
    base.update(axes)
    base["recompute"] = RECOMPUTE_CODES.get(base["recompute"], base["recompute"])
    base.setdefault("full_share", 1.0 if base["recompute"] == RECOMPUTE_CODES["full"] else 0.0)
    return Layouts(**{k: np.atleast_1d(np.array(v)) for k, v in base.items()})


@pytest.fixture
def gpt3(gpt3_doc):
    gpt3_doc["training"]["attention"] = "unfused"
    return parse_spec(gpt3_doc)


@pytest.mark.parametrize("axes, coefficient", [
    # Korthikanti et al. 2022, Table 2 for GPT-3 (h 12288, a 96, s 2048), t = 8, bytes per token-layer / h:
    (dict(tp=8, recompute="none"), 10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8)),   # no SP: 10 + 24/t + 5as/(ht)
    (dict(tp=8, sp=True, recompute="none"), (34 + 5 * 96 * 2048 / 12288) / 8),   # SP: (34 + 5as/h)/t
    (dict(tp=8, sp=True, recompute="selective"), 34 / 8),                        # SP + selective: 34/t
    (dict(tp=8, recompute="selective"), 10 + 24 / 8),                            # selective only
    (dict(tp=8, sp=True, recompute="full"), 2 / 8),                              # full: the 2-byte input
    (dict(tp=8, recompute="full"), 2),
])
def test_activation_bytes_match_korthikanti(gpt3, axes, coefficient):
    stored, _ = activation_bytes_per_token(gpt3.model, gpt3.training, layouts(**axes))
    assert stored[0] == pytest.approx(coefficient * 12288)


def test_flash_attention_never_stores_the_score_matrix(gpt3_doc):
    spec = parse_spec(gpt3_doc)  # flash is the default
    stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=8, sp=True))
    assert stored[0] == pytest.approx(34 / 8 * 12288)


@pytest.mark.parametrize("axes, extra", [
    (dict(tp=8, sp=True, recompute="none"), 2 * 2 * 3 / 8),   # the 3 extra streams at both blocks, split by SP
    (dict(tp=8, recompute="none"), 2 * 2 * 3),
    (dict(tp=8, sp=True, recompute="full"), 2 * 3 / 8),       # the layer input is 4 streams, not 1
])
def test_hyper_connections_keep_their_extra_streams(gpt3_doc, axes, extra):
    one = parse_spec(gpt3_doc)
    gpt3_doc["model"]["residual_streams"] = 4
    four = parse_spec(gpt3_doc)
    lay = layouts(**axes)
    stored_one, _ = activation_bytes_per_token(one.model, one.training, lay)
    stored_four, _ = activation_bytes_per_token(four.model, four.training, lay)
    assert stored_four[0] - stored_one[0] == pytest.approx(extra * 12288)


def test_partitioned_saved_inputs_keep_a_tp_th_of_a_recomputed_layers_input(gpt3_doc):
    """Megatron --distribute-saved-activations / DeepSpeed partition_activations: the 2-byte layer input full
    recomputation keeps is split over the TP ranks, as sequence parallelism splits it."""
    gpt3_doc["training"]["partition_activations"] = True
    spec = parse_spec(gpt3_doc)
    stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=8, recompute="full"))
    assert stored[0] == pytest.approx(2 / 8 * 12288)
    stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=8, recompute="none"))
    assert stored[0] > 10 * 12288  # it changes nothing without full recomputation


def test_gqa_gated_activations(catalog, gpt3_doc):
    gpt3_doc["model"] = dict(catalog["model"]["Llama 3 70B"])
    spec = parse_spec(gpt3_doc, catalog)
    h, kvd, f = 8192, 1024, 28672
    stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=8, sp=True))
    # Replicated: 2 norm inputs + QKV and MLP inputs (8h, no dropout); split: Q 2h, K+V 4 kvd, proj input 2h,
    # gate and up outputs 4f, down input 2f.
    assert stored[0] == pytest.approx((8 * h + 2 * h + 4 * kvd + 2 * h + 6 * f) / 8)


@pytest.mark.parametrize("saved, sp", [("fp8", True), ("fp8", False), ("bf16", True)])
def test_fp8_linears_keep_their_one_byte_inputs(catalog, gpt3_doc, saved, sp):
    # Transformer Engine keeps the FP8 cast of the QKV, MLP-up and down-projection inputs (1 byte, not 2) and an
    # FP8 copy of the attention output beside the 16-bit one; torchao float8 (bf16) keeps the 16-bit inputs.
    gpt3_doc["model"] = dict(catalog["model"]["Llama 3 70B"])
    gpt3_doc["training"].update(precision="fp8", fp8_saved_inputs=saved)
    gpt3_doc["cluster"]["gpu"] = "H100 SXM5 80GB"
    spec = parse_spec(gpt3_doc, catalog)
    h, kvd, f = 8192, 1024, 28672
    stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=8, sp=sp))
    replicated = (6 * h if saved == "fp8" else 8 * h) / (8 if sp else 1)
    split = 2 * h + 4 * kvd + 2 * h + (h + 4 * f + f if saved == "fp8" else 6 * f)
    assert stored[0] == pytest.approx(replicated + split / 8)


@pytest.mark.parametrize("precision, saved, per_copy", [("bf16", "fp8", 2), ("fp8", "fp8", 1), ("fp8", "bf16", 2)])
def test_moe_layers_keep_their_dispatched_token_copies(catalog, gpt3_doc, precision, saved, per_copy):
    # Mixtral 8x7B (h 4096, kv 1024, expert FFN 14336, top-2): each token reaches its experts twice, and the
    # grouped fc1 keeps that permuted [tokens x top_k, h] input for its weight gradient (Megatron-Core
    # moe/experts.py), 1 byte per element where Transformer Engine keeps the FP8 cast. The dense formula's MLP
    # input (the router's) stays; selective recomputation does not repeat the all-to-all, full keeps the input.
    gpt3_doc["model"] = dict(catalog["model"]["Mixtral 8x7B"])
    gpt3_doc["training"].update(precision=precision, fp8_saved_inputs=saved)
    gpt3_doc["cluster"]["gpu"] = "H100 SXM5 80GB"
    spec = parse_spec(gpt3_doc, catalog)
    h, kvd, f = 4096, 1024, 2 * 14336
    fp8 = precision == "fp8" and saved == "fp8"
    dense = (6 * h if fp8 else 8 * h) + 2 * h + 4 * kvd + 2 * h + (h + 4 * f + f if fp8 else 6 * f)
    dispatched = 2 * h * per_copy
    for tp in (1, 4):
        stored, _ = activation_bytes_per_token(spec.model, spec.training, layouts(tp=tp, sp=tp > 1))
        assert stored[0] == pytest.approx((dense + dispatched) / tp)
    selective, _ = activation_bytes_per_token(spec.model, spec.training, layouts(recompute="selective"))
    assert selective[0] == pytest.approx(4 * h + 2 * h + 2 * h + 2 * kvd + 2 * f + dispatched)
    full, _ = activation_bytes_per_token(spec.model, spec.training, layouts(recompute="full"))
    assert full[0] == pytest.approx(2 * h)


def test_dispatched_copies_are_averaged_over_the_moe_layers(catalog, gpt3_doc):
    # DeepSeek-V3: 58 of 61 layers are MoE (top-8, h 7168); the 3 dense ones keep no routed copies.
    gpt3_doc["model"] = dict(catalog["model"]["DeepSeek-V3 671B (MLA approximated as MHA)"])
    moe = parse_spec(gpt3_doc, catalog)
    gpt3_doc["model"]["top_k"] = 1
    top1 = parse_spec(gpt3_doc, catalog)
    a, _ = activation_bytes_per_token(moe.model, moe.training, layouts())
    b, _ = activation_bytes_per_token(top1.model, top1.training, layouts())
    # 7 more copies of 2 bytes x h, on 58 of 61 layers; the 7 more routed experts' fc1/activation outputs
    # (6 x 2048 bytes each) likewise.
    assert a[0] - b[0] == pytest.approx(7 * (2 * 7168 + 6 * 2048) * 58 / 61)


def test_weights_per_gpu_for_gpt3_tp8_pp16(gpt3):
    pc = param_count(gpt3.model)
    p = params_on_gpu(gpt3.model, pc, layouts(tp=8, pp=16, dp=8))
    per_layer = 12 * 12288 ** 2 + 13 * 12288
    embedding = (51200 + 2048) * 12288
    assert p.total[0] == pytest.approx((6 * per_layer + embedding) / 8)


def test_zero_stages_shard_state_over_data_parallel_ranks(gpt3):
    pc = param_count(gpt3.model)
    rows = [memory_per_gpu(gpt3.model, gpt3.training, pc, layouts(tp=8, pp=16, dp=8, zero=z)) for z in range(4)]
    p = params_on_gpu(gpt3.model, pc, layouts(tp=8, pp=16, dp=8)).total[0]
    assert rows[0].optimizer[0] == pytest.approx(12 * p) and rows[1].optimizer[0] == pytest.approx(12 * p / 8)
    assert rows[1].gradients[0] == pytest.approx(4 * p) and rows[2].gradients[0] == pytest.approx(4 * p / 8)
    # ZeRO-3 / FSDP keeps no sharded 16-bit copy (the fp32 master is the parameter); it gathers two layers'
    # 16-bit weights and holds one layer's unsharded fp32 gradient instead.
    assert rows[2].weights[0] == pytest.approx(2 * p) and rows[3].weights[0] == 0.0
    layer = (pc.total - pc.embedding - pc.output) / gpt3.model.layers / 8
    assert rows[3].other[0] - rows[2].other[0] == pytest.approx(layer * (2 * 2 + 4))


def test_mpt_30b_full_shard_on_eight_a100s_fits(catalog):
    """llm-foundry ran MPT-30B on 8 A100-80GB, FSDP full shard, full recompute, micro-batch 3 at 2,048 tokens."""
    from planner.published import load_rows, row_to_spec_doc
    from .conftest import DATA
    row = next(r for r in load_rows(DATA / "calibration_runs.json") if r["id"] == "llmf_a100-80_30b_s2048_g8_gb504")
    spec = parse_spec(row_to_spec_doc(row, catalog), catalog)
    assert (spec.layout.zero, spec.layout.recompute, spec.layout.micro_batch) == (3, "full", 3)
    mem = memory_per_gpu(spec.model, spec.training, param_count(spec.model),
                         layouts(tp=1, pp=1, dp=8, zero=3, recompute="full", micro_batch=3))
    assert 60 < mem.total[0] / GIB < 80


def test_selective_recompute_with_flash_keeps_every_other_gemm_output(catalog, gpt3_doc):
    gpt3_doc["model"] = dict(catalog["model"]["Llama 3 70B"])
    spec = parse_spec(gpt3_doc, catalog)
    h, kvd, f = 8192, 1024, 28672
    stored, full = activation_bytes_per_token(spec.model, spec.training, layouts(tp=1, recompute="selective"))
    assert stored[0] == pytest.approx(4 * h + 2 * h + 2 * h + 2 * kvd + 2 * f)
    assert stored[0] < 0.7 * full[0]


def test_first_stage_holds_pp_microbatches_and_interleaving_adds(gpt3):
    pc = param_count(gpt3.model)
    act = lambda **a: memory_per_gpu(gpt3.model, gpt3.training, pc, layouts(**a)).activations[0]  # noqa: E731
    base = dict(tp=8, pp=16, dp=8, sp=True, recompute="selective", micro_batch=1)
    one_layer = 2048 * 34 / 8 * 12288
    # 6 layers x 16 micro-batches in flight (1F1B), plus nothing else on the first stage.
    assert act(**base) == pytest.approx(6 * 16 * one_layer)
    # Interleaving with v = 2: x (1 + (p - 1)/(p v)) (Korthikanti et al. 2022, sec. 4.2.3).
    assert act(**base, vpp=2) == pytest.approx(6 * 16 * one_layer * (1 + 15 / 32))
    # 24 micro-batches a step (DP 64), not a multiple of PP 16: groups of 24 (vp_group). Megatron-Core warms up
    # 2(p - 1) + (v - 1) N chunks and runs one more: (30 + 24 + 1) / 2 = 27.5 stage-micro-batches, where groups of
    # p = 16 would hold 16 (1 + 15/32) = 23.5.
    assert act(**dict(base, dp=64), vpp=2) == pytest.approx(6 * 27.5 * one_layer)


@pytest.mark.parametrize("micro, pp, group", [
    (32, 9, 11),   # 32 % 11 = 10 >= 9 (10 leaves 2, fewer than PP: bubbles)
    (64, 9, 11),   # 64 % 11 = 9
    (16, 9, 16),   # 16 % n < 9 for n = 10..15: one group of all 16
    (36, 9, 9),    # a multiple of PP: Megatron-Core's default groups of PP
    (8, 9, 9),     # fewer than PP: no interleaving (search.inner_reason); PP as the default
])
def test_interleaved_micro_batch_groups_are_the_smallest_megatron_core_accepts(micro, pp, group):
    assert int(vp_group(np.array([micro]), np.array([pp]))[0]) == group


@pytest.mark.parametrize("layers, pp, first, last", [
    (96, 16, 6, 6),     # even: every stage 6
    (126, 16, 7, 7),    # Llama 3 405B: one layer fewer on the first and the last stage (Llama 3 paper, sec. 3.3.2)
    (22, 8, 2, 2),      # Zero Bubble's 1.5B: 2 + 6 x 3 + 2 (Qi et al. 2024, sec. 5.1)
    (61, 16, 3, 3),     # DeepSeek-V3 over 16: 3 missing, the last and the first give one each, a middle stage one
    (9, 2, 5, 4),       # one missing: the last stage, which also runs the output layer, gives it
])
def test_an_uneven_split_spares_the_last_stage_then_the_first(layers, pp, first, last):
    got = end_stage_layers(layers, np.array([pp]))
    assert (int(got[0][0]), int(got[1][0])) == (first, last)


def test_with_a_layer_fewer_on_the_first_stage_the_second_holds_the_peak(gpt3_doc):
    """Zero Bubble's GPT 1.5B (22 layers, h 2304, 24 heads, 1,024 tokens, unfused attention, no recomputation) on
    PP 8, micro-batch 6, 1F1B: the first stage holds 2 layers x 8 micro-batches, the second 3 x 7, with no
    vocabulary matrix; the paper measured 30 GB on its busiest GPU (Table 4)."""
    gpt3_doc["model"] = {"name": "ZB 1.5B", "layers": 22, "hidden": 2304, "heads": 24, "vocab": 50257,
                         "seq_len": 1024}
    gpt3_doc["training"].update(attention="unfused", global_batch=144)
    spec = parse_spec(gpt3_doc)
    pc = param_count(spec.model)
    lay = layouts(pp=8, micro_batch=6)
    stored, _ = activation_bytes_per_token(spec.model, spec.training, lay)
    mem = memory_per_gpu(spec.model, spec.training, pc, lay)
    one = 6 * 1024 * stored[0]  # one layer, one micro-batch
    assert mem.activations[0] == pytest.approx(3 * 7 * one)
    per_layer = (pc.total - pc.embedding - pc.output) / 22
    assert mem.weights[0] == pytest.approx(2 * 3 * per_layer)
    assert 28 < mem.total[0] / GIB < 32
    # Interleaved, the first stage's bound stands: ceil(22 / 8) layers x 8 x (1 + 7 / 24) micro-batches.
    assert memory_per_gpu(spec.model, spec.training, pc, layouts(pp=8, micro_batch=6, vpp=3)).activations[0] == (
        pytest.approx(3 * 8 * (1 + 7 / 24) * one))


def test_gpt3_fits_as_in_plan_spec_example(gpt3):
    pc = param_count(gpt3.model)
    mem = memory_per_gpu(gpt3.model, gpt3.training, pc,
                         layouts(tp=8, pp=16, dp=8, sp=True, recompute="full", zero=1))
    # docs/plan-spec.md's example: weights 2.6, gradients 2.6 (we keep fp32 gradients: 5.4), optimizer 2.6 GiB.
    assert mem.weights[0] / GIB == pytest.approx(2.68, abs=0.01)
    assert mem.gradients[0] / GIB == pytest.approx(5.37, abs=0.01)
    assert mem.optimizer[0] / GIB == pytest.approx(2.01, abs=0.01)
    assert mem.total[0] / GIB < 80


@pytest.mark.parametrize("loss, held", [("fused", 4), ("eager", 12), ("chunked", 1.5)])
def test_the_loss_holds_its_logits_and_they_are_freed_before_a_layer_is_rebuilt(catalog, gpt3_doc, loss, held):
    """Llama 3 8B, 32K tokens on one GPU: 12 bytes a logit for PyTorch's eager cross-entropy on fp32 logits, 4 for
    Megatron's in-place one, an eighth of eager's for a loss over 8 slices of the tokens (torchtitan's
    ChunkedLossWrapper); with full recomputation the rebuilt layer comes after the loss's memory is freed."""
    gpt3_doc["model"] = dict(catalog["model"]["Llama 3 8B"], seq_len=32768)
    gpt3_doc["training"]["cross_entropy"] = loss
    spec = parse_spec(gpt3_doc, catalog)
    pc = param_count(spec.model)
    logits = 32768 * 128256 * held
    for recompute in ("none", "full"):
        lay = layouts(recompute=recompute)
        stored, working = activation_bytes_per_token(spec.model, spec.training, lay)
        act = memory_per_gpu(spec.model, spec.training, pc, lay).activations[0]
        rebuilt = 32768 * working[0] if recompute == "full" else 0.0
        assert act == pytest.approx(32768 * stored[0] * 32 + max(rebuilt, logits))
    # torchtitan stated 83.9 GiB of peak memory for this model at 32K tokens on 8 GPUs (FSDP, full recompute): the
    # eager loss alone is 47 GiB.
    if loss == "eager":
        assert logits / GIB == pytest.approx(47.0, abs=0.1)
