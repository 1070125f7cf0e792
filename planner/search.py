"""The layout search: enumerate every layout, reject the infeasible ones with a reason, cost the rest.

Axes (one small generator each): TP (divides the heads and KV heads, stays inside an NVLink domain), PP (splits
the layers), CP (splits the sequence), DP = GPUs / (TP PP CP) (divides the batch), EP (MoE, divides experts
and DP), micro-batch, virtual stages, recomputation, sequence parallelism, ZeRO stage and rank order. Pinned
fields are honoured exactly, including pins that make a layout infeasible (the answer then says why).
The structural axes are enumerated in Python (a few hundred combinations at most); the inner axes are
expanded into numpy arrays and the cost model runs vectorised over all of them at once: each placement, each
distinct group and each distinct shard is worked out once, and the candidates gather from them.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .compute import LayerTimes, Shard, layer_times
from .memory import GIB, RECOMPUTE_CODES, Layouts, memory_per_gpu
from .model import ParamCount, param_count
from .placement import Placement, PlacementRejected, ep_across_stages, place, tp_domain_reason
from .spec import RANK_ORDERS, RECOMPUTE, PlanSpec, quantity
from .steptime import group_columns, step_times

# Micro-batches searched: up to 64 sequences, or more while a micro-batch holds at most 131,072 tokens (64 of
# 2,048). Beyond that a GEMM's M (micro-batch x sequence) is far past where it runs near peak, so only fewer
# per-micro-batch costs remain (ZeRO-3 gathers, launches), and the search grows; llm-foundry's tuned 125M-760M
# runs at 512 tokens use 96-128 sequences per micro-batch.
MAX_MICRO_BATCH = 64
MAX_MICRO_BATCH_TOKENS = 131_072
MAX_VPP = 16
CP_CHOICES = (1, 2, 4, 8, 16, 32)
MAX_CANDIDATES = 2_000_000  # hard bound on the inner product, whatever the input


@dataclass
class Rejections:
    """Counts of rejected layouts by reason, with one readable example message each."""

    counts: Counter
    examples: dict[str, str]

    def add(self, reason: str, message: str, count: int = 1) -> None:
        if count:
            self.counts[reason] += count
            self.examples.setdefault(reason, message)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# No stack runs ZeRO-2 or -3 across pipeline stages: DeepSpeed's pipeline engine refuses them ("ZeRO-2 and ZeRO-3 are
# incompatible with pipeline parallelism", deepspeed/runtime/pipe/engine.py), Megatron's FSDP path excludes PP, and
# PyTorch's pipeline schedules keep FSDP's weights gathered and its gradients whole for the step
# (torch.distributed.pipelining.stage.backward_maybe_with_nosync), which is ZeRO-1's memory and traffic.
ZERO_WITH_PIPELINE = ("ZeRO-2/3 with PP > 1: no stack shards gradients or weights across pipeline micro-batches "
                      "(DeepSpeed refuses it; PyTorch FSDP under a pipeline schedule holds what ZeRO-1 holds): plan "
                      "ZeRO-1 with PP, or ZeRO-3 without PP")

# Megatron-Core refuses an MoE model with TP > 1 and no sequence parallelism ("When using MoE and tensor
# parallelism, sequence parallelism must be used": megatron/training/arguments.py; TransformerConfig raises it for
# EP > 1 with TP > 1), and torchtitan's TP always shards the sequence around its norms: no stack runs it.
MOE_TP_NEEDS_SP = ("an MoE model with TP > 1 needs sequence parallelism (Megatron-Core refuses it without; "
                   "torchtitan's TP always applies it): plan SP with TP, or TP 1")


def _pinned(options: list, pin) -> list:
    return options if pin is None else [pin]


def recompute_pin(spec: PlanSpec) -> str | None:
    """The pinned recomputation: a pinned recompute_fraction, which applies to full recomputation only, pins
    "full" where recompute itself is left to the search (it was dropped: every plan recomputed none or some)."""
    pin = spec.layout
    return "full" if pin.recompute is None and pin.recompute_fraction is not None else pin.recompute


def tp_options(spec: PlanSpec) -> list[int]:
    """Divisors of the GPU count up to 4 domains wide (wider ones are never sensible, only rejected)."""
    limit = min(spec.model.heads, 4 * spec.cluster.node.nvlink_domain_gpus)
    return _pinned([d for d in divisors(spec.cluster.num_gpus) if d <= limit], spec.layout.tp)


def tp_reason(spec: PlanSpec, tp: int) -> tuple[str, str] | None:
    m = spec.model
    if m.heads % tp or m.kv_heads % tp:  # each TP rank holds whole heads and whole KV groups
        counts = [f"the {n} {what}" for n, what in ((m.heads, "attention heads"), (m.kv_heads, "KV heads")) if n % tp]
        return "tp_does_not_divide_heads", f"TP={tp} does not divide {' or '.join(counts)}"
    if (why := tp_domain_reason(spec.cluster, tp)) is not None:
        return "tp_crosses_nvlink_domain", why
    return None


def pp_reason(spec: PlanSpec, pp: int) -> tuple[str, str] | None:
    """Any PP up to the layer count: an uneven split gives some stages one layer fewer (the last stage first,
    which also runs the output layer), as Megatron's uneven pipelines, Llama 3 405B (126 layers on 16 stages)
    and DeepSeek-V3 (61 on 16) do. The step time pays for the busiest stage."""
    layers = spec.model.layers
    if pp > layers:
        return "pp_exceeds_layers", f"PP={pp} has more stages than the {layers} layers"
    return None


def cp_reason(spec: PlanSpec, cp: int) -> tuple[str, str] | None:
    if cp == 1:
        return None
    if spec.training.attention not in ("flash", "cudnn", "te"):
        # Ring attention merges each step's partial output by its log-sum-exp, which only a fused attention kernel
        # returns (Megatron-Core context parallelism runs on Transformer Engine's flash or cuDNN fused attention).
        return "cp_needs_flash_attention", (f"CP={cp} needs flash or cudnn attention (ring attention merges the "
                                            "partial results of fused attention kernels)")
    s, chunks = spec.model.seq_len, (2 * cp if spec.training.cp_load_balance else cp)
    if s % chunks:
        kind = "load-balanced causal ring attention" if spec.training.cp_load_balance else "ring attention"
        return "cp_does_not_split_sequence", (f"CP={cp} needs the {s}-token sequence to split into {chunks} "
                                              f"equal chunks ({kind})")
    return None


def dp_reason(spec: PlanSpec, dp: int) -> tuple[str, str] | None:
    b = spec.training.global_batch
    if b % dp:
        return "dp_does_not_divide_batch", f"DP={dp} does not divide the global batch of {quantity(b, 'sequences')}"
    return None


def ep_options(spec: PlanSpec, block: int, dp: int) -> list[int]:
    """EP divides the experts and the TP·CP·DP ranks of a stage, over which the expert groups fold (Megatron-Core
    with expert tensor parallelism 1). The search offers no EP (1) and groups of whole TP·CP blocks (`block`)
    times a divisor of DP; a pin may name any divisor of the stage's ranks."""
    if not spec.model.is_moe:
        return _pinned([1], spec.layout.ep)
    offered = sorted({1} | {block * d for d in divisors(dp) if spec.model.experts % (block * d) == 0})
    return _pinned(offered, spec.layout.ep)


def micro_batch_options(spec: PlanSpec, dp: int) -> list[int]:
    per_replica = spec.training.global_batch // dp
    seq = spec.model.seq_len
    return _pinned([d for d in divisors(per_replica) if d <= MAX_MICRO_BATCH or d * seq <= MAX_MICRO_BATCH_TOKENS],
                   spec.layout.micro_batch)


def vpp_options(spec: PlanSpec, pp: int) -> list[int]:
    """Virtual stages divide the (padded) layers of a stage: 126 layers on 16 stages are 8 slots per stage with
    the first and last one short, interleaved as Llama 3 405B was."""
    if pp == 1:
        return _pinned([1], spec.layout.vpp)
    per_stage = -(-spec.model.layers // pp)
    return _pinned([v for v in divisors(per_stage) if v <= MAX_VPP], spec.layout.vpp)


def recompute_options(spec: PlanSpec) -> list[str]:
    """Every mode, under either attention kernel: each is its own trade of memory for time. With unfused attention
    selective recomputation repeats the attention core and drops the s x s scores (Korthikanti et al. 2022, sec. 5);
    under flash attention it repeats the element-wise ops and every other GEMM and keeps ~40% of a layer's
    activations (torchtitan per-op SAC; memory._selective_flash), which lets a layout that does not fit without
    recomputation avoid full recomputation's whole repeated forward."""
    return list(RECOMPUTE)


def inner_reason(spec: PlanSpec, tp: int, pp: int, dp: int, ep: int, mb: int, vpp: int, sp: bool
                 ) -> tuple[str, str] | None:
    """Checks on the inner axes; only pins can break the first few, as the generators never offer them.
    Recomputation, ZeRO stage and rank order break none of them."""
    m, b = spec.model, spec.training.global_batch
    if (b // dp) % mb:
        return "micro_batch_does_not_divide", (f"micro-batch {mb} does not divide the "
                                               f"{quantity(b // dp, 'sequences')} per replica")
    ranks = spec.cluster.num_gpus // pp
    if ep > 1 and (not m.is_moe or m.experts % ep or ranks % ep):
        return "ep_invalid", f"EP={ep} must divide the {m.experts} experts and the {ranks} TP·CP·DP ranks of a stage"
    if sp and tp == 1:
        return "sp_needs_tp", "sequence parallelism needs TP > 1"
    # Virtual stages may hold unequal numbers of layers (Megatron-Core --num-virtual-stages-per-pipeline-rank or
    # --pipeline-model-parallel-layout: DeepSeek-V3's 61 layers over PP 2 x 8 virtual stages), but each holds one.
    # The search itself offers only even splits (vpp_options); a pinned layout may be uneven.
    if vpp > 1:
        held = -(-m.layers // pp)  # layers on the fullest stage
        if pp == 1 or held < vpp:
            return "vpp_invalid", (f"{vpp} virtual stages need PP > 1 and a layer each; a stage holds {held} "
                                   f"layer{'s' if held != 1 else ''}")
        # At least PP micro-batches a step; since Megatron-Core's micro-batch groups (memory.vp_group) no
        # longer a multiple of PP.
        if b // dp // mb < pp:
            return "vpp_needs_microbatches", (f"interleaving needs at least PP={pp} micro-batches per step, "
                                              f"not {b // dp // mb}")
    return None


def structures(spec: PlanSpec):
    """Every (tp, pp, cp, dp) the pins allow, with the reason it is infeasible (None when it is not): the
    structural walk that both the search and its estimate make."""
    n, lay_pin = spec.cluster.num_gpus, spec.layout
    for tp in tp_options(spec):
        if (why := tp_reason(spec, tp)) or n % tp:
            yield tp, 0, 0, 0, why or ("gpus_not_divisible", f"TP={tp} does not divide {n} GPUs")
            continue
        for pp in _pinned([d for d in divisors(n // tp) if d <= spec.model.layers], lay_pin.pp):
            if (why := pp_reason(spec, pp)) or (n // tp) % pp:
                yield tp, pp, 0, 0, why or ("gpus_not_divisible", f"TP x PP = {tp * pp} does not divide {n} GPUs")
                continue
            for cp in _pinned([c for c in CP_CHOICES if (n // tp // pp) % c == 0], lay_pin.cp):
                if (n // tp // pp) % cp:  # only a pin gets here
                    yield tp, pp, cp, 0, ("gpus_not_divisible", f"TP x PP x CP = {tp * pp * cp} does not divide "
                                                                f"{n} GPUs")
                    continue
                dp = n // (tp * pp * cp)
                why = cp_reason(spec, cp) or dp_reason(spec, dp)
                if why is None and lay_pin.dp is not None and lay_pin.dp != dp:
                    why = ("not_the_pinned_dp", f"TP x PP x CP = {tp * pp * cp} leaves DP={dp}, not the pinned "
                                                f"{lay_pin.dp}")
                yield tp, pp, cp, dp, why


def enumerate_layouts(spec: PlanSpec, rejected: Rejections) -> tuple[Layouts, np.ndarray]:
    """Every layout the pins allow, minus the structurally infeasible ones (counted in `rejected`). A layout that
    both rank orders can hold is one row with the first order and `twin` set: memory does not depend on the
    order, so evaluate() costs it once and adds the other order only if it fits."""
    shapes: list[tuple[int, int, int, int]] = []
    blocks: list[list[np.ndarray]] = []
    twins: list[np.ndarray] = []
    for tp, pp, cp, dp, why in structures(spec):
        if why:
            rejected.add(*why)
        else:
            cols, twin = _inner(spec, tp, pp, cp, dp, rejected)
            shapes.append((tp, pp, dp, cp))
            blocks.append(cols)
            twins.append(twin)
    if not blocks:
        return _layouts([np.zeros(0, dtype=np.int64)] * 11, spec.layout.recompute_fraction), np.zeros(0, dtype=bool)
    rows = [len(t) for t in twins]
    fixed = [np.repeat(np.array(c, dtype=np.int64), rows) for c in zip(*shapes)]  # tp, pp, dp, cp of each block
    cols = fixed + [np.concatenate(c) for c in zip(*blocks)]
    return _layouts(cols, spec.layout.recompute_fraction), np.concatenate(twins)


def _inner(spec: PlanSpec, tp: int, pp: int, cp: int, dp: int, rejected: Rejections
           ) -> tuple[list[np.ndarray], np.ndarray]:
    """The inner axes' product (itertools.product order) as columns of _layouts after tp, pp, dp, cp, minus those
    inner_reason rejects, counted as one rejection per layout in product order would count them; each row stands
    for every rank order the pins allow that can hold it (see enumerate_layouts)."""
    pin = spec.layout
    orders = [RANK_ORDERS.index(o) for o in _pinned(list(RANK_ORDERS) if pp > 1 and dp > 1 else [RANK_ORDERS[0]],
                                                     pin.rank_order)]
    zeros = _pinned([0, 1, 2, 3] if dp * cp > 1 else [0], pin.zero)
    sharded_under_pp = [z for z in zeros if z >= 2] if pp > 1 else []
    sps = _pinned([False, True] if tp > 1 else [False], pin.sequence_parallel)
    unsplit_moe = [s for s in sps if not s] if spec.model.is_moe and tp > 1 else []
    axes = (ep_options(spec, tp * cp, dp), micro_batch_options(spec, dp), vpp_options(spec, pp),
            [RECOMPUTE_CODES[rc] for rc in _pinned(recompute_options(spec), recompute_pin(spec))],
            [s for s in sps if s not in unsplit_moe], [z for z in zeros if z not in sharded_under_pp])
    if math.prod(len(a) for a in axes) * len(orders) > MAX_CANDIDATES:
        axes = (axes[0], axes[1][:8], *axes[2:])  # bound the work; micro-batches beyond 8 options add nothing
    # Counted over the same (bounded) axes as the layouts kept, each layout once: one that breaks both rules is MoE
    # SP's, the rule of the two a search can never pick its way round (with both pinned, each count had been taken
    # over the axis the other had emptied: 0 and 0, and the page said no layout was considered).
    if sharded_under_pp:
        rejected.add("zero_with_pipeline", ZERO_WITH_PIPELINE,
                     math.prod(len(a) for a in axes[:5]) * len(sharded_under_pp) * len(orders))
    if unsplit_moe:
        rejected.add("moe_tp_needs_sp", MOE_TP_NEEDS_SP,
                     math.prod(len(a) for a in axes[:4]) * len(unsplit_moe) * len(zeros) * len(orders))
    shape = tuple(len(a) for a in axes)
    failed, verdict = _inner_verdicts(spec, tp, pp, dp, axes[0], axes[1], axes[2], axes[4])
    verdict = np.broadcast_to(verdict.reshape(shape[0], shape[1], shape[2], 1, shape[4], 1), shape).reshape(-1)
    _count_inner(rejected, verdict, failed, len(orders))
    accepted = (verdict < 0).reshape(shape[0], -1)
    held = _orders_held(tp, pp, cp, axes[0], orders, accepted.sum(axis=1), rejected)
    accepted &= (held[:, 0] >= 0)[:, None]
    pick = np.unravel_index(np.flatnonzero(accepted), shape)  # the kept rows' index on each axis
    cols = [np.asarray(a, dtype=np.int64)[i] for a, i in zip(axes, pick, strict=True)]
    return [*cols, held[pick[0], 0]], held[pick[0], 1] >= 0


def _orders_held(tp: int, pp: int, cp: int, eps: list, orders: list, rows: np.ndarray, rejected: Rejections
                 ) -> np.ndarray:
    """Per EP of `eps` (with rows[k] layouts of eps[k]), up to two rank orders that can hold it (-1: none).
    Expert groups wider than a TP·CP block fold over data-parallel ranks, which must sit inside a pipeline stage
    (placement.py), so with PP the order that interleaves DP with PP cannot hold them: those layouts are rejected
    here, before memory is costed."""
    held = np.full((len(eps), 2), -1, dtype=np.int64)
    for k, e in enumerate(eps):
        why = {o: ep_across_stages(tp, cp, pp, e, RANK_ORDERS[o]) for o in orders}
        good = [o for o in orders if why[o] is None]
        if len(good) < len(orders) and rows[k]:
            message = next(w for w in why.values() if w is not None)
            rejected.add("ep_across_pipeline_stages", message, (len(orders) - len(good)) * int(rows[k]))
        held[k, :len(good[:2])] = good[:2]
    return held


def _inner_verdicts(spec: PlanSpec, tp: int, pp: int, dp: int, eps: list, mbs: list, vpps: list, sps: list
                    ) -> tuple[list[tuple[str, str]], np.ndarray]:
    """inner_reason of every (EP, micro-batch, VPP, SP), the only axes it reads, as an (E, M, V, S) array of
    indices into the returned failures (-1: none). It checks the micro-batch, then EP, then SP, then VPP with the
    micro-batch, and EP 1, micro-batch 1, VPP 1 and no SP pass every check: so each partial check runs once per
    value and a combination fails with the first of its partial checks that fails."""
    failed: list[tuple[str, str]] = []

    def check(ep: int = 1, mb: int = 1, vpp: int = 1, sp: bool = False) -> int:
        why = inner_reason(spec, tp, pp, dp, ep, mb, vpp, sp)
        failed.extend([why] if why else [])
        return len(failed) - 1 if why else -1

    partial = [np.array([check(mb=m) for m in mbs]).reshape(1, -1, 1, 1),
               np.array([check(ep=e) for e in eps]).reshape(-1, 1, 1, 1),
               np.array([check(sp=s) for s in sps]).reshape(1, 1, 1, -1),
               np.array([[check(mb=m, vpp=v) for v in vpps] for m in mbs]).reshape(1, len(mbs), len(vpps), 1)]
    verdict = np.full((len(eps), len(mbs), len(vpps), len(sps)), -1, dtype=np.int64)
    for part in reversed(partial):  # the earliest failing check wins
        verdict = np.where(part >= 0, part, verdict)
    return failed, verdict


def _count_inner(rejected: Rejections, verdict: np.ndarray, failed: list[tuple[str, str]], weight: int = 1) -> None:
    """Add the rejections of layouts in product order: reasons in order of first occurrence, each with its
    first layout's message. verdict: per layout, the index of its failure in `failed` (-1: accepted)."""
    rows = np.flatnonzero(verdict >= 0)
    if not rows.size:
        return
    names = sorted({reason for reason, _ in failed})
    reason_of = np.array([names.index(reason) for reason, _ in failed])
    _, first_at, counts = np.unique(reason_of[verdict[rows]], return_index=True, return_counts=True)
    for k in np.argsort(first_at, kind="stable"):
        reason, message = failed[int(verdict[rows[first_at[k]]])]
        rejected.add(reason, message, int(counts[k]) * weight)


def _layouts(cols: list[np.ndarray], recompute_fraction: float | None = None) -> Layouts:
    """Columns (tp, pp, dp, cp, ep, micro_batch, vpp, recompute code, sp, zero, rank order index); full
    recomputation covers `recompute_fraction` of the layers (the spec's pin; all of them by default)."""
    full = np.where(cols[7] == RECOMPUTE_CODES["full"], 1.0 if recompute_fraction is None else recompute_fraction,
                    0.0)
    return Layouts(tp=cols[0], pp=cols[1], dp=cols[2], cp=cols[3], ep=cols[4], micro_batch=cols[5],
                   vpp=cols[6], recompute=cols[7], full_share=full, sp=cols[8].astype(bool), zero=cols[9],
                   order=cols[10])


@dataclass
class Evaluation:
    """Feasible candidates with their costs (step and memory_total by candidate); once ranked, candidate i is row
    rank[i] of `layouts` (which stay in costing order: reordering all of them would cost more than the search
    reads)."""

    layouts: Layouts
    step: np.ndarray
    memory_total: np.ndarray
    placements: dict[tuple, Placement]
    options: dict = field(default_factory=dict)  # the collectives' options of its groups (steptime.group_columns)
    rank: np.ndarray | None = None

    def candidates(self, index: np.ndarray) -> Layouts:
        """The layouts of candidates `index`."""
        return self.layouts.take(index if self.rank is None else self.rank[index])


def _above(need: float, capacity: float) -> str:
    """`need` with as many decimals as it takes to read above `capacity` (80.04 of 80, not 80.0 of 80)."""
    for digits in (1, 2, 3):
        text = f"{need:.{digits}f}"
        if float(text) > capacity:
            return text
    return f"{need:.4f}"


def evaluate(spec: PlanSpec, pc: ParamCount, lay: Layouts, rejected: Rejections,
             twin: np.ndarray | None = None) -> Evaluation:
    """Memory first (cheap, vectorised over all), then step time for the layouts that fit, per placement. A row
    with `twin` set stands for itself and the same layout in the other rank order (enumerate_layouts)."""
    capacity = spec.cluster.gpu.memory_gib * GIB
    twin = np.zeros(len(lay), dtype=bool) if twin is None else twin
    total = memory_per_gpu(spec.model, spec.training, pc, lay).total
    fits = total <= capacity
    if not fits.all():
        # The example is the leanest layout that still does not fit: the most telling one.
        i = int(np.flatnonzero(~fits)[np.argmin(total[~fits])])
        rejected.add("out_of_memory", f"{label(lay, i)} needs {_above(total[i] / GIB, spec.cluster.gpu.memory_gib)} "
                                      f"GiB of {spec.cluster.gpu.memory_gib:g}", int((~fits).sum() + twin[~fits].sum()))
    both = np.flatnonzero(fits & twin)
    keep = np.concatenate([np.flatnonzero(fits), both])
    lay, total = lay.take(keep), total[keep]
    lay.order[len(keep) - len(both):] = RANK_ORDERS.index("tp-cp-pp-dp")
    shard_times, shard_of = _layer_times(spec, lay)
    keys, which = placement_keys(lay)
    counts = np.bincount(which, minlength=len(keys))
    placements: dict[tuple, Placement] = {}
    shaped: dict = {}
    for key, count in zip(keys, counts, strict=True):
        try:
            placements[key] = place(spec.cluster, *key[:5], RANK_ORDERS[key[5]], shaped)
        except PlacementRejected as exc:
            rejected.add(exc.reason, exc.message, int(count))
    placed = np.array([key in placements for key in keys], dtype=bool)
    idx = np.flatnonzero(placed[which])
    idx = idx[np.argsort(which[idx], kind="stable")]  # by placement: equal collectives sit together (cheaper)
    compact = np.cumsum(placed) - 1  # key index -> index among the placed keys
    options: dict = {}
    columns = group_columns(list(placements.values()), compact[which[idx]], detail=False, options=options)
    lay = lay.take(idx)  # the placed candidates, grouped by placement
    lt = take_times(shard_times, shard_of[idx])
    return Evaluation(lay, step_times(spec, pc, lay, columns, lt).step, total[idx], placements, options)


def placement_keys(lay: Layouts) -> tuple[list[tuple], np.ndarray]:
    """The distinct (tp, cp, dp, pp, ep, order) of the candidates in lexicographic order, and each candidate's
    index into them."""
    cols = [lay.tp, lay.cp, lay.dp, lay.pp, lay.ep, lay.order]
    first, which = _distinct(cols)
    return [tuple(int(c[i]) for c in cols) for i in first], which


def _layer_times(spec: PlanSpec, lay: Layouts) -> tuple[LayerTimes, np.ndarray]:
    """compute.layer_times of every distinct shard (TP, CP, EP, micro-batch, SP) of the candidates, on which
    alone they depend, and each candidate's index into them."""
    first, which = _distinct([lay.tp, lay.cp, lay.ep, lay.micro_batch, lay.sp.astype(np.int64)])
    one = lay.take(first)
    return layer_times(spec.model, spec.cluster.gpu, spec.training,
                       Shard(one.tp, one.cp, one.ep, one.micro_batch, one.sp)), which


def _distinct(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A row of each distinct combination of integer columns, in lexicographic order, and each row's index into
    them: one mixed-radix code per row, counted (few possible codes) or sorted."""
    if not len(cols[0]):
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    digits, spans = zip(*(_dense(c) for c in cols))
    if math.prod(spans) >= 2**62:  # too many combinations for one integer code
        _, first, which = np.unique(np.stack(digits, axis=1), axis=0, return_index=True, return_inverse=True)
        return first, which.reshape(-1)
    code = np.zeros(len(cols[0]), dtype=np.int64)
    for d, span in zip(digits, spans, strict=True):
        code = code * span + d
    codes = math.prod(spans)
    if codes > 4 * len(code) + 4096:
        _, first, which = np.unique(code, return_index=True, return_inverse=True)
        return first, which.reshape(-1)
    # Few possible codes (the usual case): count them instead of sorting.
    present = np.bincount(code, minlength=codes) > 0
    which = (np.cumsum(present) - 1)[code]
    first = np.empty(int(present.sum()), dtype=np.intp)
    first[which] = np.arange(len(code))  # one row of each (which one is immaterial: they agree on every column)
    return first, which


def _dense(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the column's distinct values, and how many there are."""
    low, span = int(col.min()), int(col.max() - col.min()) + 1
    if span > 4 * len(col) + 4096:  # sparse values: sort
        values, rank = np.unique(col, return_inverse=True)
        return rank.reshape(-1), len(values)
    shifted = col - low if low else col
    present = np.bincount(shifted, minlength=span) > 0
    return (np.cumsum(present) - 1)[shifted], int(present.sum())


def take_times(lt: LayerTimes, idx: np.ndarray) -> LayerTimes:
    return LayerTimes(**{k: tuple(g[idx] for g in v) if isinstance(v, tuple) else v[idx]
                         for k, v in lt.__dict__.items()})


def label(lay: Layouts, i: int) -> str:
    rc = RECOMPUTE[int(lay.recompute[i])]
    parts = [f"TP{lay.tp[i]}", f"PP{lay.pp[i]}", f"DP{lay.dp[i]}"]
    parts += [f"CP{lay.cp[i]}"] if lay.cp[i] > 1 else []
    parts += [f"EP{lay.ep[i]}"] if lay.ep[i] > 1 else []
    parts += [f"mb{lay.micro_batch[i]}"] + ([f"v{lay.vpp[i]}"] if lay.vpp[i] > 1 else [])
    share = float(lay.full_share[i])
    parts += [f"{rc} recompute" + (f" of {share:.0%} of layers" if rc == "full" and share < 1 else "")
              ] if rc != "none" else []
    parts += ["SP"] if lay.sp[i] else []
    parts += [f"ZeRO-{lay.zero[i]}"] if lay.zero[i] else []
    parts += ["PP inside DP"] if lay.order[i] == RANK_ORDERS.index("tp-cp-pp-dp") else []
    return " ".join(parts)


def search(spec: PlanSpec) -> tuple[Evaluation, Rejections, int, ParamCount]:
    """Run the whole search. Returns the feasible candidates ranked best first (step time, then memory
    headroom), the rejections, and how many layouts were considered."""
    rejected = Rejections(Counter(), {})
    pc = param_count(spec.model)
    lay, twin = enumerate_layouts(spec, rejected)
    considered = len(lay) + int(twin.sum()) + sum(rejected.counts.values())
    ev = evaluate(spec, pc, lay, rejected, twin)
    rank = _rank(ev.step, ev.memory_total)
    ev = Evaluation(ev.layouts, ev.step[rank], ev.memory_total[rank], ev.placements, ev.options, rank)
    return ev, rejected, considered, pc


def _rank(step: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Candidates best first: by step time to the nanosecond, then memory, then enumeration order (what
    np.lexsort((memory, round(step, 9))) gives). One sort of the step times; only equal times are sorted again."""
    key = np.round(step, 9)
    order = np.argsort(key)  # any order inside a run of equal times: the runs are sorted again below
    ranked = key[order]
    tie = np.flatnonzero(ranked[1:] == ranked[:-1])
    if tie.size:
        idx = np.union1d(tie, tie + 1)  # positions inside runs of equal times, each run contiguous
        rows = order[idx]
        order[idx] = rows[np.lexsort((rows, memory[rows], ranked[idx]))]
    return order


def estimate_layouts(spec: PlanSpec) -> int:
    """An upper bound on the layouts `search` will consider, counted from the axis options without costing
    any: what a caller sizes time limits from. Cheap (divisor counts only)."""
    total = 0
    for tp, pp, cp, dp, why in structures(spec):
        if why:
            total += 1
            continue
        inner = (len(ep_options(spec, tp * cp, dp)) * len(micro_batch_options(spec, dp))
                 * len(vpp_options(spec, pp)) * len(RECOMPUTE) * 2 * 4 * 2)
        total += min(inner, MAX_CANDIDATES)
    return max(1, total)
