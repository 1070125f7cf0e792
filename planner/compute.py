"""Compute time of one transformer layer on one GPU, vectorised over layout candidates.

Nothing here is a constant rate. Each GEMM is timed from its per-GPU shape after the TP/CP/EP split: a
roofline of tensor-core throughput (with tile and wave quantization over the GPU's SMs and a short-K
penalty) against HBM traffic. Attention is FlashAttention-style (causal, at its own efficiency) or unfused
batched GEMMs plus a memory-bound softmax. Norms, activations, dropout and residual adds are timed from the
bytes they stream through HBM. Precision changes the GEMM peak (FP8) and adds the FP8 cast traffic.

All functions take numpy arrays of equal shape (one entry per candidate) and return seconds per micro-batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import constants as C
from .model import is_gpt_style, kv_dim, mlp_inputs_per_token, mlp_width_per_token
from .spec import GPUSpec, ModelSpec, TrainingSpec

TILES = ((128, 128), (128, 256), (256, 128))  # output tiles cuBLAS chooses among (CUTLASS defaults)
FUSED_ATTENTION = ("flash", "cudnn", "te", "triton")  # kernels that never write the s x s scores to memory


def gemm_time(m: np.ndarray, n: np.ndarray, k: np.ndarray, gpu: GPUSpec, fp8: bool = False,
              groups: np.ndarray | float = 1.0) -> np.ndarray:
    """Seconds for one (m x k) @ (k x n) GEMM, or for a grouped GEMM of `groups` such products (each with its
    own weights) run as one kernel.

    Roofline: max(compute, memory) + fixed kernel cost. Compute runs at achievable_gemm_flops x tile
    utilisation x K / (K + K_HALF); tile utilisation counts padding of partial tiles and the last partial wave
    over the SMs (NVIDIA, "Matrix Multiplication Background User's Guide": tile and wave quantization), taking
    the best of the usual tile shapes. A grouped GEMM pads each group's tiles but schedules all groups' tiles
    over the SMs together, so only its last wave is partial, and it launches once (CUTLASS grouped GEMM's
    persistent tile scheduler, as in torch._grouped_mm and DeepGEMM; GEMMs on concurrent streams share the waves
    the same way, see _moe_mlp_times). Memory moves both inputs once (1-byte FP8 or 2-byte) and a 2-byte output.
    """
    m, n, k, g = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
    peak = achievable_gemm_flops(gpu, fp8)
    sms = gpu.sm_count
    util = np.zeros(np.broadcast(m, n, k, g).shape)
    for tm, tn in TILES:
        tiles = g * np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(tiles / sms)
        util = np.maximum(util, (g * m * n) / (waves * sms * tm * tn))
    k_eff = k / (k + k_half(gpu, fp8))
    t_compute = 2.0 * g * m * n * k / (peak * util * k_eff)
    in_bytes = 1.0 if fp8 else 2.0
    t_memory = g * ((m * k + k * n) * in_bytes + 2.0 * m * n) / hbm_bytes_per_s(gpu)
    return np.maximum(t_compute, t_memory) + kernel_s(gpu)


def k_half(gpu: GPUSpec, fp8: bool = False) -> float:
    """Reduction length at which a GEMM tile reaches half its steady-state rate. A tile must stream enough K to
    hide a fixed prologue/epilogue latency, so the length grows with what one SM computes per second: GEMM_K_HALF
    is the A100's (312 TFLOP/s over 108 SMs), scaled by this GPU's dense 16-bit peak per SM (H100 2.6x, B200 5.3x).

    FP8 GEMMs use the same length, not twice it (twice the rate per K-slice would need twice the K to amortise the
    same latency). Two microbenchmarks on three GPUs, kept out of every fit, measure no such doubling
    (bench/gemm_check.py): DeepGEMM's grouped FP8 GEMMs on H800 (deepseek-ai/DeepGEMM README, 2025: 1,297 TFLOP/s at
    K = 7,168 and 1,099 at K = 2,048 for M = 8,192 x 4 groups; the same length as 16-bit gives 1,262 and 1,051 at the
    catalog's fp8_gemm_efficiency, twice it 1,163 and 845), and Transformer Engine's GEMM tutorial on H200 NVL and
    B300 (pre-quantised FP8 within 6%; twice the length, 13% slow). XLA's B200 matmul table
    (third_party/xla/xla/backends/gpu/cost_model/matmul_interpolator_data.h at tensorflow a305421) reads a
    half-rate length of 1,488 elements for FP8 against 736 for BF16; it times XLA's FP8 dot, scaling included.
    The FP8 length follows half the FP8 peak (equal to the 16-bit peak on every catalog part), so an FP8 GEMM's
    time depends on the FP8 peak alone."""
    rate = gpu.fp8_peak_tflops / 2.0 if fp8 else gpu.peak_tflops
    return C.GEMM_K_HALF * (rate / gpu.sm_count) / (312.0 / 108.0)


def achievable_gemm_flops(gpu: GPUSpec, fp8: bool = False) -> float:
    """FLOP/s a large, well-shaped GEMM sustains in training: spec-sheet peak x the GPU's measured achievable
    fraction (catalog gemm_efficiency / fp8_gemm_efficiency, cuBLAS MAMF) x the clock it sustains under its
    power cap (catalog sustained_clock)."""
    peak = gpu.fp8_peak_tflops * gpu.fp8_gemm_efficiency if fp8 else gpu.peak_tflops * gpu.gemm_efficiency
    return peak * gpu.sustained_clock * 1e12


def kernel_s(gpu: GPUSpec) -> float:
    """Fixed cost of one kernel launch, seconds (catalog kernel_overhead_us)."""
    return gpu.kernel_overhead_us * 1e-6


def hbm_bytes_per_s(gpu: GPUSpec) -> float:
    """Achievable HBM bandwidth, bytes/s (GB/s x 1e9 x the GPU's streaming efficiency)."""
    return gpu.memory_gbytes_per_s * 1e9 * gpu.hbm_efficiency


def gemm_fwd_bwd(m: np.ndarray, n: np.ndarray, k: np.ndarray, gpu: GPUSpec, fp8: bool,
                 groups: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Forward (m,n,k) and backward: data gradient (m,k,n) + weight gradient (k,n,m), each grouped over `groups`."""
    fwd = gemm_time(m, n, k, gpu, fp8, groups)
    bwd = gemm_time(m, k, n, gpu, fp8, groups) + gemm_time(k, n, m, gpu, fp8, groups)
    return fwd, bwd


@dataclass(frozen=True)
class Shard:
    """How one candidate splits a layer's work across GPUs (arrays over candidates)."""

    tp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    micro_batch: np.ndarray
    sp: np.ndarray          # bool: sequence parallelism

    def tokens(self, m: ModelSpec) -> np.ndarray:
        """Tokens of one micro-batch on one GPU for the GEMMs (CP splits the sequence; SP regathers for GEMMs)."""
        return self.micro_batch * m.seq_len / self.cp


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per micro-batch on one GPU (arrays over candidates)."""

    fwd: np.ndarray          # one transformer layer (average over dense and MoE layers), forward
    bwd: np.ndarray          # its backward
    attention_fwd: np.ndarray  # the attention core's forward
    attention_bwd: np.ndarray  # its backward
    logits_fwd: np.ndarray   # output projection + loss, on the last stage
    logits_bwd: np.ndarray
    selective_fwd: np.ndarray  # what selective recomputation repeats in the backward pass
    full_fwd: np.ndarray       # what full recomputation repeats: the forward, or less with early stop
    weight_cast: np.ndarray    # FP8 weight cast paid once per step, not per micro-batch (training.fp8_weight_cache)
    tp_gemms: tuple[np.ndarray, ...] = ()  # forward GEMMs beside the TP collectives: QKV, output proj., MLP up, down


def layer_times(m: ModelSpec, gpu: GPUSpec, training: TrainingSpec, shard: Shard) -> LayerTimes:
    fp8 = training.precision == "fp8"
    tp, t = shard.tp, shard.tokens(m)
    h, kvd = m.hidden, kv_dim(m)
    up = 2 if m.gated_mlp else 1
    separate = training.projections == "separate"
    if separate:  # wq, wk, wv: three GEMMs over the same input
        q, k = gemm_fwd_bwd(t, h / tp, h, gpu, fp8), gemm_fwd_bwd(t, kvd / tp, h, gpu, fp8)
        qkv = (q[0] + 2.0 * k[0], q[1] + 2.0 * k[1])
    else:
        qkv = gemm_fwd_bwd(t, (h + 2 * kvd) / tp, h, gpu, fp8)
    proj = gemm_fwd_bwd(t, h, h / tp, gpu, fp8)
    attn_f, attn_b = attention_times(m, gpu, training, shard)
    dense_f, dense_b, dense_down = _mlp_times(t, m.ffn_hidden / tp, h, up, gpu, fp8, separate)
    mlp_f, mlp_b, down_f = dense_f, dense_b, dense_down
    if m.is_moe:
        moe_f, moe_b, moe_down = _moe_mlp_times(m, gpu, fp8, shard, training.expert_gemm)
        dense_n, moe_n = m.layers - m.moe_layers, m.moe_layers
        mlp_f = (dense_n * dense_f + moe_n * moe_f) / m.layers
        mlp_b = (dense_n * dense_b + moe_n * moe_b) / m.layers
        down_f = (dense_n * dense_down + moe_n * moe_down) / m.layers
    mem_f = elementwise_bytes(m, training, shard) * t / hbm_bytes_per_s(gpu)
    mem_b = C.ELEMENTWISE_BACKWARD_FACTOR * mem_f
    # FP8 weights are cast in every micro-batch's forward, or once per step where Transformer Engine caches them
    # across the step's micro-batches (is_first_microbatch, which Megatron-Core passes: extensions/
    # transformer_engine.py); the step adds that once per layer (steptime.step_times).
    cast = fp8_weight_cast_bytes(m, shard) / hbm_bytes_per_s(gpu) if fp8 else 0.0
    cached = fp8 and training.fp8_weight_cache
    mem_f = mem_f + (0.0 if cached else cast)
    rowwise = fp8 and training.fp8_recipe == "rowwise"
    if rowwise:
        mem_b = mem_b + C.FP8_ROWWISE_RESCALE_BYTES * _gradient_outputs(m, shard) / hbm_bytes_per_s(gpu)
    eager = training.elementwise == "eager"
    launches = (C.KERNELS_PER_LAYER_EAGER if eager else C.KERNELS_PER_LAYER_FORWARD) * kernel_s(gpu)
    gemm_f = qkv[0] + proj[0] + mlp_f
    if rowwise:
        # The forward GEMMs (fast accumulation) run PyTorch's CUTLASS row-wise kernel, slower than cuBLAS's
        # tensor-wise one; the backward's run tensor-wise plus the rescale above.
        gemm_f = gemm_f / C.FP8_ROWWISE_GEMM_RELATIVE
    fwd = gemm_f + attn_f + mem_f + launches
    bwd = qkv[1] + proj[1] + attn_b + mlp_b + mem_b + 2.0 * launches
    # Selective recomputation repeats the attention core when attention is unfused (Korthikanti et al. 2022);
    # with flash attention it repeats the element-wise ops and every other GEMM (memory._selective_flash).
    selective = attn_f if training.attention == "unfused" else 0.5 * gemm_f + mem_f + launches
    # Full recomputation repeats the layer's forward (Megatron's checkpoint function reruns the whole layer).
    # PyTorch's non-reentrant torch.utils.checkpoint stops once it has rebuilt the last tensor the backward
    # saved (set_checkpoint_early_stop, on by default since PyTorch 2.1): the MLP's output projection, whose output
    # the backward never reads, and the residual add after it (3h of the layer's element-wise bytes) are skipped.
    full = fwd
    if training.checkpoint_impl == "pytorch":
        full = fwd - down_f - 3.0 * h * t / np.where(shard.sp, tp, 1) * 2.0 / hbm_bytes_per_s(gpu)
    # The output layer stays in 16 bits under FP8 training: Megatron's output_layer is a plain ColumnParallelLinear
    # outside Transformer Engine's FP8 autocast, and torchtitan's float8 converter filters the "output" module
    # (its llama3 job configs: filter_fqns = ["output"]).
    logits_f, logits_b = gemm_fwd_bwd(t, m.vocab / tp, h, gpu, False)
    # The loss streams the logits (training.cross_entropy): CROSS_ENTROPY_TRAFFIC bytes per logit each way.
    logit_count = t * m.vocab / tp
    loss_f, loss_b = C.CROSS_ENTROPY_TRAFFIC[training.cross_entropy]
    logits_f = logits_f + loss_f * logit_count / hbm_bytes_per_s(gpu)
    logits_b = logits_b + loss_b * logit_count / hbm_bytes_per_s(gpu)
    shape = np.shape(fwd)
    gemms = tuple(np.broadcast_to(g, shape).copy() for g in (qkv[0], proj[0], mlp_f - down_f, down_f))
    weight_cast = np.broadcast_to(cast if cached else 0.0, shape).copy()
    return LayerTimes(fwd, bwd, attn_f, np.broadcast_to(attn_b, shape).copy(), logits_f, logits_b,
                      np.broadcast_to(selective, shape).copy(),
                      np.broadcast_to(full, shape).copy(), weight_cast, gemms)


def _mlp_times(t: np.ndarray, width: np.ndarray, h: int, up: int, gpu: GPUSpec, fp8: bool, separate: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (TP-split) MLP: up (gate and up one GEMM when gated, unless `separate`) then down. Returns forward,
    backward and the down projection's forward."""
    if separate:
        one = gemm_fwd_bwd(t, width, h, gpu, fp8)
        f_up = (up * one[0], up * one[1])
    else:
        f_up = gemm_fwd_bwd(t, up * width, h, gpu, fp8)
    f_down = gemm_fwd_bwd(t, h, width, gpu, fp8)
    return f_up[0] + f_down[0], f_up[1] + f_down[1], f_down[0]


def _moe_mlp_times(m: ModelSpec, gpu: GPUSpec, fp8: bool, shard: Shard, expert_gemm: str
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Routed experts hold whole (not TP-split) weights, as Megatron-Core's expert tensor parallel size 1;
    the layer's tokens are split over TP ranks (sequence parallel) and routed across the EP group, so with
    balanced routing each of the E/ep local experts sees tokens x top_k x ep / E rows (Lepikhin et al. 2020).
    The local experts' GEMMs of each projection and pass run as one grouped GEMM (training.expert_gemm "grouped":
    torchtitan's torch._grouped_mm, DeepGEMM) or, under Transformer Engine ("streams"), as one GEMM per expert over
    TE_GEMM_STREAMS concurrent streams: rounds of that many experts, each round sharing the SMs' waves."""
    up = 2 if m.gated_mlp else 1
    h, fe = m.hidden, m.expert_ffn_hidden
    tokens = shard.tokens(m) / shard.tp
    rows = np.maximum(1.0, tokens * m.top_k * shard.ep / m.experts)
    local_experts = np.asarray(m.experts / shard.ep, dtype=float)

    def experts(m_: np.ndarray, n_: float, k_: float) -> tuple[np.ndarray, np.ndarray]:
        if expert_gemm == "grouped":
            return gemm_fwd_bwd(m_, n_, k_, gpu, fp8, local_experts)
        rounds = np.floor(local_experts / C.TE_GEMM_STREAMS)
        rest = local_experts - rounds * C.TE_GEMM_STREAMS
        full = gemm_fwd_bwd(m_, n_, k_, gpu, fp8, C.TE_GEMM_STREAMS)
        last = gemm_fwd_bwd(m_, n_, k_, gpu, fp8, np.maximum(rest, 1.0))
        return tuple(rounds * f + np.where(rest > 0, l, 0.0) for f, l in zip(full, last))

    e_up = experts(rows, up * fe, h)
    e_down = experts(rows, h, fe)
    router = gemm_fwd_bwd(shard.tokens(m), m.experts, h, gpu, False)
    fwd = e_up[0] + e_down[0] + router[0]
    bwd = e_up[1] + e_down[1] + router[1]
    down = e_down[0]
    if m.shared_experts:
        s_f, s_b, s_down = _mlp_times(shard.tokens(m), m.shared_experts * fe / shard.tp, h, up, gpu, fp8)
        fwd, bwd, down = fwd + s_f, bwd + s_b, down + s_down
    return fwd, bwd, down


def attention_times(m: ModelSpec, gpu: GPUSpec, training: TrainingSpec, shard: Shard
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Attention core (scores, softmax, values) per micro-batch on one GPU, forward and backward.

    CP ranks each hold s/cp queries against all s keys (ring attention), swept in cp steps of s/cp keys each.
    """
    t, heads = shard.tokens(m), m.heads / shard.tp
    if training.attention in FUSED_ATTENTION:
        # 4 s h FLOPs per query token over the square (model.flops_per_token), half of it under the causal mask.
        flops = 4.0 * t * m.seq_len * (m.hidden / shard.tp) * C.CAUSAL_FRACTION
        rate = gpu.peak_tflops * 1e12 * gpu.sustained_clock * attention_efficiency(gpu, training.attention)
        if training.attention == "triton":
            rate = rate * C.TRITON_FLASH_RELATIVE
        # Ring attention launches one attention kernel per step and one softmax-correction kernel (merging the
        # step's partial output by its log-sum-exp) per step after the first (Transformer Engine
        # AttnFuncWithCPAndKVP2P): 2 cp - 1 launches where one kernel runs without CP.
        launches = (2.0 * shard.cp - 1.0) * kernel_s(gpu)
        fwd = flops * _flash_overhead(m.seq_len, shard.cp, training.cp_load_balance, C.FLASH_HALF_LENGTH) / rate
        # The backward does FLASH_BACKWARD_FACTOR times the forward's work, at its own sweep-length rule.
        bwd = flops * _flash_overhead(m.seq_len, shard.cp, training.cp_load_balance,
                                      C.FLASH_BACKWARD_HALF_LENGTH) / rate
        merge_f, merge_b = (b / hbm_bytes_per_s(gpu) for b in ring_merge_bytes(m, training, shard))
        return fwd + launches + merge_f, C.FLASH_BACKWARD_FACTOR * (bwd + launches) + merge_b
    # Unfused (Megatron 2020-21): batched GEMMs QK^T (s_q x s, K = head_dim) and PV (s_q x head_dim, K = s)
    # over micro_batch x heads/tp, plus fused scale-mask-softmax and dropout streaming the s x s scores.
    d = m.head_dim
    rows = t * heads
    # Batched per (micro-batch sequence, head), the batch folded into M. Every operand is an activation, so the
    # backward has no weight gradient summed over the batch: each input's gradient is again a GEMM per batch entry.
    # S = Q K^T and dP = dO V^T have (rows x s) outputs over K = d; O = P V, dQ = dS K, dK = dS^T Q and
    # dV = P^T dO have (rows x d) outputs over K = s.
    wide = gemm_time(rows, m.seq_len, d, gpu)
    narrow = gemm_time(rows, d, m.seq_len, gpu)
    fwd_bytes, bwd_bytes = C.SOFTMAX_DROPOUT_BYTES if m.dropout else C.SOFTMAX_BYTES
    elements = rows * m.seq_len
    soft_f, soft_b = (elements * b / hbm_bytes_per_s(gpu) for b in (fwd_bytes, bwd_bytes))
    return wide + narrow + soft_f, wide + 3.0 * narrow + soft_b


def ring_merge_bytes(m: ModelSpec, training: TrainingSpec, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
    """HBM bytes of ring attention's merges per micro-batch on one GPU, forward and backward (none without CP):
    folding each step's partial output into the running one, the backward's gradient sums, and the copies PyTorch's
    implementation makes (constants.CP_*_BYTES_*, counted from Transformer Engine's and PyTorch's code)."""
    cp = np.asarray(shard.cp, dtype=float)
    steps = cp - 1.0
    t = shard.tokens(m)
    q = t * m.hidden / shard.tp                                     # query (and output) elements
    if training.cp_impl == "pytorch":
        kv = q                                                      # K/V heads repeated to the query heads
        once_f = C.CP_ONCE_FWD_BYTES_PYTORCH[0] * q + C.CP_ONCE_FWD_BYTES_PYTORCH[1] * kv
        once_b = C.CP_ONCE_BWD_BYTES_PYTORCH[0] * q + C.CP_ONCE_BWD_BYTES_PYTORCH[1] * kv
        fwd = steps * (C.CP_MERGE_BYTES_PYTORCH * q + C.CP_KV_COPY_BYTES_PYTORCH * kv) + once_f
        bwd = cp * (C.CP_GRAD_Q_BYTES_PYTORCH * q + C.CP_GRAD_KV_BYTES_PYTORCH * kv) \
            + steps * C.CP_KV_COPY_BYTES_PYTORCH * kv + once_b
    else:
        kv = t * kv_dim(m) / shard.tp
        fwd = steps * C.CP_MERGE_BYTES_TE * q
        bwd = steps * (C.CP_GRAD_Q_BYTES_TE * q + C.CP_GRAD_KV_BYTES_TE * kv)
    ring = cp > 1
    return np.where(ring, fwd, 0.0), np.where(ring, bwd, 0.0)


def attention_efficiency(gpu: GPUSpec, kernel: str) -> float:
    """The GPU's fraction of its BF16 peak for a fused attention kernel (catalog data): cuDNN's fused attention
    has its own figure where one was measured (cudnn_attention_efficiency), else FlashAttention-2's. "te" is
    Transformer Engine's pick between the two, the faster on the GPU: it prefers cuDNN's FusedAttention on Hopper
    and later "for performance reasons" and FlashAttention-2 before (transformer_engine/pytorch/attention/
    dot_product_attention/utils.py, get_attention_backend), as the catalog's figures rank them (A100: 0.55
    FlashAttention-2 against 0.45 cuDNN; H100: 0.32 against 0.54)."""
    cudnn = gpu.cudnn_attention_efficiency if gpu.cudnn_attention_efficiency is not None else gpu.attention_efficiency
    if kernel == "cudnn":
        return cudnn
    if kernel == "te":
        return max(cudnn, gpu.attention_efficiency)
    return gpu.attention_efficiency


def _flash_overhead(seq_len: int, cp: np.ndarray, load_balance: bool, half_length: float) -> np.ndarray:
    """Flash attention time over its time at the catalog's attention_efficiency. Each kernel sweeps L = s/cp keys
    (one ring step's chunk; the whole sequence without CP) and short sweeps amortise a tile's prologue and
    epilogue less: 1 + L_half/L (`half_length`: FLASH_HALF_LENGTH forward, FLASH_BACKWARD_HALF_LENGTH backward),
    charged as the ratio to the sweep at which the catalog figure holds (FLASH_REFERENCE_LENGTH): at 2K tokens 1.22x
    the 16K-token time forward, 1.45x backward. Without load balancing, contiguous causal chunks give rank i of cp
    i + 1/2 chunk-pairs of work, (cp)/2 on average: the last rank, which the others wait for, does 2 cp/(cp + 1) of
    the average (Megatron-Core context parallelism docs; Brandon et al. 2023,
    Striped Attention, sec. 3)."""
    cp = np.asarray(cp, dtype=float)
    sweep = (1.0 + half_length / (seq_len / cp)) / (1.0 + half_length / C.FLASH_REFERENCE_LENGTH)
    imbalance = 1.0 if load_balance else 2.0 * cp / (cp + 1.0)
    return sweep * imbalance


def elementwise_bytes(m: ModelSpec, training: TrainingSpec, shard: Shard) -> np.ndarray:
    """HBM bytes per token of one layer's memory-bound kernels, forward (ELEMENTWISE_BACKWARD_FACTOR x backward).

    Counted from Megatron's fused kernels, 2-byte elements: each norm reads and writes h; a bias-dropout-add
    reads 2h, writes h and a 1-byte mask (3.5h; a plain residual add 3h); the activation reads and writes
    the MLP width (GeLU 2f, SwiGLU 3f); rotary embedding rewrites Q and K. The h-wide work is repeated on every
    TP rank unless sequence parallelism splits it (Korthikanti et al. 2022, sec. 4.2.2).
    training.elementwise = "eager" (PyTorch without torch.compile) runs Llama's RMSNorm, rotary embedding and
    SwiGLU as chains of separate fp32 kernels; see EAGER_* in constants.py. LayerNorm and GeLU are one
    kernel either way (torch.nn.functional).
    """
    h, tp = m.hidden, shard.tp
    gpt = is_gpt_style(m)
    eager = training.elementwise == "eager" and not gpt
    norm = C.EAGER_RMSNORM_BYTES / 2.0 if eager else 2.0
    h_elems = (2 * norm + 2 * (3.5 if m.dropout else 3.0)) * h
    h_elems = np.where(shard.sp, h_elems / tp, h_elems)
    f = mlp_width_per_token(m)
    split_elems = (2.0 if gpt else (C.EAGER_SWIGLU_BYTES / 2.0 if eager else 3.0)) * f / tp
    if not gpt:
        rotary = C.EAGER_ROTARY_BYTES / 2.0 if eager else 2.0
        split_elems = split_elems + rotary * (h + kv_dim(m)) / tp           # rotary on Q and K
    if m.is_moe:
        split_elems = split_elems + 4.0 * m.top_k * h / tp * m.moe_layers / m.layers  # dispatch + combine copies
    # Hyper-connections (ByteDance, Zhu et al. 2024; DeepSeek-AI's mHC, arXiv 2025-12-31) keep n residual
    # streams of h: before each of the layer's two blocks a fused kernel reads the n streams to build the block's
    # input (writes h), and after it reads them with the block's output and writes n mixed streams. Against a
    # plain residual add (read 2h, write h) that is 3(n-1)h + 2h more elements a block.
    n = m.residual_streams
    if n > 1:
        h_elems = h_elems + np.where(shard.sp, 1.0 / tp, 1.0) * 2 * (3 * (n - 1) + 2) * h
    total = 2.0 * (h_elems + split_elems)
    if training.precision == "fp8":
        # Only the GEMMs run in FP8 (Transformer Engine, torchao float8): each GEMM input is scanned for its
        # scale, cast and, for the weight-gradient GEMM on Hopper, written transposed, per element of the qkv and
        # MLP inputs (h wide) and of the projection and down-projection inputs (h/tp and f/tp wide). Fused stacks
        # fold the scan and cast into the norm or activation that produces the input (TE LayerNormLinear,
        # torch.compile), leaving the FP8 copy and its transpose.
        cast = C.FP8_CAST_BYTES_FUSED if training.elementwise == "fused" else C.FP8_CAST_BYTES
        # The QKV and MLP-up inputs, whole on every TP rank; in MoE layers each expert casts its own copy of the
        # dispatched token (Transformer Engine's GroupedLinear quantizes the permuted input).
        mlp_in = mlp_inputs_per_token(m)
        gathered = h + mlp_in
        # Separate projections (wq, wk, wv; w1, w3) cast the input they share once per linear: torchao's Float8Linear
        # casts its own input in its forward and again for its weight gradient (torchao float8_linear.py,
        # matmul_with_hp_or_float8_args). Measured: leaving the two small linears wk and wv in 16 bits took
        # torchtitan's rowwise Llama 3 TP runs from about BF16's throughput to about 10% above it (torchtitan #1207,
        # #1319), far more than those GEMMs' share of the layer.
        per_linear = 3 * h + (2 if m.gated_mlp else 1) * mlp_in if training.projections == "separate" else gathered
        if training.fp8_recipe in ("rowwise", "blockwise"):
            # Per-row or per-block scales along the reduction axis: the backward GEMMs reduce along the other
            # axis, so each input is scanned and cast again along it instead of reusing a transposed copy (torchao
            # float8 rowwise: a column scan, then the cast; Transformer Engine MXFP8, whose 32-element blocks run
            # along K: one pass).
            cast = cast + (C.FP8_ROWWISE_EXTRA_BYTES if training.fp8_recipe == "rowwise"
                           else C.FP8_BLOCKWISE_EXTRA_BYTES)
        if training.fp8_recipe != "rowwise":
            # Tensorwise and block scales let sequence parallelism cast each rank's shard once, before the all-gather
            # (steptime._tp_comm; torchao's PrepareFloat8ModuleInput hands every linear the gathered FP8 input);
            # torchao's rowwise recipe gathers in 16 bits and each linear casts the whole gathered input.
            gathered = np.where(shard.sp, gathered / tp, per_linear)
        else:
            gathered = per_linear
        total = total + cast * (gathered + h / tp + f / tp)
    return total


def _gradient_outputs(m: ModelSpec, shard: Shard) -> np.ndarray:
    """Elements the backward GEMMs of one layer write per micro-batch: each linear's data gradient (tokens x its
    input width: h for the QKV and MLP-up inputs, which column parallelism leaves whole, h/tp and f/tp for the
    others) and weight gradient (the layer's weights on this GPU)."""
    h, f, t = m.hidden, mlp_width_per_token(m), shard.tokens(m)
    return t * (2 * h + (h + f) / shard.tp) + fp8_weight_cast_bytes(m, shard) / 4.0


def fp8_weight_cast_bytes(m: ModelSpec, shard: Shard) -> np.ndarray:
    """HBM bytes per micro-batch to cast one layer's weights to FP8 (read the 2-byte weight, write it and its
    transpose in FP8: 4 bytes per parameter), repeated for every micro-batch (Transformer Engine casts in each
    forward unless weights are kept in FP8; torchao float8 likewise)."""
    h, kvd, f = m.hidden, kv_dim(m), mlp_width_per_token(m)
    per_layer = (2 * h * h + 2 * h * kvd + (3 if m.gated_mlp else 2) * h * f) / shard.tp
    return 4.0 * per_layer


def optimizer_time(params_on_gpu: np.ndarray, gpu: GPUSpec, state_bytes: np.ndarray) -> np.ndarray:
    """Adam step over this GPU's (ZeRO-sharded) parameters: memory-bound, the state (`state_bytes` a parameter,
    memory.optimizer_state_bytes) read and written back plus ADAM_OTHER_BYTES of HBM traffic per parameter."""
    return params_on_gpu * (2 * state_bytes + C.ADAM_OTHER_BYTES) / hbm_bytes_per_s(gpu)
