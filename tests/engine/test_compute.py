"""The compute-time model: shape-, precision- and bandwidth-dependent, not a constant rate."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner import constants as C
from planner import parse_spec
from planner.compute import (Shard, attention_efficiency, attention_times, elementwise_bytes, gemm_time, k_half,
                              layer_times)


@pytest.fixture
def h100(catalog, gpt3_doc):
    gpt3_doc["cluster"].update(gpu="H100 SXM5 80GB", node="DGX H100", fabric="NDR InfiniBand fat tree")
    return parse_spec(gpt3_doc, catalog)


def tflops(m, n, k, gpu, fp8=False) -> float:
    return 2 * m * n * k / gemm_time(m, n, k, gpu, fp8) / 1e12


def test_a_large_gemm_runs_near_the_sustained_peak(h100):
    gpu = h100.cluster.gpu
    achieved = tflops(8192, 8192, 8192, gpu)
    # 4096 tiles over 132 SMs: 32 waves, 97% utilised; K-efficiency 8192 / (8192 + K_HALF); the H100's measured
    # achievable fraction of peak (catalog: 794.5 of 989 TFLOP/s).
    assert gpu.gemm_efficiency == pytest.approx(0.803)
    expected = 989 * 0.803 * gpu.sustained_clock * (4096 / (32 * 132)) * 8192 / (8192 + k_half(gpu))
    assert achieved == pytest.approx(expected, rel=0.01)


def test_the_short_k_penalty_grows_with_the_sms_throughput(h100, catalog):
    from planner.spec import GPUSpec
    a100 = GPUSpec(**{**catalog["gpu"]["A100 SXM4 80GB"]})
    assert k_half(a100) == pytest.approx(C.GEMM_K_HALF)
    assert k_half(h100.cluster.gpu) == pytest.approx(C.GEMM_K_HALF * (989 / 132) / (312 / 108))


def test_tensor_parallel_splits_lower_gemm_efficiency(h100):
    gpu = h100.cluster.gpu
    # The projection after TP: K = h / tp shrinks as TP grows.
    whole, split = tflops(8192, 12288, 12288, gpu), tflops(8192, 12288, 12288 / 16, gpu)
    assert split < 0.95 * whole


def test_wave_quantization_penalises_a_partial_last_wave(h100):
    gpu = h100.cluster.gpu  # 132 SMs; a 12 x 11 grid of 128 x 128 tiles fills exactly one wave
    full_wave = tflops(128 * 12, 128 * 11, 8192, gpu)
    one_more_column = tflops(128 * 12, 128 * 11 + 1, 8192, gpu)
    assert one_more_column < 0.6 * full_wave


def test_a_grouped_gemm_quantizes_only_its_last_wave_and_launches_once(h100):
    """Two experts' GEMMs of 6 x 11 tiles each fill half of the H100's 132 SMs: one at a time they take two waves,
    grouped they share one. Groups of whole waves cost their GEMMs' compute, launched once."""
    gpu = h100.cluster.gpu
    n, k = 128 * 11, 8192
    half_wave = float(gemm_time(128 * 6, n, k, gpu))
    assert float(gemm_time(128 * 6, n, k, gpu, groups=1)) == pytest.approx(half_wave)
    assert float(gemm_time(128 * 6, n, k, gpu, groups=2)) == pytest.approx(half_wave, rel=1e-9)
    full_wave = float(gemm_time(128 * 12, n, k, gpu))
    launch = gpu.kernel_overhead_us * 1e-6
    assert float(gemm_time(128 * 12, n, k, gpu, groups=8)) == pytest.approx(8 * full_wave - 7 * launch, rel=1e-9)


def test_transformer_engine_runs_the_experts_in_rounds_of_four_streams(catalog):
    """Mixtral-style MoE with 64 experts on one GPU and small per-expert GEMMs: Transformer Engine's four streams
    (training.expert_gemm "streams") fill fewer waves than one grouped kernel over all 64; with 4 local experts the
    two are the same kernel count and waves."""
    from planner.compute import _moe_mlp_times
    doc = {"model": {"name": "moe", "layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 4096,
                     "experts": 64, "top_k": 2, "expert_ffn_hidden": 1024, "gated_mlp": True},
           "training": {"global_batch": 64},
           "cluster": {"num_gpus": 8, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
    spec = parse_spec(doc, catalog)
    gpu = spec.cluster.gpu

    def shard(ep):
        return Shard(tp=np.array([1.0]), cp=np.array([1.0]), ep=np.array([float(ep)]), micro_batch=np.array([1.0]),
                     sp=np.array([False]))
    streams = _moe_mlp_times(spec.model, gpu, False, shard(1), "streams")
    grouped = _moe_mlp_times(spec.model, gpu, False, shard(1), "grouped")
    # 128 rows an expert: both stream every expert's weights, and four at a time also leave most SMs idle
    assert float(streams[0][0]) > 1.2 * float(grouped[0][0])
    assert float(streams[1][0]) > float(grouped[1][0])
    four = [_moe_mlp_times(spec.model, gpu, False, shard(16), how) for how in ("streams", "grouped")]
    assert float(four[0][0][0]) == pytest.approx(float(four[1][0][0]))


def test_hyper_connections_stream_the_extra_residuals(h100):
    """n residual streams: 3(n-1)h + 2h more 2-byte elements a block, two blocks a layer; without SP every TP rank
    streams them, with SP each its share."""
    m = h100.model
    shard = Shard(tp=np.array([1.0, 8.0]), cp=np.array([1.0, 1.0]), ep=np.array([1.0, 1.0]),
                  micro_batch=np.array([1.0, 1.0]), sp=np.array([False, True]))
    one = elementwise_bytes(m, h100.training, shard)
    four = elementwise_bytes(replace(m, residual_streams=4), h100.training, shard)
    extra = 2.0 * 2.0 * (3 * 3 + 2) * m.hidden
    assert four - one == pytest.approx(np.array([extra, extra / 8]))


def test_a_skinny_gemm_is_memory_bound(h100):
    gpu = h100.cluster.gpu
    m, n, k = 8, 16384, 16384
    memory_s = (m * k + k * n) * 2 + 2 * m * n
    memory_s /= gpu.memory_gbytes_per_s * 1e9 * gpu.hbm_efficiency
    assert float(gemm_time(m, n, k, gpu)) == pytest.approx(memory_s + gpu.kernel_overhead_us * 1e-6, rel=1e-6)


def test_fp8_gemms_are_faster_but_not_twice(h100):
    gpu = h100.cluster.gpu
    speedup = tflops(8192, 8192, 8192, gpu, fp8=True) / tflops(8192, 8192, 8192, gpu)
    # H100 catalog: FP8 1402.6 of 1979, BF16 794.5 of 989 TFLOP/s measured -> 1.77x at best shapes; both reach
    # half rate at the same reduction length (k_half: DeepGEMM and Transformer Engine measure no FP8 doubling).
    assert speedup == pytest.approx(1402.6 / 794.5, rel=0.01)
    assert 1.5 < speedup < 1.77


def test_a_power_capped_gpu_runs_its_gemms_slower(catalog, gpt3_doc, h100):
    gpt3_doc["cluster"].update(gpu="H100 SXM5 96GB HBM2e 500W", node="DGX H100", fabric="NDR InfiniBand fat tree")
    capped = parse_spec(gpt3_doc, catalog)
    ratio = tflops(8192, 8192, 8192, capped.cluster.gpu) / tflops(8192, 8192, 8192, h100.cluster.gpu)
    assert ratio == pytest.approx(capped.cluster.gpu.sustained_clock / h100.cluster.gpu.sustained_clock, rel=0.01)
    assert ratio <= 1.0


def shard(tp=8, cp=1, ep=1, mb=1, sp=True) -> Shard:
    return Shard(*(np.array([v]) for v in (tp, cp, ep, mb, sp)))


def test_memory_bound_work_follows_hbm_bandwidth(catalog, gpt3_doc):
    gpt3_doc["cluster"].update(node="DGX H100", fabric="NDR InfiniBand fat tree")
    times = {}
    for gpu in ("H100 SXM5 80GB", "H200 SXM 141GB"):  # same tensor cores, 3.35 vs 4.8 TB/s
        gpt3_doc["cluster"]["gpu"] = gpu
        spec = parse_spec(gpt3_doc, catalog)
        times[gpu] = layer_times(spec.model, spec.cluster.gpu, spec.training, shard(mb=4)).fwd[0]
    assert times["H200 SXM 141GB"] < times["H100 SXM5 80GB"]


def test_sequence_parallelism_divides_the_replicated_elementwise_work(h100):
    plain = elementwise_bytes(h100.model, h100.training, shard(sp=False))[0]
    split = elementwise_bytes(h100.model, h100.training, shard(sp=True))[0]
    h = 12288
    # GPT-style: 2 norms (2h each) + 2 bias-dropout-adds (3.5h each) = 11h elements of 2 bytes, on every rank.
    assert plain - split == pytest.approx(2 * 11 * h * (1 - 1 / 8))


def test_unfused_attention_costs_more_than_flash_at_long_sequences(h100):
    flash = attention_times(h100.model, h100.cluster.gpu, h100.training, shard())
    unfused_training = type(h100.training)(**{**h100.training.__dict__, "attention": "unfused"})
    unfused = attention_times(h100.model, h100.cluster.gpu, unfused_training, shard())
    assert unfused[0][0] > 1.5 * flash[0][0]
    # 2.5x the forward's work, and at 2K tokens a slower backward sweep (1,130 against 530 tokens to half rate)
    assert 1.1 * C.FLASH_BACKWARD_FACTOR < flash[1][0] / flash[0][0] < 1.2 * C.FLASH_BACKWARD_FACTOR


def test_unfused_attention_gemms_keep_the_batch_in_every_backward_gemm(h100):
    """Unfused attention multiplies activations by activations, per sequence and head: its backward has no
    weight-like gradient summed over the batch (dK = dS^T Q and dV = P^T dO are per-head GEMMs like dQ = dS K),
    so the backward GEMMs (twice the forward's FLOPs) cost 1.3-2.5x the forward's, not a handful of tiles with
    K = all the rows."""
    training = type(h100.training)(**{**h100.training.__dict__, "attention": "unfused"})
    m, gpu = h100.model, h100.cluster.gpu
    fwd, bwd = attention_times(m, gpu, training, shard(tp=8, mb=4))
    rows, s, d = 4 * m.seq_len * m.heads / 8, m.seq_len, m.head_dim
    wide, narrow = gemm_time(rows, s, d, gpu), gemm_time(rows, d, s, gpu)
    elements = rows * s
    softmax = [elements * b / (gpu.memory_gbytes_per_s * 1e9 * gpu.hbm_efficiency)
               for b in (C.SOFTMAX_DROPOUT_BYTES if m.dropout else C.SOFTMAX_BYTES)]
    assert fwd[0] == pytest.approx(wide + narrow + softmax[0], rel=1e-12)
    assert bwd[0] == pytest.approx(wide + 3 * narrow + softmax[1], rel=1e-12)
    assert 1.3 < (bwd[0] - softmax[1]) / (fwd[0] - softmax[0]) < 2.5


def test_cudnn_attention_runs_at_its_own_catalog_rate(h100, catalog):
    """training.attention = cudnn reads the GPU's cudnn_attention_efficiency (H100 0.54 against FlashAttention-2's
    0.32: the same FLOPs in 0.32/0.54 of the time), and a GPU without one runs at its flash figure."""
    gpu = h100.cluster.gpu
    assert (gpu.attention_efficiency, gpu.cudnn_attention_efficiency) == (0.32, 0.54)
    cudnn_training = type(h100.training)(**{**h100.training.__dict__, "attention": "cudnn"})
    flash = attention_times(h100.model, gpu, h100.training, shard())
    cudnn = attention_times(h100.model, gpu, cudnn_training, shard())
    launch = gpu.kernel_overhead_us * 1e-6
    assert (cudnn[0][0] - launch) == pytest.approx((flash[0][0] - launch) * 0.32 / 0.54)
    assert (cudnn[1][0] / C.FLASH_BACKWARD_FACTOR - launch) == pytest.approx(
        (flash[1][0] / C.FLASH_BACKWARD_FACTOR - launch) * 0.32 / 0.54)
    unmeasured = type(gpu)(**{**gpu.__dict__, "cudnn_attention_efficiency": None})
    assert attention_times(h100.model, unmeasured, cudnn_training, shard())[0][0] == pytest.approx(flash[0][0])


@pytest.mark.parametrize("gpu_name, kernel, efficiency", [
    ("H100 SXM5 80GB", "cudnn", 0.54),   # Transformer Engine prefers cuDNN on Hopper and later
    ("A100 SXM4 80GB", "flash", 0.55),   # and FlashAttention-2 before, where cuDNN (0.45) is slower
    ("V100 SXM3 32GB", "flash", 0.55),   # no cuDNN figure: the flash one
])
def test_te_attention_is_the_faster_of_the_gpus_two_kernels(catalog, gpt3_doc, gpu_name, kernel, efficiency):
    """training.attention = te (Transformer Engine's own pick, the megatron_core stack's setting) costs as the
    kernel Transformer Engine picks on that GPU."""
    gpt3_doc["cluster"]["gpu"] = gpu_name
    gpt3_doc["training"]["precision"] = "fp16"  # the V100 has no BF16 tensor cores
    spec = parse_spec(gpt3_doc, catalog)
    gpu = spec.cluster.gpu
    assert attention_efficiency(gpu, "te") == attention_efficiency(gpu, kernel) == efficiency
    te, picked = (attention_times(spec.model, gpu, replace(spec.training, attention=k), shard())
                  for k in ("te", kernel))
    assert (te[0][0], te[1][0]) == (picked[0][0], picked[1][0])


def test_backward_costs_about_twice_the_forward(h100):
    lt = layer_times(h100.model, h100.cluster.gpu, h100.training, shard(mb=2))
    assert 1.9 < lt.bwd[0] / lt.fwd[0] < 2.4


def test_context_parallel_splits_the_work(h100):
    one = layer_times(h100.model, h100.cluster.gpu, h100.training, shard(cp=1)).fwd[0]
    two = layer_times(h100.model, h100.cluster.gpu, h100.training, shard(cp=2)).fwd[0]
    assert 0.45 < two / one < 0.6


def test_context_parallel_attention_loses_efficiency_on_short_chunks(h100):
    # GPT-3 at s = 2048: CP 8 sweeps 256-key chunks, (1 + 530/256) / (1 + 530/2048) = 2.44x the work's time
    # forward, plus 2 cp - 1 = 15 launches instead of one and the 7 merges' memory traffic.
    from planner.compute import hbm_bytes_per_s, ring_merge_bytes
    gpu, tr = h100.cluster.gpu, h100.training
    one = attention_times(h100.model, gpu, tr, shard(cp=1))[0][0]
    eight = attention_times(h100.model, gpu, tr, shard(cp=8))[0][0]
    launches = gpu.kernel_overhead_us * 1e-6
    merges = ring_merge_bytes(h100.model, tr, shard(cp=8))[0][0] / hbm_bytes_per_s(gpu)
    # Transformer Engine's merges: 6 bytes for each of the 256 local tokens' 12,288 / TP query values, 7 times.
    assert merges * hbm_bytes_per_s(gpu) == pytest.approx(7 * 6.0 * 256 * h100.model.hidden / 8)
    ratio = (1 + C.FLASH_HALF_LENGTH / 256) / (1 + C.FLASH_HALF_LENGTH / 2048)
    assert 8 * (eight - 15 * launches - merges) / (one - launches) == pytest.approx(ratio)


def test_flash_attention_runs_at_the_catalog_rate_only_at_the_reference_length(h100):
    """The catalog figure holds for a 16K-key sweep: a 2K sequence's attention forward takes (1 + 530/2048) /
    (1 + 530/16384) = 1.22x as long per FLOP and its backward (1 + 1130/2048) / (1 + 1130/16384) = 1.45x, a 64K one
    0.98x and 0.95x, and the 16K one exactly the catalog rate."""
    import dataclasses

    gpu, tr = h100.cluster.gpu, h100.training
    launch = gpu.kernel_overhead_us * 1e-6
    rate = gpu.peak_tflops * 1e12 * gpu.sustained_clock * gpu.attention_efficiency

    def per_flop(seq: int) -> tuple[float, float]:
        m = dataclasses.replace(h100.model, seq_len=seq)
        flops = 4.0 * seq * seq * (m.hidden / 8) * C.CAUSAL_FRACTION  # one sequence, TP 8
        fwd, bwd = attention_times(m, gpu, tr, shard())
        return ((fwd[0] - launch) / flops * rate,
                (bwd[0] / C.FLASH_BACKWARD_FACTOR - launch) / flops * rate)

    assert C.FLASH_REFERENCE_LENGTH == 16384
    assert (C.FLASH_HALF_LENGTH, C.FLASH_BACKWARD_HALF_LENGTH) == (530, 1130)
    assert per_flop(16384) == pytest.approx((1.0, 1.0))
    assert per_flop(2048) == pytest.approx(((1 + 530 / 2048) / (1 + 530 / 16384),
                                            (1 + 1130 / 2048) / (1 + 1130 / 16384)))
    assert per_flop(2048) == pytest.approx((1.219, 1.452), abs=1e-3)
    assert per_flop(65536) == pytest.approx(((1 + 530 / 65536) / (1 + 530 / 16384),
                                             (1 + 1130 / 65536) / (1 + 1130 / 16384)))


def test_the_sweep_length_rule_follows_the_attention_kernels_measured_on_an_h200():
    """bench/results/gpu_probe_h200.json: PyTorch's FlashAttention-2 and cuDNN attention, causal, head dim 64 and 128,
    at 1K-16K tokens a sequence on one H200. Each series' rate relative to its own 16K rate follows the engine's
    (1 + L_half/16K) / (1 + L_half/L): within 11% forward (FlashAttention-2's forward levels off by 4K) and 8%
    backward. The rule before engine 2.17 (one L_half of 240 tokens for both passes) put FlashAttention-2's backward
    at 1K tokens at 1.6x its measured rate."""
    import json
    from pathlib import Path

    probe = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_probe_h200.json").read_text())
    rows = probe["attention"]
    assert len(rows) == 20 and not any("error" in r for r in rows)
    worst = {"fwd_tflops": 0.0, "bwd_tflops": 0.0}
    for r in rows:
        ref = next(x for x in rows if (x["backend"], x["head_dim"], x["seq_len"]) == (r["backend"], r["head_dim"],
                                                                                        16384))
        for key, half in (("fwd_tflops", C.FLASH_HALF_LENGTH), ("bwd_tflops", C.FLASH_BACKWARD_HALF_LENGTH)):
            engine = (1 + half / 16384) / (1 + half / r["seq_len"])
            worst[key] = max(worst[key], abs(engine / (r[key] / ref[key]) - 1))
    assert worst["fwd_tflops"] < 0.11
    assert worst["bwd_tflops"] < 0.08
    old = min((1 + 240 / 16384) / (1 + 240 / 1024) / (r["bwd_tflops"] / 310.0) for r in rows
              if (r["backend"], r["head_dim"], r["seq_len"]) == ("FLASH_ATTENTION", 128, 1024))
    assert old == pytest.approx(1.60, abs=0.01)
