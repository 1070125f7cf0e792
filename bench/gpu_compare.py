"""The engine beside what bench/gpu_probe.py measured on one real GPU: HBM, kernel launch, GEMMs, the clock under the
power cap, attention, and whole training steps with their memory.

Run: python bench/gpu_compare.py bench/results/gpu_probe_h200.json [--profile bench/results/gpu_profile_h200.json]
                                                                   [--json]
     python bench/gpu_compare.py PROBE.json [PROBE.json ...] --constants [--gpu "CATALOG NAME"]
                                     (the GPU constants the probes measured, as a custom GPU's fields for a plan spec)

Nothing here is fitted: the catalog's constants come from their own public sources (fixtures/gpus.json), and this
prints how far each lands from one GPU measured here. Microbenchmarks run for seconds at the boost clock, so the
GEMM and attention rows show the engine both at its catalog `sustained_clock` (a power-capped training job) and at
1.0 (a short burst); the `sustained` row measures the clock itself.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gemm_check import gpu as catalog_gpu_spec  # noqa: E402
from planner import compute, parse_spec, plan  # noqa: E402
from planner import constants as C  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner.spec import GPUSpec  # noqa: E402

# The catalog part each probed device is (torch's device name -> catalog name).
DEVICES = {"NVIDIA H200": "H200 SXM 141GB", "NVIDIA H100 80GB HBM3": "H100 SXM5 80GB"}
FABRIC = "NDR InfiniBand rail-optimized (DGX SuperPOD)"
ATTENTION_PARTS = ("attention", "attention_long", "attention_short")  # gpu_probe.py's attention sweeps


def catalog_gpu(device: str, name: str | None = None, catalog=None) -> tuple[str, GPUSpec]:
    """The catalog part a probed device is: `name` where given (--gpu), else the known part for torch's name
    (`catalog`: one already loaded)."""
    catalog = catalog or load_catalog()
    name = name or DEVICES.get(device)
    if name is None:
        raise SystemExit(f"gpu_compare: no catalog part is known for the probed device {device!r} (known: "
                         f"{', '.join(DEVICES)}); name one with --gpu")
    if name not in catalog["gpu"]:
        raise SystemExit(f"gpu_compare: --gpu: no catalog GPU is named {name!r}; `python -m planner catalog` lists "
                         f"them")
    return name, catalog_gpu_spec(name, catalog)


def one_gpu_shard(micro_batch: int) -> compute.Shard:
    """compute's split of a layer's work for one candidate on one GPU: no TP, CP, EP or sequence parallelism."""
    return compute.Shard(tp=np.array([1.0]), cp=np.array([1.0]), ep=np.array([1.0]),
                         micro_batch=np.array([float(micro_batch)]), sp=np.array([False]))


def square_tflops(probe: dict) -> float | None:
    """The rate of the probe's short burst of 8192^3 BF16 products (gemm part, "square"), if it has one."""
    gemm = probe.get("gemm")
    square = [r["tflops"] for r in (gemm.get("bf16", []) if isinstance(gemm, dict) else [])
              if r.get("name") == "square"]
    return square[0] if square else None


def merge(probes: list[dict]) -> dict:
    """One probe from several runs on the same device: each part from the first file that has it."""
    merged: dict = {}
    for probe in probes:
        for key, value in probe.items():
            merged.setdefault(key, value)
    return merged


def measured_constants(probe: dict, gpu_name: str | None = None) -> dict:
    """The per-GPU constants of the engine's catalog (fixtures/gpus.json) that the probe measured, in the spec's
    field names, each beside the catalog's value: GEMM efficiencies from the fastest product of each precision
    (the MAMF convention), the sustained clock from the back-to-back run over the same product's burst, HBM
    efficiency from the copy, and the attention efficiencies from each kernel's forward and backward at head dim 128
    and the engine's reference length (FLASH_REFERENCE_LENGTH)."""
    name, gpu = catalog_gpu(probe["device"]["name"], gpu_name)
    gemms = (probe.get("gemm") or {}) if isinstance(probe.get("gemm"), dict) else {}
    k_rows = [r for r in probe.get("gemm_k") or [] if isinstance(r, dict)]
    bf16 = [r["tflops"] for r in gemms.get("bf16", [])] + [r["bf16_tflops"] for r in k_rows if "bf16_tflops" in r]
    fp8 = [r["tflops"] for r in gemms.get("fp8", [])] + [r["fp8_tflops"] for r in k_rows if "fp8_tflops" in r]
    square = square_tflops(probe)
    sustained = (probe.get("sustained") or {}).get("sustained_tflops")
    copy = (probe.get("hbm") or {}).get("gbytes_per_s_read_plus_write")
    attention = {}
    for r in [r for part in ATTENTION_PARTS for r in probe.get(part) or []]:
        if "error" not in r and r["head_dim"] == 128 and r["seq_len"] == C.FLASH_REFERENCE_LENGTH:
            attention.setdefault(r["backend"], r["fwd_bwd_tflops"])
    measured = {
        "gemm_efficiency": max(bf16) / gpu.peak_tflops if bf16 else None,
        "fp8_gemm_efficiency": max(fp8) / gpu.fp8_peak_tflops if fp8 and gpu.fp8_peak_tflops else None,
        "sustained_clock": sustained / square if sustained and square else None,
        "hbm_efficiency": copy / gpu.memory_gbytes_per_s if copy else None,
        "attention_efficiency": (attention["FLASH_ATTENTION"] / gpu.peak_tflops
                                 if "FLASH_ATTENTION" in attention else None),
        "cudnn_attention_efficiency": (attention["CUDNN_ATTENTION"] / gpu.peak_tflops
                                       if "CUDNN_ATTENTION" in attention else None),
    }
    return {"catalog_gpu": name, "device": probe["device"]["name"], "date": probe.get("date"),
            "measured": {k: round(v, 3) for k, v in measured.items() if v is not None},
            "catalog": {k: getattr(gpu, k) for k, v in measured.items() if v is not None}}


def pct(engine: float, measured: float) -> str:
    return f"{(engine / measured - 1) * 100:+.1f}%"


def _engine_tflops(r: dict, gpu: GPUSpec, fp8: bool) -> float:
    return 2 * r["m"] * r["n"] * r["k"] / float(compute.gemm_time(r["m"], r["n"], r["k"], gpu, fp8)) / 1e12


def _fused(forward: float) -> tuple[float, float]:
    return forward, forward * C.ELEMENTWISE_BACKWARD_FACTOR


# The bytes per element (forward, backward) the engine counts for each op gpu_probe.py's "eager" part times
# (compute.elementwise_bytes and constants.py): the eager chains' own constants, and PyTorch's single-kernel
# LayerNorm, GeLU and residual add as the fused kernels' 2-byte reads and writes.
ENGINE_BYTES = {
    "rmsnorm_eager": _fused(C.EAGER_RMSNORM_BYTES),
    "layernorm": _fused(4.0),
    "residual_add": _fused(6.0),
    "rotary_eager": _fused(C.EAGER_ROTARY_BYTES),
    "swiglu_eager": _fused(C.EAGER_SWIGLU_BYTES),
    "gelu": _fused(4.0),
    "cross_entropy_eager": C.CROSS_ENTROPY_TRAFFIC["eager"],
}


def one_gpu_cluster(gpu_name: str) -> dict:
    """A cluster of the one probed GPU (the node and fabric carry no traffic)."""
    return {"num_gpus": 1, "gpu": gpu_name, "fabric": FABRIC,
            "node": {"name": "one GPU", "gpus": 1, "nvlink_domain_gpus": 1, "nvlink_gbytes_per_s": 900, "nics": 1,
                     "nic_gbits_per_s": 400}}


def step_spec(row: dict, gpu_name: str) -> dict:
    """The plan spec of one measured training step: its model, batch and kernels, on one GPU, layout pinned."""
    c = row["config"]
    llama = c["style"] == "llama"
    return {
        "model": {"name": c["name"], "layers": c["layers"], "hidden": c["hidden"], "heads": c["heads"],
                  "kv_heads": c["kv_heads"], "ffn_hidden": c["ffn_hidden"], "gated_mlp": llama, "vocab": c["vocab"],
                  "seq_len": c["seq_len"], "tied_embeddings": not llama, "dropout": False},
        "training": {"global_batch": c["micro_batch"] * c["accumulation"], "precision": "bf16",
                     "elementwise": "eager", "projections": "separate" if llama else "fused",
                     "cross_entropy": "eager", "checkpoint_impl": "pytorch",
                     "attention": "cudnn" if c["attention"] == "CUDNN_ATTENTION" else "flash"},
        "cluster": one_gpu_cluster(gpu_name),
        "layout": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "micro_batch": c["micro_batch"], "vpp": 1,
                   "recompute": "none", "sequence_parallel": False, "zero": 0},
    }


def compare(probe: dict, gpu_name: str | None = None) -> dict:
    catalog = load_catalog()
    gpu_name, gpu = catalog_gpu(probe["device"]["name"], gpu_name, catalog)
    burst = replace(gpu, sustained_clock=1.0)
    sustained_rate, burst_rate = (compute.achievable_gemm_flops(g) / 1e12 for g in (gpu, burst))
    out: dict = {"device": probe["device"], "catalog_gpu": gpu_name, "torch": probe.get("torch"),
                 "date": probe.get("date")}
    if "gbytes_per_s_read_plus_write" in probe.get("hbm", {}):
        measured = probe["hbm"]["gbytes_per_s_read_plus_write"]
        out["hbm"] = {"measured_gbytes_per_s": measured, "engine_gbytes_per_s": compute.hbm_bytes_per_s(gpu) / 1e9,
                      "measured_efficiency": measured / gpu.memory_gbytes_per_s,
                      "catalog_efficiency": gpu.hbm_efficiency}
    if "us_per_kernel" in probe.get("launch", {}):
        out["launch"] = {"measured_us": probe["launch"]["us_per_kernel"], "engine_us": gpu.kernel_overhead_us}
    gemms = []
    for precision, rows in (probe.get("gemm") or {}).items():
        for r in rows if isinstance(rows, list) else []:
            fp8 = precision == "fp8"
            engine_burst = _engine_tflops(r, burst, fp8)
            gemms.append({"precision": precision, "name": r["name"], "m": r["m"], "n": r["n"], "k": r["k"],
                          "measured_tflops": r["tflops"], "engine_tflops_burst": engine_burst,
                          "engine_tflops_sustained": _engine_tflops(r, gpu, fp8),
                          # engine time over measured time: the same FLOPs at each rate
                          "burst_err": r["tflops"] / engine_burst - 1})
    out["gemm"] = gemms
    s = probe.get("sustained") or {}
    square = square_tflops(probe)
    if "sustained_tflops" in s and square:
        # The burst: the same product timed 20 times after 3 warm-ups (tens of milliseconds, before the board
        # reaches its power cap), as mamf-finder's MAMF; the sustained rate: the back-to-back run's second half.
        out["sustained"] = {
            "burst_tflops": square, "sustained_tflops": s["sustained_tflops"],
            "rate_ratio": s["sustained_tflops"] / square, "catalog_sustained_clock": gpu.sustained_clock,
            "sustained_sm_clock_mhz": s.get("sustained_sm_clock_mhz"), "max_sm_clock_mhz": probe["device"].get(
                "max_sm_clock_mhz"), "sustained_power_w": s.get("sustained_power_w"),
            "power_limit_w": probe["device"].get("power_limit_w"),
            "engine_sustained_tflops": sustained_rate, "seconds": s["seconds"]}
    out["gemm_k"] = [{**r, "engine_bf16_tflops": _engine_tflops(r, burst, False),
                      "engine_fp8_tflops": _engine_tflops(r, burst, True) if "fp8_tflops" in r else None}
                     for r in probe.get("gemm_k") or [] if isinstance(r, dict) and "bf16_tflops" in r]
    rate = (probe.get("hbm") or {}).get("gbytes_per_s_read_plus_write")
    out["eager"] = [{"op": r["op"], "width": r["width"],
                     "measured_bytes": (r["fwd_s"] * rate * 1e9 / r["elements"],
                                        (r["fwd_bwd_s"] - r["fwd_s"]) * rate * 1e9 / r["elements"]),
                     "engine_bytes": ENGINE_BYTES[r["op"]]}
                    for r in probe.get("eager") or [] if rate and isinstance(r, dict) and r.get("op") in ENGINE_BYTES]
    out["fp8_cast"] = fp8_casts(probe.get("fp8_cast") or {}, rate)
    out["duty"] = [{**{k: r.get(k) for k in ("gemm_share", "gemm_tflops", "sm_clock_mhz", "power_w")},
                    "engine_tflops": sustained_rate, "burst_engine_tflops": burst_rate}
                   for r in probe.get("duty") or [] if isinstance(r, dict) and r.get("gemm_tflops")]
    attn = []
    for r in [r for part in ATTENTION_PARTS for r in probe.get(part) or []]:
        if "error" in r:
            attn.append({**{k: r[k] for k in ("backend", "head_dim", "seq_len")}, "error": r["error"]})
            continue
        kernel = "cudnn" if r["backend"] == "CUDNN_ATTENTION" else "flash"
        # The same attention through the spec parser (defaults from the engine's field tables), on one GPU.
        spec = parse_spec({
            "model": {"name": "attention probe", "layers": 1, "hidden": r["heads"] * r["head_dim"],
                      "heads": r["heads"], "vocab": 1, "seq_len": r["seq_len"], "dropout": False},
            "training": {"global_batch": r["batch"], "attention": kernel},
            "cluster": one_gpu_cluster(gpu_name)}, catalog)
        fwd, bwd = (float(x[0]) for x in compute.attention_times(spec.model, burst, spec.training,
                                                                   one_gpu_shard(r["batch"])))
        measured_bwd = r["fwd_bwd_s"] - r["fwd_s"]
        attn.append({"backend": r["backend"], "head_dim": r["head_dim"], "seq_len": r["seq_len"],
                     "measured_fwd_tflops": r["fwd_tflops"], "measured_bwd_tflops": r["bwd_tflops"],
                     "measured_fwd_bwd_tflops": r["fwd_bwd_tflops"],
                     "fwd_err_burst": fwd / r["fwd_s"] - 1, "fwd_bwd_err_burst": (fwd + bwd) / r["fwd_bwd_s"] - 1,
                     "bwd_over_fwd": measured_bwd / r["fwd_s"]})
    out["attention"] = attn
    steps = []
    for r in probe.get("steps") or []:
        if not isinstance(r, dict) or "step_s" not in r:
            continue
        spec = parse_spec(step_spec(r, gpu_name), catalog)
        answer = plan(spec, top=1)
        row = {"name": r["config"]["name"], "measured_s": r["step_s"], "sm_clock_mhz": r.get("sm_clock_mhz"),
               "power_w": r.get("power_w"), "measured_peak_allocated_gib": r.get("peak_allocated_gib"),
               "measured_peak_reserved_gib": r.get("peak_reserved_gib")}
        if answer["plans"]:
            best = answer["plans"][0]
            row.update({"engine_s": best["step_time_s"], "err": best["step_time_s"] / r["step_s"] - 1,
                        "engine_memory_gib": best["memory_gib"]["total"], "engine_time_s": best["time_s"]})
        else:
            row["engine_rejected"] = answer.get("rejected")
        steps.append(row)
    out["steps"] = steps
    return out


# What the engine charges per GEMM-input element for each cast gpu_probe.py's fp8_cast part times (compute.
# elementwise_bytes): in a fused stack (here: compiled) a cast costs FP8_CAST_BYTES_FUSED beyond its producer; a
# stored tensor's whole-tensor cast with its transposed copy FP8_CAST_BYTES; rowwise's column-wise cast
# FP8_ROWWISE_EXTRA_BYTES beyond the transposed copy (1 byte) it replaces.
ENGINE_CAST_BYTES = {"produce+tensorwise+transposed": C.FP8_CAST_BYTES_FUSED,
                     "produce+given_scale+transposed": C.FP8_CAST_BYTES_FUSED,
                     "produce+rowwise": C.FP8_CAST_BYTES_FUSED,
                     "stored:tensorwise+transposed": C.FP8_CAST_BYTES,
                     "stored:colwise+transposed": C.FP8_ROWWISE_EXTRA_BYTES + 1.0,
                     "stored:grad_e5m2+transposed": C.FP8_CAST_BYTES}
REFERENCE_CAST = "stored:tensorwise+transposed"


def fp8_casts(part: dict, rate: float | None) -> list[dict]:
    """Each timed cast in HBM bytes per element at the measured copy rate (beyond its producer for the produce+
    variants), and the same scaled so that the stored whole-tensor cast of the same producer's output is the engine's
    FP8_CAST_BYTES: element-wise kernels run below the copy rate, so the engine's byte counts compare with the
    second figure."""
    if not rate:
        return []
    out = []
    for mode, rows in part.items():
        if not isinstance(rows, list):
            continue
        by = {(r["producer"], r["width"], r["variant"]): r for r in rows if isinstance(r, dict) and "seconds" in r}
        for (producer, width, variant), r in by.items():
            if variant not in ENGINE_CAST_BYTES:
                continue
            base = by.get((producer, width, "produce")) if variant.startswith("produce+") else None
            ref = by.get((producer, width, REFERENCE_CAST))
            if (variant.startswith("produce+") and base is None) or ref is None:
                continue
            seconds = r["seconds"] - (base["seconds"] if base else 0.0)
            measured = seconds * rate * 1e9 / r["elements"]
            out.append({"mode": mode, "producer": producer, "width": width, "variant": variant,
                        "measured_bytes": measured,
                        "scaled_bytes": seconds / ref["seconds"] * C.FP8_CAST_BYTES,
                        # without compilation the engine counts every cast whole (elementwise "eager")
                        "engine_bytes": C.FP8_CAST_BYTES if mode == "eager" and base else ENGINE_CAST_BYTES[variant]})
    return out


def breakdown(probe_step: dict, profiled: dict, gpu_name: str, catalog) -> dict:
    """Where one step's GPU time went, by kind of kernel (gpu_probe.py's profile of the same configuration), beside
    the engine's seconds for the same kinds: GEMMs (the layers' and the output layer's, with the layers' launch
    costs), the attention core, memory-bound work (element-wise chains and the loss) and the optimizer."""
    spec = parse_spec(step_spec(probe_step, gpu_name), catalog)
    m, training, gpu = spec.model, spec.training, spec.cluster.gpu
    c = probe_step["config"]
    shard = one_gpu_shard(c["micro_batch"])
    passes = m.layers * c["accumulation"]
    lt = compute.layer_times(m, gpu, training, shard)
    attn_f, attn_b = compute.attention_times(m, gpu, training, shard)
    tokens = c["micro_batch"] * m.seq_len
    elementwise = (1.0 + C.ELEMENTWISE_BACKWARD_FACTOR) * float(
        compute.elementwise_bytes(m, training, shard)[0]) * tokens / compute.hbm_bytes_per_s(gpu)
    out_f, out_b = compute.gemm_fwd_bwd(tokens, m.vocab, m.hidden, gpu, False)
    output_gemm = float(out_f + out_b) * c["accumulation"]
    logits = float(lt.logits_fwd[0] + lt.logits_bwd[0]) * c["accumulation"]
    layer = float(lt.fwd[0] + lt.bwd[0]) * passes
    attention = float(attn_f[0] + attn_b[0]) * passes
    answer = plan(spec, top=1)["plans"][0]
    engine = {"gemm": layer - attention - elementwise * passes + output_gemm, "attention": attention,
              "memory-bound": elementwise * passes + logits - output_gemm,
              "optimizer": answer["time_s"].get("optimizer", 0.0)}
    measured = {kind: v["s"] for kind, v in profiled["kinds"].items()}
    return {"name": c["name"], "engine": engine, "measured": measured}


def print_report(c: dict) -> None:
    d = c["device"]
    print(f"{d['name']} ({d.get('sm_count')} SMs, {d.get('memory_gib', 0):.0f} GiB, power limit "
          f"{d.get('power_limit_w')} W, max SM clock {d.get('max_sm_clock_mhz')} MHz, driver {d.get('driver')}), "
          f"torch {c['torch']}, probed {c['date']}; catalog part: {c['catalog_gpu']}")
    if "hbm" in c:
        h = c["hbm"]
        print(f"\nHBM copy: {h['measured_gbytes_per_s']:.0f} GB/s read+write = {h['measured_efficiency']:.3f} of the "
              f"datasheet; engine {h['engine_gbytes_per_s']:.0f} GB/s (hbm_efficiency {h['catalog_efficiency']})")
    if "launch" in c:
        print(f"Kernel launch from eager Python: {c['launch']['measured_us']:.1f} us per kernel; "
              f"engine kernel_overhead_us {c['launch']['engine_us']}")
    if c["gemm"]:
        print(f"\n{'GEMM':<22} {'m':>6} {'n':>7} {'k':>6} {'measured':>9} {'engine@1.0':>11} {'err':>7} "
              f"{'engine@sus':>11}   (TFLOP/s)")
        for g in c["gemm"]:
            print(f"{g['precision'] + ' ' + g['name']:<22} {g['m']:>6} {g['n']:>7} {g['k']:>6} "
                  f"{g['measured_tflops']:>9.0f} {g['engine_tflops_burst']:>11.0f} {g['burst_err'] * 100:>+6.1f}% "
                  f"{g['engine_tflops_sustained']:>11.0f}")
        print("  err: engine time at the boost clock against the measured time (negative = engine too fast)")
    if "sustained" in c:
        s = c["sustained"]
        print(f"\n8192^3 BF16 back to back for {s['seconds']:.0f} s: {s['sustained_tflops']:.0f} TFLOP/s over its "
              f"second half, at {s['sustained_sm_clock_mhz']:.0f} MHz (max {s['max_sm_clock_mhz']}) and "
              f"{s['sustained_power_w']:.0f} W of {s['power_limit_w']:.0f}; {s['rate_ratio']:.3f} of the "
              f"{s['burst_tflops']:.0f} TFLOP/s burst (catalog sustained_clock {s['catalog_sustained_clock']}); engine "
              f"{s['engine_sustained_tflops']:.0f} TFLOP/s "
              f"({pct(s['engine_sustained_tflops'], s['sustained_tflops'])})")
    if c["duty"]:
        d0 = c["duty"][0]
        print(f"\n8192^3 BF16 GEMMs between copies, by their share of the time: TFLOP/s, SM clock, power (the engine "
              f"counts {d0['engine_tflops']:.0f} at every share, {d0['burst_engine_tflops']:.0f} without the sustained "
              f"clock)")
        for r in c["duty"]:
            print(f"  share {r['gemm_share']:.2f}: {r['gemm_tflops']:>5.0f} TFLOP/s at {r['sm_clock_mhz']:>6.0f} MHz, "
                  f"{r['power_w']:>4.0f} W")
    if c["gemm_k"]:
        print(f"\n{'GEMM by reduction length':<26} {'bf16':>6} {'engine':>7} {'fp8':>6} {'engine':>7}   "
              f"(TFLOP/s, engine at the boost clock)")
        for r in c["gemm_k"]:
            fp8 = (f"{r['fp8_tflops']:>6.0f} {r['engine_fp8_tflops']:>7.0f}" if r.get("engine_fp8_tflops") else "")
            print(f"  m {r['m']:>6} n {r['n']:>6} k {r['k']:>6} {r['bf16_tflops']:>6.0f} "
                  f"{r['engine_bf16_tflops']:>7.0f} {fp8}")
    if c["eager"]:
        print(f"\n{'memory-bound op':<22} {'width':>7} {'fwd':>6} {'engine':>7} {'bwd':>6} {'engine':>7}   (bytes per "
              f"element at the measured copy rate)")
        for r in c["eager"]:
            (mf, mb), (ef, eb) = r["measured_bytes"], r["engine_bytes"]
            print(f"  {r['op']:<20} {r['width']:>7} {mf:>6.1f} {ef:>7.1f} {mb:>6.1f} {eb:>7.1f}")
    if c["fp8_cast"]:
        print(f"\n{'FP8 cast':<8} {'producer':<8} {'width':>6} {'variant':<31} {'measured':>8} {'scaled':>7} "
              f"{'engine':>7}   (bytes per element: at the copy rate, and scaled so that the stored whole-tensor "
              f"cast is {C.FP8_CAST_BYTES:g})")
        for r in c["fp8_cast"]:
            print(f"{r['mode']:<8} {r['producer']:<8} {r['width']:>6} {r['variant']:<31} {r['measured_bytes']:>8.1f} "
                  f"{r['scaled_bytes']:>7.1f} {r['engine_bytes']:>7.1f}")
    if c["attention"]:
        print(f"\n{'attention':<18} {'d':>4} {'seq':>6} {'fwd':>6} {'bwd':>6} {'f+b':>6} {'bwd/fwd':>8} "
              f"{'fwd err':>8} {'f+b err':>8}   (TFLOP/s; err = engine at 1.0 clock)")
        for a in c["attention"]:
            if "error" in a:
                print(f"{a['backend']:<18} {a['head_dim']:>4} {a['seq_len']:>6}  {a['error'][:70]}")
                continue
            print(f"{a['backend']:<18} {a['head_dim']:>4} {a['seq_len']:>6} {a['measured_fwd_tflops']:>6.0f} "
                  f"{a['measured_bwd_tflops']:>6.0f} {a['measured_fwd_bwd_tflops']:>6.0f} {a['bwd_over_fwd']:>8.2f} "
                  f"{a['fwd_err_burst'] * 100:>+7.1f}% {a['fwd_bwd_err_burst'] * 100:>+7.1f}%")
    if c["steps"]:
        print(f"\n{'training step (eager PyTorch, 1 GPU)':<58} {'measured':>9} {'engine':>8} {'err':>7} {'MHz':>5} "
              f"{'W':>4} {'alloc':>6} {'resv':>6} {'engine':>7}")
        for s in c["steps"]:
            if "engine_s" not in s:
                print(f"{s['name']:<58} {s['measured_s']:>9.3f}  rejected: {s.get('engine_rejected')}")
                continue
            print(f"{s['name']:<58} {s['measured_s']:>9.3f} {s['engine_s']:>8.3f} {s['err'] * 100:>+6.1f}% "
                  f"{s.get('sm_clock_mhz') or 0:>5.0f} {s.get('power_w') or 0:>4.0f} "
                  f"{s.get('measured_peak_allocated_gib') or 0:>6.1f} {s.get('measured_peak_reserved_gib') or 0:>6.1f} "
                  f"{s['engine_memory_gib']:>7.1f}")
        for b in c.get("breakdown", []):
            print(f"  {b['name']}: " + ", ".join(
                f"{kind} {b['measured'].get(kind, 0):.3f} / {b['engine'][kind]:.3f}"
                for kind in ("gemm", "attention", "memory-bound", "optimizer")) + "  (profiled / engine, s)")
        print("  seconds per optimizer step (median of the timed steps); err: the engine against it (negative = engine "
              "too fast);\n  MHz and W: median SM clock and board power NVML read during the steps; alloc and resv: "
              "peak GiB allocated and reserved by PyTorch's allocator, against the engine's total")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("probe", nargs="+", help="JSON files written by bench/gpu_probe.py on one device (each part is "
                                            "taken from the first file that has it)")
    ap.add_argument("--profile", help="a JSON file written by bench/gpu_probe.py --only profile: adds each profiled "
                                      "step's GPU time by kind of kernel beside the engine's")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    ap.add_argument("--constants", action="store_true",
                    help="print the GPU constants the probes measured, as a plan spec's custom GPU fields, beside the "
                         "catalog's")
    ap.add_argument("--gpu", help="the catalog GPU the probed device is, where its name is not known to this script")
    args = ap.parse_args(argv)
    probes = []
    for path in args.probe:
        try:
            probe = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"gpu_compare: cannot read {path}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(probe, dict) or probe.get("smoke") or "device" not in probe:
            print(f"gpu_compare: {path} is a --smoke run or no probe (no GPU measured); nothing to compare",
                  file=sys.stderr)
            return 2
        probes.append(probe)
    if len({p["device"]["name"] for p in probes}) > 1:
        print("gpu_compare: the probe files come from different devices; give one device's files", file=sys.stderr)
        return 2
    probe = merge(probes)
    if args.constants:
        print(json.dumps(measured_constants(probe, args.gpu), indent=1))
        return 0
    result = compare(probe, args.gpu)
    if args.profile:
        try:
            profiled = json.loads(Path(args.profile).read_text())["profile"]
        except (OSError, ValueError, KeyError) as exc:
            print(f"gpu_compare: cannot read a profile from {args.profile}: {exc}", file=sys.stderr)
            return 2
        steps = {json.dumps(s["config"], sort_keys=True): s for s in probe["steps"]}
        catalog = load_catalog()
        result["breakdown"] = [breakdown(steps[key], p, result["catalog_gpu"], catalog) for p in profiled
                               if (key := json.dumps(p["config"], sort_keys=True)) in steps]
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
