"""Turn a finished search into the answer (docs/plan-spec.md): plain, JSON-native data, no numpy scalars."""
from __future__ import annotations

import math

import time
from dataclasses import asdict
from typing import Any

import numpy as np

from . import accuracy, collectives
from . import constants as C
from .compute import Shard, layer_times
from .memory import GIB, Layouts, MemoryBreakdown, memory_per_gpu
from .model import ParamCount, hardware_flops_per_step, model_flops_per_step
from .placement import Placement, placement_map
from .search import Evaluation, label, search
from .spec import RANK_ORDERS, RECOMPUTE, TOP, PlanSpec
from .steptime import Collective, StepTimes, group_columns, step_times

MAX_CHART_CANDIDATES = 500


def plan(spec: PlanSpec, top: int = TOP.default) -> dict[str, Any]:
    """Search every layout of `spec` and return the answer: ranked plans, rejections, chart data."""
    started = time.perf_counter()
    ev, rejected, considered, pc = search(spec)
    top = max(0, int(top))
    shown = np.arange(min(top, len(ev.step)))
    plans = plan_entries(spec, pc, ev, ev.candidates(shown))
    best_map = None
    if plans:
        lay = plans[0]["layout"]
        best_map = placement_map(spec.cluster, lay["tp"], lay["cp"], lay["dp"], lay["pp"], lay["ep"],
                                 lay["rank_order"])
    answer = {
        "spec": spec.to_dict(),
        "model": {"params": int(pc.total), "active_params": int(pc.active),
                  "flops_per_step": float(model_flops_per_step(spec.model, spec.training.global_batch)),
                  # the denominator of every plan's MFU and HFU
                  "utilization_peak_tflops": float(utilization_peak_tflops(spec)),
                  "tokens_per_step": int(spec.training.global_batch * spec.model.seq_len)},
        "searched": int(considered),
        "feasible": int(len(ev.step)),
        "rejected": {k: int(v) for k, v in rejected.counts.most_common()},
        "rejected_examples": {k: rejected.examples[k] for k, _ in rejected.counts.most_common()},
        "plans": plans,
        "candidates": chart_candidates(ev),
        "placement_map": best_map,
        "elapsed_s": round(time.perf_counter() - started, 4),
        "engine": {"version": C.ENGINE_VERSION,
                   "constants": {**C.as_dict(), **collectives_constants()}},
        # How far to trust the step times: the measured error on comparable published runs (planner/accuracy.py).
        "accuracy": accuracy.for_gpu(spec.cluster.gpu.name, spec.training.precision, gpu=asdict(spec.cluster.gpu)),
    }
    # ... and on the published runs of the training stack the request names, if any.
    if (stack := accuracy.for_stack(spec.training.framework)) is not None:
        answer["stack_accuracy"] = stack
        answer["accuracy"] = accuracy.with_stack(answer["accuracy"], stack)
    return answer


def collectives_constants() -> dict[str, float]:
    """Communication efficiencies from collectives.py, for the provenance block."""
    return {name.lower(): float(value) for name, value in vars(collectives).items()
            if name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)}


def layout_dict(lay: Layouts, i: int) -> dict[str, Any]:
    return {"tp": int(lay.tp[i]), "pp": int(lay.pp[i]), "dp": int(lay.dp[i]), "cp": int(lay.cp[i]),
            "ep": int(lay.ep[i]), "micro_batch": int(lay.micro_batch[i]), "vpp": int(lay.vpp[i]),
            "recompute": RECOMPUTE[int(lay.recompute[i])],
            "recompute_fraction": round(float(lay.full_share[i]), 6) if int(lay.recompute[i]) == 2 else None,
            "sequence_parallel": bool(lay.sp[i]),
            "zero": int(lay.zero[i]), "rank_order": RANK_ORDERS[int(lay.order[i])]}


def plan_entries(spec: PlanSpec, pc: ParamCount, ev: Evaluation, top: Layouts) -> list[dict[str, Any]]:
    """The answer's entries for the best candidates `top` (ranked), re-costed with the per-collective details
    the search does not keep: one vectorised costing of them all (per plan, the fixed cost of each vectorised
    call would cost more than the rest of the answer)."""
    if not len(top):
        return []
    keys = zip(top.tp.tolist(), top.cp.tolist(), top.dp.tolist(), top.pp.tolist(), top.ep.tolist(),
               top.order.tolist())
    placements = [ev.placements[key] for key in keys]
    lt = layer_times(spec.model, spec.cluster.gpu, spec.training, Shard(top.tp, top.cp, top.ep, top.micro_batch,
                                                                        top.sp))
    st = step_times(spec, pc, top, group_columns(placements, np.arange(len(top)), options=ev.options), lt)
    mem = memory_per_gpu(spec.model, spec.training, pc, top)
    return [plan_entry(spec, top, j, placements[j], st, mem) for j in range(len(top))]


def training_seconds(tokens: float, tokens_per_step: float, step_time_s: float) -> float:
    """Seconds to train `tokens`: whole optimizer steps of `tokens_per_step` (global batch × sequence length), each
    `step_time_s` long; the last step is a full one. Counted in integers where both are whole numbers (token
    counts are), so that float noise never adds or drops a step."""
    if float(tokens).is_integer() and float(tokens_per_step).is_integer():
        steps = -(-int(tokens) // int(tokens_per_step))  # ceil of an exact division
    else:
        steps = math.ceil(tokens / tokens_per_step)
    return steps * step_time_s  # steps × s per step


def utilization_peak_tflops(spec: PlanSpec) -> float:
    """The dense peak MFU and HFU are measured against (TFLOP/s per GPU): the training precision's, so FP8 runs
    against the FP8 peak (twice the 16-bit one on Hopper and Blackwell)."""
    gpu = spec.cluster.gpu
    return gpu.fp8_peak_tflops if spec.training.precision == "fp8" else gpu.peak_tflops


def plan_entry(spec: PlanSpec, top: Layouts, j: int, placement: Placement, st: StepTimes,
               mem: MemoryBreakdown) -> dict[str, Any]:
    """Everything about the candidate of rank j + 1: row j of `top`, its step times `st` (with the per-collective
    details) and its memory `mem` (plan_entries)."""
    one = top.take(np.array([j]))
    step = float(st.step[j])
    n_gpus, tr = spec.cluster.num_gpus, spec.training
    model_flops = model_flops_per_step(spec.model, tr.global_batch)
    hw_flops = hardware_flops_per_step(spec.model, tr.global_batch, RECOMPUTE[int(one.recompute[0])],
                                       float(one.full_share[0]))
    peak = utilization_peak_tflops(spec)
    tokens_per_s = tr.global_batch * spec.model.seq_len / step
    train_s = training_seconds(tr.tokens, tr.global_batch * spec.model.seq_len, step) if tr.tokens else None
    capacity = spec.cluster.gpu.memory_gib
    memory = {k: _r(getattr(mem, k)[j] / GIB) for k in ("weights", "gradients", "optimizer", "activations", "other")}
    total = float(mem.total[j] / GIB)
    return {
        "rank": j + 1,
        "layout": layout_dict(one, 0),
        "label": label(one, 0),
        "description": placement.describe(),
        "step_time_s": round(float(step), 9),
        "tokens_per_s": _r(tokens_per_s),
        "model_tflops_per_gpu": _r(model_flops / step / n_gpus / 1e12),
        "hardware_tflops_per_gpu": _r(hw_flops / step / n_gpus / 1e12),
        "mfu": _r(model_flops / step / n_gpus / (peak * 1e12)),
        "hfu": _r(hw_flops / step / n_gpus / (peak * 1e12)),
        "memory_gib": {**memory, "total": _r(total), "capacity": _r(capacity), "headroom": _r(capacity - total)},
        # Step time and its parts to the nanosecond, not 6 digits: the rounded parts must still sum to the step.
        "time_s": {k: round(float(v[j]), 9) for k, v in st.parts.items()},
        "comm": [_comm_entry(c, j, algorithm, by_fabric) for c, algorithm, by_fabric in st.collectives_of(j)],
        "placement": placement.as_dict(),
        "time_to_train_s": _r(train_s) if train_s is not None else None,
        "gpu_hours": _r(train_s * n_gpus / 3600.0) if train_s is not None else None,
    }


def _comm_entry(c: Collective, j: int, algorithm: str, by_fabric: dict[str, float]) -> dict[str, Any]:
    """Candidate j's part of collective `c`, which it runs with `algorithm`, taking `by_fabric` seconds on each
    fabric (StepTimes.collectives_of)."""
    return {"group": c.group, "collective": c.op, "over": c.over or c.group, "algorithm": algorithm,
            "fabric": _outermost(by_fabric),
            "bytes_per_call": _r(c.bytes_per_call[j]), "calls_per_step": _r(c.calls[j]),
            "bytes_per_step": _r(c.bytes_per_call[j] * c.calls[j]),
            "time_s": _r(c.time_s[j]), "exposed_s": _r(c.exposed_s[j]),
            "time_by_fabric_s": {f: _r(t) for f, t in by_fabric.items()}}


def _outermost(by_fabric: dict[str, float]) -> str:
    """The fabric a collective reaches furthest over: the scale-out one (InfiniBand, RoCE...) where its group spans
    NVLink domains, else NVLink. It had been whichever took the more time, so a DP reduce-scatter over 32 nodes read
    "nvlink" where its NVLink hops outlasted its InfiniBand ones; `time_by_fabric_s` splits the time."""
    if not by_fabric:
        return "none"
    outside = [f for f in by_fabric if f != "nvlink"]
    return max(outside, key=by_fabric.__getitem__) if outside else "nvlink"


def chart_candidates(ev: Evaluation) -> list[dict[str, Any]]:
    """The Pareto front of (step time, memory) plus an even sample of the rest, best first, for the chart."""
    n = len(ev.step)
    if n == 0:
        return []
    # Candidates are sorted by step time, so a point is on the front when it needs less memory than all
    # faster ones.
    running_min = np.minimum.accumulate(ev.memory_total)
    pareto = np.ones(n, dtype=bool)
    pareto[1:] = ev.memory_total[1:] < running_min[:-1]
    keep = set(np.flatnonzero(pareto)[:MAX_CHART_CANDIDATES].tolist())
    spare = MAX_CHART_CANDIDATES - len(keep)
    if spare > 0:
        keep |= set(np.linspace(0, n - 1, num=min(n, spare)).astype(int).tolist())
    shown = sorted(keep)
    lay = ev.candidates(np.array(shown))
    return [{"label": label(lay, j), "step_time_s": _r(ev.step[i]),
             "memory_gib": _r(ev.memory_total[i] / GIB), "pareto": bool(pareto[i])} for j, i in enumerate(shown)]


def _r(x: float) -> float:
    """A JSON-native float with 6 significant digits."""
    x = float(x)
    return float(f"{x:.6g}") if np.isfinite(x) else x
