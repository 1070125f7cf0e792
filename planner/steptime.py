"""Step time of a training iteration, vectorised over layout candidates (each on its own placement).

Schedule: 1F1B with interleaving (Narayanan et al. 2021, sec. 2.2): m micro-batches per pipeline, each stage
runs m (forward + backward) chunks, and the pipeline bubble costs (p - 1) / v of one micro-batch's stage time,
i.e. a fraction (p - 1) / (v m) of the ideal. On the critical path: tensor-parallel collectives (Megatron issues
them synchronously between the GEMMs), expert all-to-alls, the part of context-parallel ring attention that the
attention compute cannot hide, pipeline send/recv between stages, and the part of the data-parallel gradient
reduction that the last backward pass cannot hide; then the optimizer step. `time_s` lists these exposed parts,
and they sum to the step time.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import constants as C
from .collectives import OptionTable, collective_costs, collective_seconds, option_table
from .compute import LayerTimes, optimizer_time
from .memory import (RECOMPUTE_CODES, Layouts, activation_bytes_per_token, end_stage_layers, grad_bytes,
                     offloaded_layers, optimizer_state_bytes, params_on_gpu, stage_layers)
from .model import ParamCount, kv_dim
from .placement import KINDS, GroupPlacement, Placement
from .spec import ClusterSpec, PlanSpec

PARTS = ("compute", "bubble", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "offload", "optimizer")
ACT_BYTES = 2.0  # activations travel in bf16
# An FP8 MoE payload on the wire, bytes per value: 1 byte and a 4-byte fp32 scale per 128 values (DeepEP's
# per-token casts, DeepSeek-V3 sec. 3.3.2) or a 1-byte E8M0 scale per 32 (MXFP8, Megatron-Core's ncclep dispatch).
FP8_WIRE_BYTES = 1.0 + 4.0 / 128


@dataclass
class Collective:
    """One kind of collective a layout issues, with per-candidate totals over a step."""

    group: str                    # what it is for: tp, cp, ep, pp or dp (the time_s part it belongs to)
    op: str
    bytes_per_call: np.ndarray
    calls: np.ndarray
    time_s: np.ndarray            # total over the step
    exposed_s: np.ndarray         # the part on the critical path
    by_fabric: dict[str, np.ndarray]
    algorithm: str
    over: str = ""                # the ranks it runs over when not `group` (DP gradient stages over the CP ranks)
    # Per candidate, with the fabric split (GroupColumn.detail): the algorithm its calls run and the fabrics its
    # time is reported on ("none" and none for a candidate that makes no call). See StepTimes.collectives_of.
    algorithms: tuple[str, ...] = ()
    fabrics: tuple[frozenset, ...] = ()


@dataclass
class StepTimes:
    parts: dict[str, np.ndarray]
    collectives: list[Collective] = field(default_factory=list)

    @property
    def step(self) -> np.ndarray:
        return sum(self.parts.values())

    def collectives_of(self, j: int) -> list[tuple[Collective, str, dict[str, float]]]:
        """Candidate j's collectives (those it calls), each with its algorithm and its time by fabric: what
        step_times of candidate j alone would list (needs GroupColumn.detail)."""
        return [(c, c.algorithms[j], {f: float(t[j]) for f, t in c.by_fabric.items() if f in c.fabrics[j]})
                for c in self.collectives if c.calls[j] > 0]


@dataclass
class GroupColumn:
    """The groups of one kind that a batch of candidates runs on: the distinct ones, each candidate's index into
    them, and the collectives' option tables, built once per distinct group and op."""

    groups: tuple[GroupPlacement, ...]
    index: np.ndarray
    tables: dict[str, OptionTable] = field(default_factory=dict)
    detail: bool = True  # split each collective's time by fabric (the answer's report needs it; ranking does not)
    options: dict | None = None  # collectives.option_table's memo, shared by the columns of one search

    @cached_property
    def multi(self) -> np.ndarray | None:
        """Per candidate, whether its group has more than one member (None: all have)."""
        sizes = np.array([g.size for g in self.groups])
        return None if (sizes > 1).all() else (sizes > 1)[self.index]

    def table(self, op: str, cluster: ClusterSpec) -> OptionTable:
        if op not in self.tables:
            self.tables[op] = option_table(op, self.groups, cluster, self.options)
        return self.tables[op]


def group_columns(placements: Sequence[Placement], which: np.ndarray, detail: bool = True,
                  options: dict | None = None) -> dict[str, GroupColumn]:
    """Per kind, the distinct groups of `placements` and each candidate's (candidate i runs on
    placements[which[i]]). On one cluster a group is fixed by its kind, stride and size (placement._shape).
    Without `detail` the collectives' times are not split by fabric (the search ranks on totals alone).
    `options` memoises each group's collective options across calls on the same cluster."""
    out = {}
    for kind in KINDS:
        rows: dict[tuple[int, int], tuple[int, GroupPlacement]] = {}
        index = [rows.setdefault((p.groups[kind].stride, p.groups[kind].size), (len(rows), p.groups[kind]))[0]
                 for p in placements]
        out[kind] = GroupColumn(tuple(g for _, g in rows.values()), np.array(index, dtype=np.intp)[which],
                                detail=detail, options=options)
    return out


def step_times(spec: PlanSpec, pc: ParamCount, lay: Layouts, placement: dict[str, GroupColumn],
               lt: LayerTimes) -> StepTimes:
    """Step time parts for candidates `lay` on their placements' groups (group_columns); `lt` are their layer
    compute times (compute.layer_times, which needs no placement)."""
    m, cluster, tr = spec.model, spec.cluster, spec.training
    micro = lay.microbatches(tr.global_batch).astype(float)
    fwd, bwd = _stage_compute(spec, lay, lt)
    n = stage_layers(m.layers, lay.pp).astype(float)
    tokens = lay.micro_batch * m.seq_len / lay.cp
    params = params_on_gpu(m, pc, lay).total
    colls = (_tp_comm(spec, lay, placement, tokens, n, micro, lt)
             + [_cp_comm(spec, lay, placement, tokens, n, micro, lt),
                _ep_comm(spec, lay, placement, tokens, n, micro, fwd + bwd),
                _pp_comm(spec, lay, placement, tokens, micro)]
             + _dp_comm(spec, lay, placement, params, fwd, bwd, micro))
    exposed = {f"{g}_comm": sum((c.exposed_s for c in colls if c.group == g), np.zeros(len(lay)))
               for g in ("tp", "cp", "ep", "pp", "dp")}
    offload = _offload(spec, lay, tokens, n, fwd, bwd)
    # The bubble idles for (p - 1) / v micro-batches' worth of stage time, communication on the path included.
    per_micro = fwd + bwd + offload + (exposed["tp_comm"] + exposed["cp_comm"] + exposed["ep_comm"]) / micro
    shards = np.where(lay.zero >= 1, lay.dp * lay.cp, 1)
    # A cached FP8 weight cast runs once per step for each of the stage's layers (compute.layer_times).
    parts = {"compute": micro * (fwd + bwd) + n * lt.weight_cast, "bubble": (lay.pp - 1) / lay.vpp * per_micro,
             **exposed, "offload": micro * offload,
             "optimizer": optimizer_time(params / shards, cluster.gpu,
                                         optimizer_state_bytes(spec.training, lay.zero))}
    return StepTimes({k: parts[k] for k in PARTS}, [c for c in colls if np.any(c.calls > 0)])


def _offload(spec: PlanSpec, lay: Layouts, tokens: np.ndarray, n: np.ndarray, fwd: np.ndarray,
             bwd: np.ndarray) -> np.ndarray:
    """Exposed seconds per micro-batch of activation offloading: each offloaded layer's saved activations go to
    CPU memory during the forward pass and come back during the backward, one direction of the host link each
    (cluster.node.host_gbytes_per_s is bidirectional, at C.HOST_COPY_EFFICIENCY). The copy engines run beside the
    stage's compute, so only what the forward or the backward pass cannot cover is exposed."""
    if not spec.training.activation_offload_layers:
        return np.zeros(len(lay))  # the usual case, kept off the search's hot path
    k = offloaded_layers(spec.training, n)
    stored, _ = activation_bytes_per_token(spec.model, spec.training, lay)
    each_way = spec.cluster.node.host_gbytes_per_s / 2.0 * 1e9 * C.HOST_COPY_EFFICIENCY  # bytes/s
    copies = k * tokens * stored / each_way
    return np.maximum(copies - fwd, 0.0) + np.maximum(copies - bwd, 0.0)


def _stage_compute(spec: PlanSpec, lay: Layouts, lt: LayerTimes) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds per micro-batch on the slowest stage. The last stage also runs the output
    layer and the loss; with an uneven split it has one layer fewer. Recomputation adds to the backward:
    full repeats each layer's forward, selective what compute.layer_times says it repeats."""
    n = stage_layers(spec.model.layers, lay.pp)
    _, n_last = end_stage_layers(spec.model.layers, lay.pp)
    recompute = lay.full_share * lt.full_fwd + np.where(lay.recompute == RECOMPUTE_CODES["selective"],
                                                         lt.selective_fwd, 0.0)
    bwd_layer = lt.bwd + recompute
    mid = n * (lt.fwd + bwd_layer)
    last = n_last * (lt.fwd + bwd_layer) + lt.logits_fwd + lt.logits_bwd
    use_last = (last >= mid) | (lay.pp == 1)
    fwd = np.where(use_last, n_last * lt.fwd + lt.logits_fwd, n * lt.fwd)
    bwd = np.where(use_last, n_last * bwd_layer + lt.logits_bwd, n * bwd_layer)
    return fwd, bwd


def _collective(spec: PlanSpec, placement: dict[str, GroupColumn], group: str, op: str, nbytes: np.ndarray,
                calls: np.ndarray, over: str = "") -> Collective:
    """Cost `calls` calls of `op` for `group`'s purpose, run over the ranks of group `over` (default: `group`),
    each moving `nbytes` (nccl-tests size convention). On a group of one GPU there is no call. Only the
    candidates that make calls are costed (the others' totals are zero whatever one call would cost)."""
    col = placement[over or group]
    nbytes = np.broadcast_to(np.asarray(nbytes, dtype=float), col.index.shape)
    table = col.table(op, spec.cluster) if np.any(calls) else None
    if table is not None and col.multi is not None:  # a group of one GPU makes no call
        calls = np.where(col.multi, calls, 0.0)
    busy = np.flatnonzero(calls > 0) if table is not None else np.zeros(0, dtype=np.intp)
    n = len(col.index)
    if not busy.size:  # nobody makes this call (the ZeRO-3 collectives of ZeRO-1 candidates, CP stages of CP 1)
        zero = np.zeros(n)
        return Collective(group, op, nbytes, zero, zero, zero, {}, "none", over)
    everyone = busy.size == n
    made = calls if everyone else calls[busy]
    size, which = (nbytes, col.index) if everyone else (nbytes[busy], col.index[busy])
    algorithms: tuple[str, ...] = ()
    fabrics: tuple[frozenset, ...] = ()
    if col.detail:
        cost = collective_costs(table, size, which)
        seconds, algorithm = cost.time_s, cost.algorithm
        by_fabric = {fab: _spread(t * made, busy, n) for fab, t in cost.by_fabric.items()}
        algorithms, fabrics = cost.algorithms, cost.fabrics
        if not everyone:
            at = dict(zip(busy.tolist(), range(busy.size)))
            algorithms = tuple(algorithms[at[i]] if i in at else "none" for i in range(n))
            fabrics = tuple(fabrics[at[i]] if i in at else frozenset() for i in range(n))
    else:  # ranking: totals alone
        seconds, algorithm, by_fabric = collective_seconds(table, size, which), "", {}
    total = _spread(seconds * made, busy, n)
    # exposed_s starts as the whole time; callers replace it (never write into it), so it may share the array.
    calls = np.broadcast_to(calls, col.index.shape)
    return Collective(group, op, nbytes, calls, total, total, by_fabric, algorithm, over, algorithms, fabrics)


def _spread(values: np.ndarray, where: np.ndarray, n: int) -> np.ndarray:
    if len(where) == n:  # every candidate makes the call (busy is all of them, in order)
        return values
    out = np.zeros(n)
    out[where] = values
    return out


def _tp_comm(spec: PlanSpec, lay: Layouts, placement: dict[str, GroupColumn], tokens: np.ndarray, n: np.ndarray,
             micro: np.ndarray, lt: LayerTimes) -> list[Collective]:
    """Megatron TP: two all-reduces of the h-wide activations per layer forward and two backward (Shoeybi et al.
    2019, fig. 4); with sequence parallelism each becomes a reduce-scatter + all-gather pair of the same bytes
    (Korthikanti et al. 2022, sec. 4.2.2). Full recomputation repeats the forward's. Synchronous by default;
    training.tp_comm_overlap (Megatron --tp-comm-overlap, torchtitan async TP; both need sequence parallelism)
    splits each GEMM into chunks that overlap the collective beside it (Wang et al. 2023, "Overlap Communication
    with Dependent Computation via Decomposition"): the gather before the QKV and MLP-up GEMMs, the reduce-scatter
    after the output projection and the MLP-down GEMM, and in the backward the mirror pairs with the same GEMMs'
    data gradients. Each collective hides only behind its own GEMM: the excess and the interference remain."""
    nbytes = tokens * spec.model.hidden * ACT_BYTES
    calls = (4.0 + 2.0 * lay.full_share) * n * micro
    plain, split = np.where(lay.sp, 0.0, calls), np.where(lay.sp, calls, 0.0)
    # PyTorch's per-operator selective policy (torchtitan: it saves matmul, attention and reduce-scatter outputs)
    # gathers the two forward all-gathers' inputs again in the backward, with sequence parallelism.
    regather = ((lay.recompute == RECOMPUTE_CODES["selective"]) & lay.sp
                & (spec.training.checkpoint_impl == "pytorch") & (spec.training.attention != "unfused"))
    gathers = split + np.where(regather, 2.0 * n * micro, 0.0)
    # With FP8 and one scale per tensor the sequence-parallel all-gathers carry the inputs of the next GEMMs
    # already cast, 1 byte each (Transformer Engine gathers the FP8 output of LayerNormLinear, MXFP8 blocks with
    # their scales; torchao's Float8ColwiseParallel casts before the all-gather); reductions stay 16-bit. torchao's
    # rowwise recipe gathers in 16 bits.
    fp8_gather = spec.training.precision == "fp8" and spec.training.fp8_recipe != "rowwise"
    # Partitioned saved inputs (training.partition_activations) are gathered back over the TP ranks before each
    # fully recomputed layer, synchronously (Megatron's CheckpointFunction: gather_split_1d_tensor).
    partitioned = np.where(spec.training.partition_activations & ~lay.sp, lay.full_share * n * micro, 0.0)
    colls = [_collective(spec, placement, "tp", "all_reduce", nbytes, plain),
             _collective(spec, placement, "tp", "reduce_scatter", nbytes, split),
             _collective(spec, placement, "tp", "all_gather", nbytes / 2.0 if fp8_gather else nbytes, gathers)]
    if np.any(partitioned):
        colls.append(_collective(spec, placement, "tp", "all_gather", nbytes, partitioned))
    if spec.training.tp_wgrad_overlap:
        # Megatron's and Transformer Engine's column-parallel linears launch the reduction of the input gradient
        # asynchronously and run the weight-gradient GEMM beside it (megatron/core/tensor_parallel/layers.py,
        # LinearWithGradAccumulationAndAsyncCommunication.backward, default since Megatron-LM 3f65246911,
        # 2021-09-02; transformer_engine/pytorch/module/layernorm_linear.py, backward: dgrad reduce-scatter or
        # all-reduce with async_op=True before the wgrad GEMM): of each layer's backward reductions, those after
        # the QKV and MLP-up data gradients hide behind those layers' weight-gradient GEMMs, as many FLOPs as their
        # forward GEMMs (s); the rest stay on the critical path. With tp_comm_overlap the sequence-parallel
        # layouts overlap every collective (below); the all-reduces of those without sequence parallelism, which
        # that overlap does not reach, still hide this way.
        qkv, up = (C.DP_OVERLAP_EFFICIENCY * lt.tp_gemms[i] for i in (0, 2))
        # the all-reduce without sequence parallelism, the reduce-scatter with it
        for c in colls[:1] if spec.training.tp_comm_overlap else colls[:2]:
            per = _share(c.time_s, c.calls)
            saved = (2.0 * per - _exposed(per, qkv) - _exposed(per, up)) * n * micro
            c.exposed_s = c.time_s - saved  # nothing saved where there is no call (per is 0 there)
    if spec.training.tp_comm_overlap:
        rs, ag = colls[1], colls[2]
        per_rs, per_ag = (_share(c.time_s, c.calls) for c in (rs, ag))
        qkv, proj, up, down = (C.DP_OVERLAP_EFFICIENCY * g for g in lt.tp_gemms)
        # Forward: gather -> QKV, projection -> scatter, gather -> MLP up, down -> scatter; the backward's data
        # gradients pair the other way round (a scatter after QKV's and MLP-up's, a gather before the others').
        fwd = _exposed(per_ag, qkv) + _exposed(per_rs, proj) + _exposed(per_ag, up) + _exposed(per_rs, down)
        bwd = _exposed(per_rs, qkv) + _exposed(per_ag, proj) + _exposed(per_rs, up) + _exposed(per_ag, down)
        # The backward's re-gathers feed only the weight-gradient GEMMs, which contract over the gathered tokens:
        # decomposition splits a GEMM along the rows of its left operand only (PyTorch's micro-pipeline pass
        # fuses an all-gather with the matmuls that take it as the left operand; "decomposing the matmul on the K
        # dimension is not supported", torch/_inductor/fx_passes/micro_pipeline_tp.py), so they stay exposed.
        again = np.where(regather, 2.0 * per_ag, 0.0)
        hidden = np.where(lay.sp, ((1.0 + lay.full_share) * fwd + bwd + again) * n * micro, rs.time_s + ag.time_s)
        for c in (rs, ag):
            c.exposed_s = hidden * _share(c.time_s, rs.time_s + ag.time_s)
    return colls


def _cp_comm(spec: PlanSpec, lay: Layouts, placement: dict[str, GroupColumn], tokens: np.ndarray, n: np.ndarray,
             micro: np.ndarray, lt: LayerTimes) -> Collective:
    """Ring attention (Liu et al. 2023; Megatron-Core context parallelism): each layer passes this rank's K and V
    chunk around the CP ring, cp - 1 hops forward and twice that backward (K, V and their gradients), overlapped
    with the attention on the chunk already received, by the rule every overlapped collective follows
    (`_exposed`: the excess over DP_OVERLAP_EFFICIENCY of the window, plus COMM_INTERFERENCE of the hidden part;
    the ring's send/recv kernels take SMs from the attention as any NCCL kernel does)."""
    m = spec.model
    hop_bytes = 2.0 * tokens * kv_dim(m) / lay.tp * ACT_BYTES
    hops = (lay.cp - 1) * (3.0 + lay.full_share)
    c = _collective(spec, placement, "cp", "send_recv", hop_bytes, hops * n * micro)
    window = (lt.attention_fwd + lt.attention_bwd) * n * micro
    c.exposed_s = _exposed(c.time_s, C.DP_OVERLAP_EFFICIENCY * window)
    return c


def _ep_comm(spec: PlanSpec, lay: Layouts, placement: dict[str, GroupColumn], tokens: np.ndarray, n: np.ndarray,
             micro: np.ndarray, compute: np.ndarray) -> Collective:
    """MoE token dispatch and combine: two all-to-alls per MoE layer forward, two backward (Lepikhin et al.
    2020, GShard), each sending the rank's tokens x top_k h-wide rows, in 16 bits: even in FP8 training
    Megatron-Core's dispatchers send the bf16 hidden states and the experts' first linear quantises them on arrival
    (megatron/core/transformer/moe/fused_a2a.py at the pinned commit: HybridEP asserts "does not support fp8
    dispatch", DeepEP is called with the bf16 tensor; moe_dispatch_fwd_dtype defaults to bf16). With
    training.ep_dispatch_dtype = "fp8" the forward dispatch and the gradient the backward sends the same way travel
    at FP8_WIRE_BYTES and the two combines stay in 16 bits (DeepSeek-V3 sec. 3.3.2; Megatron-Core's ncclep backend
    with moe_dispatch_fwd_dtype and moe_combine_bwd_dtype mxfp8): half the all-to-alls, so the mean of the two
    widths. training.ep_dispatch = "dedup" sends a token once per remote NVLink domain (dedup_ratio). On the
    critical path unless training.ep_comm_overlap (Megatron-Core --overlap-moe-expert-parallel-comm: one
    micro-batch's all-to-alls run during another's compute), which leaves the excess over the compute and the
    interference."""
    m = spec.model
    fp8_wire = spec.training.precision == "fp8" and spec.training.ep_dispatch_dtype == "fp8"
    act_bytes = (FP8_WIRE_BYTES + ACT_BYTES) / 2.0 if fp8_wire else ACT_BYTES
    nbytes = tokens / lay.tp * m.top_k * m.hidden * act_bytes
    if spec.training.ep_dispatch == "dedup" and m.is_moe:
        col = placement["ep"]
        domains = np.array([g.domains for g in col.groups], dtype=float)[col.index]
        nbytes = nbytes * dedup_ratio(domains, m.top_k, m.router_groups, m.router_group_top_k)
    per_layer = 4.0 + 2.0 * lay.full_share
    moe_share = m.moe_layers / m.layers
    c = _collective(spec, placement, "ep", "all_to_all", nbytes, per_layer * n * moe_share * micro)
    if spec.training.ep_comm_overlap:
        c.exposed_s = _exposed(c.time_s, C.DP_OVERLAP_EFFICIENCY * compute * micro)
    return c


def dedup_ratio(domains: np.ndarray | float, top_k: int, groups: int = 1, group_top_k: int = 1) -> np.ndarray:
    """Cross-domain bytes of a deduplicating dispatch (DeepEP, HybridEP: a token crosses to each NVLink domain it
    is routed to once and fans out to its experts there over NVLink) over those of a plain all-to-all, which sends
    each of the k copies and k (N - 1)/N of them leave the domain: hit(N)/k, where hit is the expected number of
    the N domains (holding equal runs of consecutive experts) the token reaches; (N - 1)/N of those are remote in
    both cases (DeepSeek-AI 2024, DeepSeek-V3 report, sec. 3.2.2). Without router groups the k experts are spread
    evenly: hit = N (1 - (1 - 1/N)^k). With group-limited routing a token picks g of G groups of consecutive
    experts and about k/g experts in each (Megatron-Core's group_limited_topk scores a group by its top k/g;
    DeepSeek-V3 report sec. 2.1.2, node-limited routing: G = 8, g = 4):
      G a multiple of N (G/N groups per domain): a domain is reached when one of its groups is picked,
        hit = N (1 - C(G - G/N, g) / C(G, g));
      N a multiple of G (a group spans r = N/G domains): hit = N (g/G) (1 - (1 - 1/r)^(k/g));
    other shapes are taken as ungrouped (an upper bound: groups only concentrate a token's experts). Inside one
    domain (N = 1) nothing changes. Forced-balance benchmarks (random router logits) route this way too: the
    random logits go through the same group-limited top-k."""
    n = np.maximum(np.asarray(domains, dtype=float), 1.0)
    counts, where = np.unique(n, return_inverse=True)  # a handful of domain counts over all the candidates
    reached = np.array([_domains_reached(int(c), top_k, groups, group_top_k) for c in counts])
    return np.where(n > 1, (reached / top_k)[where].reshape(n.shape), 1.0)


def _domains_reached(n: int, k: int, groups: int, picked: int) -> float:
    """Expected NVLink domains a token's k routed experts fall in (dedup_ratio)."""
    if picked < groups and groups % n == 0:
        return n * (1.0 - math.comb(groups - groups // n, picked) / math.comb(groups, picked))
    if picked < groups and n % groups == 0:
        return n * picked / groups * (1.0 - (1.0 - groups / n) ** (k / picked))
    return n * (1.0 - (1.0 - 1.0 / n) ** k)


def _pp_comm(spec: PlanSpec, lay: Layouts, placement: dict[str, GroupColumn], tokens: np.ndarray, micro: np.ndarray
             ) -> Collective:
    """Pipeline send/recv: every forward and backward chunk hands the h-wide activation (or its gradient) to the
    next stage, split over the TP ranks (Narayanan et al. 2021, sec. 4.1 scatter/gather): 2 (m v + p - 1)
    transfers on the critical path of the 1F1B schedule."""
    nbytes = tokens * spec.model.hidden * ACT_BYTES / lay.tp
    calls = np.where(lay.pp > 1, 2.0 * (micro * lay.vpp + lay.pp - 1), 0.0)
    c = _collective(spec, placement, "pp", "send_recv", nbytes, calls)
    if not spec.training.pp_comm_overlap:
        return c
    # Megatron-Core's interleaved schedule posts each chunk's sends and receives asynchronously and computes the
    # next chunk meanwhile (overlap_p2p_comm, its training default with virtual stages; schedules.py): only the
    # 2 (p - 1) hand-offs that fill and drain the pipeline wait; the steady state's run behind compute (_exposed).
    # Without virtual stages Megatron turns the overlap off (arguments.py).
    fill = (lay.pp - 1) / np.maximum(1.0, micro * lay.vpp + lay.pp - 1)
    steady = np.where(lay.vpp > 1, c.time_s * (1.0 - fill), 0.0)
    return replace(c, exposed_s=_exposed(c.time_s, steady))


def _dp_comm(spec: PlanSpec, lay: Layouts, placement: dict[str, GroupColumn], params: np.ndarray, fwd: np.ndarray,
             bwd: np.ndarray, micro: np.ndarray) -> list[Collective]:
    """Gradient reduction over the ranks that hold the same weights, DP x CP (Rajbhandari et al. 2020; Megatron
    reduces over the data- and context-parallel ranks), hidden behind compute at DP_OVERLAP_EFFICIENCY unless
    training.overlap_grad_reduce is off. ZeRO-0 all-reduces the gradients behind the last micro-batch's backward;
    ZeRO-1 reduce-scatters them there, ZeRO-2 behind every micro-batch's backward, and both all-gather the
    updated 2-byte weights behind the next step's first forward. ZeRO-3 / FSDP works layer by layer (Zhao et al.
    2023, PyTorch FSDP, sec. 3.3): every micro-batch gathers each layer's weights before its forward and again
    before its backward, and reduce-scatters each layer's gradient after it, one collective per layer (each
    paying its latency), prefetching one layer ahead; see _layer_exposed. ZeRO-2 works the same way, without the
    backward's gathers, when training.zero_granularity is "layer" (FSDP SHARD_GRAD_OP, FSDP2 without
    resharding after the forward). Hidden communication still costs COMM_INTERFERENCE of its time (the SMs and
    HBM bandwidth its kernels take from the compute they overlap)."""
    grad = grad_bytes(spec.training) * params
    # FP8 parameter all-gather (torchao enable_fsdp_float8_all_gather, Megatron --fp8-param-gather): 1 byte each.
    fp8_gather = spec.training.precision == "fp8" and spec.training.fp8_param_gather
    weights = (1.0 if fp8_gather else C.WEIGHT_BYTES) * params
    z = lay.zero
    per_layer = (z == 3) | ((z == 2) & (spec.training.zero_granularity == "layer"))
    n = stage_layers(spec.model.layers, lay.pp).astype(float)
    # Per-layer sharding moves one layer per call: n calls per gather or reduction of the stage's parameters,
    # every micro-batch. Its calls are separate collectives from the bucketed ones, so each keeps one size per
    # placement (the costing prices runs of equal sizes once).
    layer = np.where(per_layer, micro * n, 0.0)
    gathers = np.where(z == 3, 2.0, 1.0)  # ZeRO-3 gathers again before the backward
    whole = np.where(((z == 1) | (z == 2)) & ~per_layer, 1.0, 0.0)
    # Bucketed ZeRO-2 keeps only its shard of the gradients, so it cannot accumulate whole gradients over
    # micro-batches: every micro-batch's backward reduce-scatters them (DeepSpeed ZeRO stage 2, Rajbhandari et al.
    # 2020, sec. 5.2). ZeRO-1 accumulates and reduce-scatters once per step.
    rs_whole = np.where(z == 2, micro, 1.0) * whole
    ar = _reduction(spec, placement, lay, "all_reduce", grad, np.where(z == 0, 1.0, 0.0))
    rs = (_reduction(spec, placement, lay, "reduce_scatter", grad, rs_whole)
          + _reduction(spec, placement, lay, "reduce_scatter", grad / n, layer))
    ag = (_reduction(spec, placement, lay, "all_gather", weights, whole)
          + _reduction(spec, placement, lay, "all_gather", weights / n, gathers * layer))
    t_ar, t_rs, t_ag = (sum(c.time_s for c in phase) for phase in (ar, rs, ag))
    overlap = C.DP_OVERLAP_EFFICIENCY if spec.training.overlap_grad_reduce else 0.0
    # Bucketed ZeRO-2's reductions each hide behind their own micro-batch's backward.
    rs_window = overlap * bwd * np.where(z == 2, micro, 1.0)
    exposed = {"ar": _exposed(t_ar, overlap * bwd), "rs": _exposed(t_rs, rs_window),
               "ag": _exposed(t_ag, overlap * fwd)}
    pl = np.flatnonzero(per_layer)  # the per-layer candidates' exposure replaces the bucketed one
    if pl.size:
        calls = layer[pl]
        exposed["rs"][pl], exposed["ag"][pl] = _layer_exposed(
            t_rs[pl] / calls, t_ag[pl] / (gathers[pl] * calls), z[pl] == 3, fwd[pl] / n[pl], bwd[pl] / n[pl], n[pl],
            micro[pl], overlap)
    for key, phase, total in (("ar", ar, t_ar), ("rs", rs, t_rs), ("ag", ag, t_ag)):
        if not placement["dp"].detail:  # ranking needs the phase's sum alone: its first stage carries it
            phase[0].exposed_s = exposed[key]
            for c in phase[1:]:
                c.exposed_s = np.zeros(len(lay))
            continue
        for c in phase:  # spread a phase's exposure over its stages in proportion to their time
            c.exposed_s = exposed[key] * _share(c.time_s, total)
    return ar + rs + ag


def _exposed(comm: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Exposed time of communication overlapped with a compute window: the excess, plus COMM_INTERFERENCE of
    the hidden part (NCCL runs one CTA per channel, 16-32 channels, on the SMs the GEMMs would use, and streams
    through the same HBM)."""
    hidden = np.minimum(comm, np.maximum(window, 0.0))
    return comm - hidden + C.COMM_INTERFERENCE * hidden


def _layer_exposed(rs_layer: np.ndarray, ag_layer: np.ndarray, regather: np.ndarray, fwd_layer: np.ndarray,
                   bwd_layer: np.ndarray, n: np.ndarray, micro: np.ndarray, overlap: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer sharding with one-layer prefetch (FSDP forward_prefetch / backward_prefetch): layer i+1's gather
    runs during layer i's compute, so per micro-batch the first gather of each pass is exposed whole and every
    later one by what the previous layer's compute cannot hide. In the backward each layer's reduce-scatter shares
    the previous layer's window with the next gather (ZeRO-3 only: `regather`), and the last reduce-scatter is
    exposed. Returns (reduce-scatter, all-gather) exposed over the step."""
    fwd_ag = ag_layer + (n - 1) * _exposed(ag_layer, overlap * fwd_layer)
    both = np.where(regather, ag_layer, 0.0) + rs_layer
    bwd_both = both + (n - 1) * _exposed(both, overlap * bwd_layer)
    share_rs = _share(rs_layer, both)
    rs = micro * bwd_both * share_rs
    ag = micro * (fwd_ag + bwd_both * (1.0 - share_rs))
    return rs, ag


def _share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    return np.divide(part, whole, out=np.zeros_like(np.asarray(whole, dtype=float)), where=whole > 0)


def _reduction(spec: PlanSpec, placement: dict[str, GroupColumn], lay: Layouts, op: str, nbytes: np.ndarray,
               calls: np.ndarray) -> list[Collective]:
    """`op` over the DP x CP ranks. With CP > 1 it runs in two stages, over the CP group then the DP group (the
    gather in reverse), which moves the same bytes per GPU as one ring over all DP x CP ranks: a reduce-scatter
    S (cp-1)/cp + S/cp (dp-1)/dp = S (1 - 1/(dp cp)); an all-reduce is reduce-scatter (CP), all-reduce of S/cp
    (DP), all-gather (CP). With CP = 1 the CP stages run on one GPU: no calls, and the DP stage moves S."""
    cp = lay.cp
    over_cp = lambda o, b: _collective(spec, placement, "dp", o, b, calls, over="cp")  # noqa: E731
    over_dp = lambda o, b: _collective(spec, placement, "dp", o, b, calls)  # noqa: E731
    if op == "reduce_scatter":
        return [over_cp("reduce_scatter", nbytes), over_dp("reduce_scatter", nbytes / cp)]
    if op == "all_gather":
        return [over_dp("all_gather", nbytes / cp), over_cp("all_gather", nbytes)]
    return [over_cp("reduce_scatter", nbytes), over_dp("all_reduce", nbytes / cp), over_cp("all_gather", nbytes)]
