"""Memory per GPU, vectorised over layout candidates (bytes; the answer reports GiB).

Weights, gradients and mixed-precision Adam state follow ZeRO (Rajbhandari et al. 2020): stage 1 (Megatron's
distributed optimizer) shards the optimizer state over the data-parallel ranks, stage 2 also the gradients,
stage 3 also the weights. Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models"), generalised to grouped-query attention, gated MLPs and experts, for recompute none /
selective / full, with and without sequence parallelism, times the micro-batches the first pipeline stage holds
under 1F1B (p) and interleaving (x (1 + (p-1)/(p v)), more with micro-batch groups larger than p), with context
parallelism splitting the sequence.
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


def vp_group(micro: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Micro-batches an interleaved schedule runs through one virtual stage before the next: Megatron-Core's
    --microbatch-group-size-per-virtual-pipeline-stage N (default PP). Since Megatron-LM 4295be1a6c (2024-11-01,
    megatron/core/pipeline_parallel/schedules.py) M micro-batches need PP <= N <= M and M % N either 0 or at least
    PP (a smaller last group leaves bubbles), so M need not be a multiple of PP: 32 micro-batches over PP 9 run in
    groups of 11 (32 % 11 = 10). The smallest such N, which holds the fewest activations; PP where M is a multiple of
    it, or where M < PP (no interleaving then: search.inner_reason)."""
    micro, pp = np.broadcast_arrays(np.asarray(micro, dtype=np.int64), np.asarray(pp, dtype=np.int64))
    group = pp.copy()
    odd = np.flatnonzero((micro % np.maximum(pp, 1) != 0) & (micro > pp))
    if odd.size:
        # One search per distinct (M, PP) pair, keyed as one integer (PP is at most the layer count, < 2**20).
        keys, which = np.unique(micro[odd] << 20 | pp[odd], return_inverse=True)
        smallest = [next(n for n in range(p + 1, m + 1) if m % n == 0 or m % n >= p)  # n = m always qualifies
                    for m, p in ((int(k) >> 20, int(k) & 0xFFFFF) for k in keys)]
        group[odd] = np.asarray(smallest, dtype=np.int64)[which]
    return group


def stage_layers(layers: int, pp: np.ndarray) -> np.ndarray:
    """Layers on the busiest pipeline stage: ceil(layers / pp). Uneven splits give the other stages one layer
    fewer: the last stage (which also carries the output layer and the loss) first, then the first (which carries
    the embedding; Llama 3 took one layer each from the first and the last stage, The Llama 3 Herd of Models,
    sec. 3.3.2; Zero Bubble's GPT models have one layer fewer on both, Qi et al. 2024, sec. 5.1), then middle
    stages from the back (Megatron-Core --decoder-first/last-pipeline-num-layers express such splits)."""
    return -(-layers // pp)


def end_stage_layers(layers: int, pp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layers on the first and on the last pipeline stage, as stage_layers splits them."""
    n = stage_layers(layers, pp)
    deficit = pp * n - layers
    first = np.where(deficit >= 2, n - 1, n)
    last = np.where((deficit >= 1) & (pp > 1), n - 1, n)
    return first, last


def stage_split(layers: int, pp: int) -> list[int]:
    """Every pipeline stage's layers, first to last, as stage_layers splits them (what the exports write): the
    shortfall taken from the last stage, then the first, then middle stages from the back."""
    n = -(-layers // pp)
    split = [n] * pp
    order = [pp - 1, 0] + list(range(pp - 2, 0, -1)) if pp > 1 else [0]
    for stage in order[:pp * n - layers]:
        split[stage] -= 1
    return split


@dataclass(frozen=True)
class ParamsOnGPU:
    dense: np.ndarray     # parameters replicated across data parallelism (attention, dense MLPs, embeddings)
    expert: np.ndarray    # routed-expert parameters (replicated across dp x cp / ep ranks)

    @property
    def total(self) -> np.ndarray:
        return self.dense + self.expert


def params_on_gpu(m: ModelSpec, pc: ParamCount, lay: Layouts, layers: np.ndarray | None = None,
                  vocab_matrix: np.ndarray | None = None) -> ParamsOnGPU:
    """Parameters held by one GPU of a stage: its layers split by TP (experts by EP instead, as Megatron-Core with
    expert tensor parallel size 1) plus its vocabulary matrices split by TP. By default the busiest stage's bound:
    ceil(layers / pp) layers and the larger vocabulary matrix."""
    expert_total = m.moe_layers * m.experts * pc.expert_per_layer
    non_expert_layers = pc.total - pc.embedding - pc.output - expert_total
    per_layer = non_expert_layers / m.layers
    per_layer_expert = expert_total / m.layers
    n = stage_layers(m.layers, lay.pp) if layers is None else layers
    if vocab_matrix is None:
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
    """Bytes on the busiest GPU: the larger of the pipeline's first stage (the embedding and the most micro-batches
    in flight), its second (all its layers where an uneven split spares the first one, one micro-batch fewer) and
    its last (the output layer, the loss's logits); see _stages. Without PP, the one stage."""
    buffers = _comm_buffers(m, lay) + _gathered_layers(m, training, pc, lay)
    dense_shards, expert_shards = _shard_factors(lay)
    per_param = [(_state_bytes(training, lay, k, dense_shards), _state_bytes(training, lay, k, expert_shards))
                 for k in STATE_PARTS]
    dense_b, expert_b = sum(d for d, _ in per_param), sum(e for _, e in per_param)
    frag = fragmentation_fraction(training)
    # Each stage's total is linear in its dense and expert parameters and its activations: pick the peak stage
    # per candidate from those, then break that one down.
    peak = None
    for layers, vocab, act in _stages(m, training, pc, lay):
        p = params_on_gpu(m, pc, lay, layers, vocab)
        total = dense_b * p.dense + expert_b * p.expert + (1.0 + frag) * act
        if peak is None:
            peak = [total, p.dense, p.expert, act]
        else:
            more = total > peak[0]
            peak = [np.where(more, new, old) for new, old in zip((total, p.dense, p.expert, act), peak, strict=True)]
    _, dense, expert, activations = peak
    weights, grads, optimizer = (d * dense + e * expert for d, e in per_param)
    # Persistent state lives in flat buffers allocated once; fragmentation of the caching allocator hits the
    # tensors allocated and freed every micro-batch, i.e. the activations. Expandable segments remove it.
    other = C.RUNTIME_RESERVE_GIB * GIB + buffers + frag * activations
    return MemoryBreakdown(weights, grads, optimizer, activations, other)


STATE_PARTS = ("weights", "gradients", "optimizer")


def _shard_factors(lay: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """How many ways ZeRO shards a stage's dense and its expert parameters: expert weights are replicated over the
    expert-data-parallel ranks, a stage's TP·CP·DP ranks / EP; the others over DP·CP."""
    return lay.dp * lay.cp, np.maximum(1, lay.tp * lay.dp * lay.cp // lay.ep)


def _state_bytes(training: TrainingSpec, lay: Layouts, part: str, shards: np.ndarray) -> np.ndarray:
    """Bytes of `part` per parameter held, ZeRO-sharded over `shards` ranks from its stage on. ZeRO-3 / FSDP keeps
    no sharded 16-bit copy: the fp32 master (in OPTIMIZER_BYTES) is the parameter, and the 16-bit weights exist
    only while a layer is gathered (Zhao et al. 2023, PyTorch FSDP, sec. 4: flat parameters, mixed precision casts
    the gathered shard)."""
    stage, per_param = {"weights": (3, C.WEIGHT_BYTES), "gradients": (2, grad_bytes(training)),
                        "optimizer": (1, optimizer_state_bytes(training, lay.zero))}[part]
    factor = np.where(lay.zero >= stage, 1.0 / shards, 1.0)
    if part == "weights":
        factor = np.where(lay.zero >= 3, 0.0, factor)
    return per_param * factor


def optimizer_state_bytes(training: TrainingSpec, zero: np.ndarray) -> np.ndarray:
    """Optimizer state per parameter held (C.OPTIMIZER_BYTES by training.optimizer_states), before sharding: what
    memory holds and what the Adam step reads and writes. bf16_remainder's master needs a sharded 16-bit weight to
    be its high half; ZeRO-3 keeps none, so there it keeps the master whole (bf16's 8 bytes)."""
    per_param = np.full(np.shape(zero), float(C.OPTIMIZER_BYTES[training.optimizer_states]))
    if training.optimizer_states == "bf16_remainder":
        per_param = np.where(zero >= 3, float(C.OPTIMIZER_BYTES["bf16"]), per_param)
    return per_param


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


def _stages(m: ModelSpec, training: TrainingSpec, pc: ParamCount, lay: Layouts
            ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(layers, vocabulary parameters, activation bytes) of the stages that can hold the peak: the first, the
    second and the last."""
    tokens = lay.micro_batch * m.seq_len / lay.cp
    stored, working = activation_bytes_per_token(m, training, lay)
    n = stage_layers(m.layers, lay.pp)
    micro = lay.microbatches(training.global_batch)
    in_flight = np.minimum(lay.pp, micro)
    interleave = np.where(lay.vpp > 1, 1.0 + (lay.pp - 1) / (lay.pp * lay.vpp), 1.0)
    # Interleaving warms up 2(p - 1) + (v - 1) N chunks of a micro-batch on the first stage (Megatron-Core
    # get_pp_rank_microbatches), each 1/v of the stage: p (1 + (p - 1)/(p v)) stage-micro-batches with groups of
    # N = p, and (v - 1)(N - p)/v more with the larger groups that M not a multiple of p needs (vp_group).
    grouped = np.zeros(len(lay))
    inter = np.flatnonzero(lay.vpp > 1)
    grouped[inter] = (lay.vpp[inter] - 1) * (vp_group(micro[inter], lay.pp[inter]) - lay.pp[inter]) / lay.vpp[inter]

    unit = tokens * stored  # one layer's, one micro-batch's

    def held(layers: np.ndarray, flight: np.ndarray) -> np.ndarray:
        if not training.activation_offload_layers:
            return unit * (layers * flight)
        # Offloaded layers keep their activations in CPU memory; two stay on the GPU, one being copied out during
        # the forward and one brought back ahead of its backward (Transformer Engine's double-buffered offload
        # handler).
        k = offloaded_layers(training, layers)
        return unit * ((layers - k) * flight + np.minimum(k, 2))

    # Full recomputation rebuilds one layer's activations at a time during the backward pass.
    rebuilt = np.where(lay.full_share > 0, tokens * working, 0.0)
    # The last stage holds one micro-batch's logits for the loss: CROSS_ENTROPY_HELD_BYTES each (4 for Megatron's
    # in-place fp32 cross-entropy, 12 for PyTorch's eager one at the start of the backward). They are freed once the
    # output layer's backward has run, before the first layer is rebuilt: the two peaks do not coincide.
    logits = tokens * m.vocab / lay.tp * C.CROSS_ENTROPY_HELD_BYTES[training.cross_entropy]
    staged = lay.pp > 1
    # 1F1B keeps p - i micro-batches in flight on stage i (Narayanan et al. 2021, sec. 2.2). Where an uneven split
    # gives the first stage a layer fewer (stage_layers), the second, with all n layers and one micro-batch fewer in
    # flight, may hold more. Interleaved stages hold chunks from the whole depth: the first stage's bound stands.
    # Without PP, end_stage_layers gives the one stage all n layers.
    first, last = end_stage_layers(m.layers, lay.pp)
    plain = lay.vpp == 1
    first = np.where(plain, first, n)
    first_act = held(first, in_flight * interleave + grouped) + rebuilt
    last_act = held(last, np.ones_like(in_flight)) + np.maximum(rebuilt, logits)
    # Without PP one stage holds it all: its layers, both vocabulary matrices and the logits.
    solo_vocab = pc.embedding + pc.output
    last_vocab = pc.output + (pc.embedding if m.tied_embeddings else 0)  # a tied output layer keeps a copy
    stages = [(first, np.where(staged, pc.embedding, solo_vocab), np.where(staged, first_act, last_act)),
              (last, np.where(staged, last_vocab, solo_vocab), last_act)]
    second = plain & (lay.pp >= 3)
    if np.any(second):
        stages.append((np.where(second, n, last), np.where(second, 0, stages[1][1]),
                       np.where(second, held(n, np.minimum(lay.pp - 1, micro)) + rebuilt, last_act)))
    return stages


def _comm_buffers(m: ModelSpec, lay: Layouts) -> np.ndarray:
    """Buffers for the TP/SP all-gathers (two h-wide micro-batch tensors), Megatron's DP gradient buckets
    (40M parameters x 4 bytes, two in flight) and, for MoE, the all-to-all send and receive buffers."""
    tokens = lay.micro_batch * m.seq_len / lay.cp
    tp_buffers = np.where(lay.tp > 1, 2.0 * tokens * m.hidden * 2.0, 0.0)
    dp_buckets = np.where(lay.dp > 1, 2.0 * 40e6 * 4.0, 0.0)
    a2a = 2.0 * tokens / lay.tp * m.top_k * m.hidden * 2.0 if m.is_moe else 0.0
    return tp_buffers + dp_buckets + a2a
