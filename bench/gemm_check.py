"""The engine's GEMM model against NVIDIA's published GEMM microbenchmark: one transformer layer's twelve GEMMs.

Run: python bench/gemm_check.py

Source (kept out of every fit): Transformer Engine's GEMM profiling tutorial, NVIDIA/TransformerEngine
docs/examples/gemm_profiling/gemm_profiling.rst (commit 8f2e635, 2026), benchmarks/gemm/benchmark_gemm.py on a
model of hidden 4,096, intermediate 16,384 (a plain, ungated MLP), 32 heads, M = 31 x 512 = 15,872 tokens: the
QKV (4,096 -> 12,288), attention-output, MLP-up and MLP-down GEMMs, each forward (fprop), data gradient (dgrad)
and weight gradient (wgrad), in milliseconds per layer. "Autocast" quantises both operands of every call, as
training does without a weight cache; "pre-quantised" times the kernels alone.

Second source (kept out of every fit too): DeepGEMM's grouped FP8 GEMMs for MoE training on H800 (deepseek-ai/DeepGEMM
README, "Grouped GEMMs for MoE models (contiguous layout)", 2025), TFLOP/s of 1x128 block-scaled FP8 kernels at the
expert shapes of DeepSeek-V3 (K = 7,168 for the up projection, 2,048 for the down projection), against
compute.gemm_time's grouped GEMM at the same shapes.

The engine's side is compute.gemm_fwd_bwd on the catalog's GPU, with and without its sustained clock: the
microbenchmark runs one GPU for 100 iterations, far from the power-capped steady state of a training job, which
the catalog's sustained_clock stands for (mamf-finder's MSMF / MAMF, all GPUs of a node busy). The FP8 autocast
estimate adds FP8_CAST_BYTES of HBM traffic per element of both operands of every call (scan for the scale, cast,
write the transposed copy).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import compute  # noqa: E402
from planner import constants as C  # noqa: E402
from planner.catalog import load_catalog  # noqa: E402
from planner.spec import GPU_FIELDS, GPUSpec  # noqa: E402

TOKENS = 31 * 512
# (n, k) of the forward GEMMs, m = TOKENS: QKV, attention output, MLP up, MLP down.
SHAPES = ((12288, 4096), (4096, 4096), (16384, 4096), (4096, 16384))
# Per-layer GEMM milliseconds as published (gemm_profiling.rst): (mode, precision) -> ms.
MEASURED = {
    "H200 NVL": {("autocast", "bf16"): 32.014, ("autocast", "fp8 current"): 20.285,
                 ("autocast", "fp8 delayed"): 18.978, ("autocast", "fp8 block"): 22.882,
                 ("pre-quantised", "bf16"): 31.968, ("pre-quantised", "fp8 current"): 16.785},
    "B300": {("autocast", "bf16"): 12.758, ("autocast", "fp8 current"): 9.147, ("autocast", "fp8 delayed"): 7.802,
             ("autocast", "mxfp8"): 8.984, ("pre-quantised", "bf16"): 13.102,
             ("pre-quantised", "fp8 current"): 6.812, ("pre-quantised", "mxfp8"): 7.161},
}


# DeepGEMM, contiguous layout: (groups, m per group, n, k) -> TFLOP/s on H800.
DEEPGEMM = {(4, 8192, 4096, 7168): 1297, (4, 8192, 7168, 2048): 1099, (8, 4096, 4096, 7168): 1288,
            (8, 4096, 7168, 2048): 1093}


def gpu(name: str, catalog=None) -> GPUSpec:
    """The catalog GPU `name`, its empty fields at the spec's defaults (`catalog`: one already loaded)."""
    return GPUSpec(**{**{f.name: f.default for f in GPU_FIELDS}, **(catalog or load_catalog())["gpu"][name]})


def layer_ms(g: GPUSpec, fp8: bool, cast_bytes: float = 0.0) -> float:
    """One layer's twelve GEMMs, plus `cast_bytes` per element of both operands of each call."""
    total = 0.0
    for n, k in SHAPES:
        fwd, bwd = compute.gemm_fwd_bwd(TOKENS, n, k, g, fp8)
        x, w, dy = TOKENS * k, k * n, TOKENS * n
        quantised = (x + w) + (dy + w) + (x + dy)  # fprop (x, w), dgrad (dy, w), wgrad (x, dy)
        total += float(fwd + bwd) + cast_bytes * quantised / compute.hbm_bytes_per_s(g)
    return total * 1e3


def grouped_tflops(g: GPUSpec, groups: int, m: int, n: int, k: int) -> float:
    """The engine's grouped FP8 GEMM rate, TFLOP/s."""
    return 2.0 * groups * m * n * k / float(compute.gemm_time(m, n, k, g, True, groups)) / 1e12


def main() -> None:
    print(f"{'GPU':<9} {'mode':<14} {'precision':<12} {'published ms':>12} {'engine ms':>10} {'error':>7} "
          f"{'engine, sustained clock':>24}")
    for name, rows in MEASURED.items():
        hot = gpu(name)
        cold = replace(hot, sustained_clock=1.0)
        for (mode, precision), published in rows.items():
            fp8 = precision != "bf16"
            cast = C.FP8_CAST_BYTES if fp8 and mode == "autocast" else 0.0
            if precision in ("fp8 block", "mxfp8") and mode == "autocast":
                cast += C.FP8_ROWWISE_EXTRA_BYTES  # a second quantisation along the other axis
            engine, steady = layer_ms(cold, fp8, cast), layer_ms(hot, fp8, cast)
            print(f"{name:<9} {mode:<14} {precision:<12} {published:12.3f} {engine:10.3f} "
                  f"{engine / published - 1:+7.1%} {steady:24.3f}")
    cold = replace(gpu("H800 SXM5 80GB"), sustained_clock=1.0)
    print(f"\nDeepGEMM grouped FP8 GEMMs on H800 (TFLOP/s; error is the engine's time against the published)")
    print(f"{'groups':>6} {'m':>6} {'n':>6} {'k':>6} {'published':>10} {'engine':>8} {'error':>7}")
    for (groups, m, n, k), published in DEEPGEMM.items():
        engine = grouped_tflops(cold, groups, m, n, k)
        print(f"{groups:6d} {m:6d} {n:6d} {k:6d} {published:10d} {engine:8.0f} {published / engine - 1:+7.1%}")


if __name__ == "__main__":
    main()
