"""Memory per GPU, vectorised over layout candidates (bytes; the answer reports GiB).

Weights, gradients and mixed-precision Adam state follow ZeRO (Rajbhandari et al. 2020): stage 1 (Megatron's
distributed optimizer) shards the optimizer state over the data-parallel ranks, stage 2 also the gradients,
stage 3 also the weights. Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models"), generalised to grouped-query attention, gated MLPs and experts, for recompute none /
selective / full, with and without sequence parallelism, times the micro-batches the first pipeline stage holds
under 1F1B (p) and interleaving (x (1 + (p-1)/(p v))), with context parallelism splitting the sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import constants as C
from .model import ParamCount, kv_dim, mlp_width_per_token
from .spec import ModelSpec, TrainingSpec

GIB = 1024.0 ** 3
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True)
class Layouts:
    """The candidates: one entry per layout, all arrays of one length."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    micro_batch: np.ndarray
    vpp: np.ndarray
    recompute: np.ndarray   # codes of RECOMPUTE_CODES
    full_share: np.ndarray  # float: the share of layers whose whole forward is recomputed (0 unless full)
    sp: np.ndarray          # bool
    zero: np.ndarray
    order: np.ndarray       # index into spec.RANK_ORDERS

    def __len__(self) -> int:
        return len(self.tp)

    def microbatches(self, global_batch: int) -> np.ndarray:
        """Micro-batches per pipeline per step: B / (dp x micro_batch)."""
        return global_batch // (self.dp * self.micro_batch)

    def take(self, index: np.ndarray) -> "Layouts":
        return Layouts(**{k: v[index] for k, v in self.__dict__.items()})


def stage_layers(layers: int, pp: np.ndarray) -> np.ndarray:
    """Layers on the busiest pipeline stage: ceil(layers / pp). Uneven splits give the other stages one layer
    fewer, the last stage (which also carries the output layer) first."""
    return -(-layers // pp)


@dataclass(frozen=True)
class ParamsOnGPU:
    dense: np.ndarray     # parameters replicated across data parallelism (attention, dense MLPs, embeddings)
    expert: np.ndarray    # routed-expert parameters (replicated across dp x cp / ep ranks)

    @property
    def total(self) -> np.ndarray:
        return self.dense + self.expert


def params_on_gpu(m: ModelSpec, pc: ParamCount, lay: Layouts) -> ParamsOnGPU:
    """Parameters held by one GPU of the busiest stage: its layers split by TP (experts by EP instead, as
    Megatron-Core with expert tensor parallel size 1) plus one vocabulary matrix split by TP."""
    expert_total = m.moe_layers * m.experts * pc.expert_per_layer
    non_expert_layers = pc.total - pc.embedding - pc.output - expert_total
    per_layer = non_expert_layers / m.layers
    per_layer_expert = expert_total / m.layers
    n = stage_layers(m.layers, lay.pp)
    vocab_matrix = np.where(lay.pp == 1, pc.embedding + pc.output, np.maximum(pc.embedding, pc.output))
    dense = n * per_layer / lay.tp + vocab_matrix / lay.tp
    return ParamsOnGPU(dense=dense, expert=n * per_layer_expert / lay.ep)


def activation_bytes_per_token(m: ModelSpec, training: TrainingSpec, lay: Layouts
                               ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes one layer keeps per token of a micro-batch for its backward pass (Korthikanti et al. 2022, eq. 1-5).

    GPT-3 (MHA, 4h GeLU MLP, dropout), TP t, no recomputation: s b h (10 + 24/t + 5 a s / (h t)). The 10 are the
    h-wide tensors every TP rank keeps (2 norm inputs, QKV and MLP inputs, 2 dropout masks) and sequence
    parallelism divides them by t; the 24 are Q, K, V, the projection input and the MLP's 4h-wide tensors; the
    5 a s / h are the s x s softmax output, dropout mask and output, which selective recomputation and
    flash attention never store. Full recomputation keeps only each layer's 2-byte input.
    Returns (bytes stored under the candidate's recomputation, bytes of a fully materialised layer).
    """
    h, tp = m.hidden, lay.tp
    dropout = m.dropout
    replicated = (8.0 + (2.0 if dropout else 0.0)) * h
    replicated = np.where(lay.sp, replicated / tp, replicated)
    f = mlp_width_per_token(m)
    mlp_inner = (4.0 if not m.gated_mlp else 6.0) * f
    split = (2.0 * h + 4.0 * kv_dim(m) + 2.0 * h + mlp_inner) / tp
    if training.saves_fp8_inputs:
        # Transformer Engine keeps the FP8 cast of a linear's input for its weight-gradient GEMM, 1 byte per element
        # (only the column-wise copy the backward reads: transformer_engine/pytorch/module/linear.py and
        # layernorm_linear.py save the quantized input), not the 16-bit tensor: the QKV and MLP inputs (norm
        # outputs, h wide) and the down projection's input (the MLP width). The attention output stays in 16 bits
        # for the attention backward, and the output projection keeps its FP8 copy beside it (+1 byte).
        replicated = replicated - np.where(lay.sp, 2.0 * h / tp, 2.0 * h)
        fp8_split = (1.0 * h - 1.0 * f) / tp
    else:
        fp8_split = 0.0
    flash = training.attention != "unfused"  # fused kernels (flash, cudnn, triton) never store the s x s squares
    squares = np.zeros(len(lay)) if flash else (5.0 if dropout else 2.0) * m.heads * m.seq_len / tp
    dispatched = _dispatched_tokens(m, training) / tp
    # Hyper-connections keep n residual streams: the backward needs the n - 1 extra streams each block mixed,
    # 2-byte, before each of the layer's two blocks (computed again with full recomputation, as the layer input is).
    streams = 2.0 * 2.0 * (m.residual_streams - 1) * h
    streams = np.where(lay.sp, streams / tp, streams)
    per_token = replicated + split + fp8_split + squares + dispatched + streams
    # Selective recomputation: with unfused attention it repeats the attention core and drops the squares
    # (Korthikanti et al. 2022, sec. 5); flash attention never stores them, and selective recomputation there
    # repeats the element-wise ops and part of the GEMMs instead (_selective_flash). Neither repeats the
    # all-to-all, so the dispatched tokens stay.
    selective = np.where(flash, _selective_flash(m, lay) + dispatched + streams, per_token - squares)
    # The layer input full recomputation keeps: a TP-th of it on each rank with sequence parallelism, or where the
    # stack partitions the saved inputs over the TP ranks (training.partition_activations).
    split_input = lay.sp | training.partition_activations
    full = np.where(split_input, 2.0 * m.residual_streams * h / tp, 2.0 * m.residual_streams * h)
    # Recomputing part of the layers (Megatron's block method) keeps the others' activations whole.
    stored = np.where(lay.recompute == RECOMPUTE_CODES["selective"], selective,
                      lay.full_share * full + (1.0 - lay.full_share) * per_token)
    return stored, per_token


def _dispatched_tokens(m: ModelSpec, training: TrainingSpec) -> float:
    """Bytes per token, averaged over layers, of the routed copies an MoE layer keeps for its experts' first
    GEMM: each token reaches the experts top_k times, and the grouped fc1 saves its permuted input
    [tokens x top_k, h] for the weight gradient (Megatron-Core moe/experts.py, whose expert_fc1 offload exists to
    move exactly this tensor to the host; torchtitan's per-op SAC keeps the all-to-all output). The router's input
    is the MLP input the dense formula already counts. 2 bytes, or 1 where Transformer Engine keeps the FP8 cast."""
    if not m.is_moe:
        return 0.0
    return (1.0 if training.saves_fp8_inputs else 2.0) * m.top_k * m.hidden * m.moe_layers / m.layers


def _selective_flash(m: ModelSpec, lay: Layouts) -> np.ndarray:
    """Bytes per token a layer keeps under selective recomputation with flash attention: its input and the
    attention output (2h each), and every other GEMM output (Q, V, the MLP's first and its output projection),
    the norms and activations being recomputed (torchtitan's per-op SAC policy, which saves the outputs of
    SDPA and of every second matmul). Megatron-Core's --recompute-modules name smaller parts (core_attn by
    default; the MoE recipes' mla_up_proj, moe_act, layernorm), which this mode over-costs (README, engine 2.10)."""
    h, tp = m.hidden, lay.tp
    h_wide = 4.0 * h / np.where(lay.sp, tp, 1)
    split = (2.0 * h + 2.0 * h + 2.0 * kv_dim(m) + 2.0 * mlp_width_per_token(m)) / tp
    return h_wide + split


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    other: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other


def memory_per_gpu(m: ModelSpec, training: TrainingSpec, pc: ParamCount, lay: Layouts) -> MemoryBreakdown:
    """Bytes on the busiest GPU (the first pipeline stage, which holds the most micro-batches in flight)."""
    p = params_on_gpu(m, pc, lay)
    # Expert weights are replicated over the expert-data-parallel ranks: a stage's TP·CP·DP ranks / EP.
    dense_shards, expert_shards = lay.dp * lay.cp, np.maximum(1, lay.tp * lay.dp * lay.cp // lay.ep)

    whole, shard = p.dense + p.expert, p.dense / dense_shards + p.expert / expert_shards

    def sharded(stage: int, bytes_per_param: float) -> np.ndarray:
        return bytes_per_param * np.where(lay.zero >= stage, shard, whole)

    # ZeRO-3 / FSDP keeps no sharded 16-bit copy: the fp32 master (in OPTIMIZER_BYTES) is the parameter, and
    # the 16-bit weights exist only while a layer is gathered (Zhao et al. 2023, PyTorch FSDP, sec. 4: flat
    # parameters, mixed precision casts the gathered shard).
    weights = np.where(lay.zero >= 3, 0.0, sharded(3, C.WEIGHT_BYTES))
    grads = sharded(2, grad_bytes(training))
    optimizer = sharded(1, C.OPTIMIZER_BYTES)
    activations = _activations(m, training, lay)
    buffers = _comm_buffers(m, lay) + _gathered_layers(m, training, pc, lay)
    # Persistent state lives in flat buffers allocated once; fragmentation of the caching allocator hits the
    # tensors allocated and freed every micro-batch, i.e. the activations. Expandable segments remove it.
    other = C.RUNTIME_RESERVE_GIB * GIB + buffers + fragmentation_fraction(training) * activations
    return MemoryBreakdown(weights, grads, optimizer, activations, other)


def fragmentation_fraction(training: TrainingSpec) -> float:
    """Share of the activations the caching allocator cannot reuse: FRAGMENTATION_FRACTION, or none with
    training.expandable_segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). The default allocator can
    give back only segments with no block in use, so free gaps between live blocks strand memory; expandable
    segments map 2 MiB pages into one growing virtual range, and before an allocation fails the allocator unmaps
    the pages under every free block and maps them where the request fits (c10/cuda/CUDACachingAllocator.cpp:
    release_cached_blocks, unmap_block). NVIDIA measured it on Llama 3 70B on H100 80GB: a 58.8 GB peak ran out
    of memory without it and ran with it (Megatron-Bridge skills/nemo-mbridge-perf-memory-tuning/SKILL.md,
    "Measured Results")."""
    return 0.0 if training.expandable_segments else C.FRAGMENTATION_FRACTION


def grad_bytes(training: TrainingSpec) -> int:
    """Bytes of one gradient as it is accumulated and reduced: GRAD_BYTES of the precision, 2 when reduced in
    bf16."""
    return C.GRAD_BYTES_BF16_REDUCE if training.grad_reduce_dtype == "bf16" else C.GRAD_BYTES[training.precision]


def _gathered_layers(m: ModelSpec, training: TrainingSpec, pc: ParamCount, lay: Layouts) -> np.ndarray:
    """ZeRO-3 / FSDP unsharded buffers: the layer being computed and the one prefetched (2-byte weights), and
    one layer's unsharded gradient before its reduce-scatter (FSDP: forward_prefetch/backward_prefetch keep at
    most two all-gathers in flight, limit_all_gathers; Zhao et al. 2023, sec. 3.3)."""
    per_layer = (pc.total - pc.embedding - pc.output) / m.layers / lay.tp
    grad = grad_bytes(training)
    return np.where(lay.zero >= 3, per_layer * (2 * C.WEIGHT_BYTES + grad), 0.0)


def offloaded_layers(training: TrainingSpec, n: np.ndarray) -> np.ndarray:
    """Layers of a stage of n whose saved activations go to CPU memory (training.activation_offload_layers), at
    most n - 1: Megatron-Core offloads fewer layers than it has, the last one's activations being needed at once."""
    return np.minimum(training.activation_offload_layers, np.maximum(n - 1, 0))


def _activations(m: ModelSpec, training: TrainingSpec, lay: Layouts) -> np.ndarray:
    tokens = lay.micro_batch * m.seq_len / lay.cp
    stored, working = activation_bytes_per_token(m, training, lay)
    n = stage_layers(m.layers, lay.pp)
    in_flight = np.minimum(lay.pp, lay.microbatches(training.global_batch))
    interleave = np.where(lay.vpp > 1, 1.0 + (lay.pp - 1) / (lay.pp * lay.vpp), 1.0)
    # Offloaded layers keep their activations in CPU memory; two stay on the GPU, one being copied out during the
    # forward and one brought back ahead of its backward (Transformer Engine's double-buffered offload handler).
    k = offloaded_layers(training, n)
    first_stage = tokens * stored * ((n - k) * in_flight * interleave + np.minimum(k, 2))
    last_stage = tokens * stored * (n - k + np.minimum(k, 2))
    # Full recomputation rebuilds one layer's activations at a time during the backward pass.
    rebuilt = np.where(lay.full_share > 0, tokens * working, 0.0)
    # The last stage holds one micro-batch's logits for the loss: CROSS_ENTROPY_HELD_BYTES each (4 for Megatron's
    # in-place fp32 cross-entropy, 12 for PyTorch's eager one at the start of the backward). They are freed once the
    # output layer's backward has run, before the first layer is rebuilt: the two peaks do not coincide.
    logits = tokens * m.vocab / lay.tp * C.CROSS_ENTROPY_HELD_BYTES[training.cross_entropy]
    last_stage = last_stage + np.maximum(rebuilt, logits)
    return np.where(lay.pp == 1, last_stage, np.maximum(first_stage + rebuilt, last_stage))


def _comm_buffers(m: ModelSpec, lay: Layouts) -> np.ndarray:
    """Buffers for the TP/SP all-gathers (two h-wide micro-batch tensors), Megatron's DP gradient buckets
    (40M parameters x 4 bytes, two in flight) and, for MoE, the all-to-all send and receive buffers."""
    tokens = lay.micro_batch * m.seq_len / lay.cp
    tp_buffers = np.where(lay.tp > 1, 2.0 * tokens * m.hidden * 2.0, 0.0)
    dp_buckets = np.where(lay.dp > 1, 2.0 * 40e6 * 4.0, 0.0)
    a2a = 2.0 * tokens / lay.tp * m.top_k * m.hidden * 2.0 if m.is_moe else 0.0
    return tp_buffers + dp_buckets + a2a
