"""Measure, on one real GPU, the physical constants the engine's compute model stands on, and whole training steps.

Run (needs PyTorch and a CUDA GPU; nothing else in this repository needs either):
    python bench/gpu_probe.py --out bench/results/gpu_probe_<gpu>.json
    python bench/gpu_probe.py --smoke        # tiny shapes on the CPU: checks the script, measures nothing

Then `python bench/gpu_compare.py bench/results/gpu_probe_<gpu>.json` sets the engine's predictions beside each
figure. The results are an outside check: no constant is fitted to them.

What it measures, each timed with CUDA events (median of the timed repeats, after warm-ups):
- hbm: a 4 GiB device-to-device copy, bytes read plus written per second (the engine's hbm_efficiency x datasheet).
- launch: back-to-back tiny kernels from Python, seconds per kernel (the engine's kernel_overhead_us).
- gemm_bf16 / gemm_fp8: torch.matmul and torch._scaled_mm (per-tensor scales, e4m3, bf16 output) on a square
  8192^3 product and on one Llama-3-8B-shaped layer's GEMMs at 16,384 tokens (the engine's compute.gemm_time).
- sustained: the 8192^3 BF16 product run back to back for SUSTAIN_S seconds, its rate and the SM clock and board
  power each second (the engine's sustained_clock: the clock under the power cap, against the boost burst).
- attention: causal SDPA, FlashAttention-2 and cuDNN back ends, head dim 128 (and 64), 16,384 tokens a call, at
  1K-16K tokens per sequence, forward and forward+backward (the engine's attention_efficiency and its sweep-length
  rule).
- fp8_shared: whether torch.compile casts an input three FP8 linears share (wq, wk, wv) once or three times.
- fp8_cast: casting an RMSNorm's and a SwiGLU's output to FP8 (per-tensor dynamic or given scale, per row, per
  column, an e5m2 gradient), with and without the transposed copy, under torch.compile and eagerly (the engine's
  FP8_CAST_BYTES, FP8_CAST_BYTES_FUSED and FP8_ROWWISE_EXTRA_BYTES).
- steps: whole eager-PyTorch training steps of Llama- and MPT-shaped models on this one GPU (BF16 weights, fp32
  master weights and AdamW state, no recomputation), seconds per step and peak memory; the configuration of each is
  written into the results so the engine can be given the same plan.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # the planner itself never needs PyTorch; only this probe does
    sys.exit("gpu_probe: needs PyTorch (and a CUDA GPU, or --smoke for the CPU); `pip install torch` first")

SUSTAIN_S = 40.0


# --- timing and telemetry ---------------------------------------------------------------------------------------

def timed(fn, repeats: int, warmup: int = 3) -> float:
    """Median seconds of one call of fn (CUDA events on a GPU, the wall clock on the CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Telemetry:
    """Samples the SM clock (MHz), board power (W) and temperature (C) every 0.1 s on a thread, through NVML."""

    def __init__(self):
        self.samples: list[tuple[float, float, float, float]] = []
        self._stop = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # no NVML (CPU smoke run): no telemetry
            self._nvml = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def info(self) -> dict:
        if self._nvml is None:
            return {}
        n, h = self._nvml, self._handle
        out = {}
        for key, call in (("power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
                          ("max_sm_clock_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
                          ("max_mem_clock_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)),
                          ("driver", lambda: n.nvmlSystemGetDriverVersion())):
            try:
                value = call()
                out[key] = value.decode() if isinstance(value, bytes) else value
            except Exception as exc:
                out[key] = f"unavailable: {exc}"
        return out

    def _run(self):
        n, h = self._nvml, self._handle
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                                     n.nvmlDeviceGetPowerUsage(h) / 1e3,
                                     n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)))
            except Exception:
                pass
            time.sleep(0.1)

    def start(self):
        if self._nvml is not None:
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def window(self, t0: float, t1: float) -> dict:
        """Median SM clock, power and temperature sampled between t0 and t1 (perf_counter seconds)."""
        rows = [s for s in self.samples if t0 <= s[0] <= t1]
        if not rows:
            return {}
        return {"sm_clock_mhz": statistics.median(r[1] for r in rows), "power_w": statistics.median(r[2] for r in rows),
                "temperature_c": statistics.median(r[3] for r in rows), "samples": len(rows)}


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# --- microbenchmarks --------------------------------------------------------------------------------------------

def hbm(dev, gib: float) -> dict:
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src), repeats=20)
    return {"bytes_copied": src.numel(), "seconds": s, "gbytes_per_s_read_plus_write": 2 * src.numel() / s / 1e9}


def launch(dev, n: int) -> dict:
    x = torch.zeros(1, device=dev)

    def burst():
        for _ in range(n):
            x.add_(1.0)
    s = timed(burst, repeats=5, warmup=1)
    return {"kernels": n, "us_per_kernel": s / n * 1e6}


# One Llama-3-8B layer's GEMMs (hidden 4096, 32 heads, 8 KV heads of 128, SwiGLU 14336, vocab 128256), forward
# (n, k) at M tokens; the engine times the same (m, n, k).
LLAMA8B_GEMMS = {"wq": (4096, 4096), "wk": (1024, 4096), "wo": (4096, 4096), "w1": (14336, 4096),
                 "w2": (4096, 14336), "output": (128256, 4096)}


def gemm_bf16(dev, shapes: dict, repeats: int) -> list[dict]:
    out = []
    for name, (m, n, k) in shapes.items():
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        s = timed(lambda: a @ b, repeats)
        out.append({"name": name, "m": m, "n": n, "k": k, "seconds": s, "tflops": 2 * m * n * k / s / 1e12})
        del a, b
    return out


def gemm_fp8(dev, shapes: dict, repeats: int) -> list[dict]:
    """torch._scaled_mm, e4m3 operands with per-tensor fp32 scales, bf16 output (the kernels alone: the operands
    are cast before the timing)."""
    out = []
    one = torch.ones((), device=dev, dtype=torch.float32)
    for name, (m, n, k) in shapes.items():
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        s = timed(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), repeats)
        out.append({"name": name, "m": m, "n": n, "k": k, "seconds": s, "tflops": 2 * m * n * k / s / 1e12})
        del a, b
    return out


def gemm_k_sweep(dev, m: int, ns: list[int], ks: list[int], repeats: int, rest_s: float) -> list[dict]:
    """BF16 and FP8 products of m tokens by n outputs over a reduction length k, from short to long k: how fast a
    GEMM reaches its full rate as k grows (the engine's k_half). Each shape rests `rest_s` first, so that every one
    runs at the clock of a short burst rather than at the power cap the previous shapes drove the board to."""
    one = torch.ones((), device=dev, dtype=torch.float32)
    out = []
    for n in ns:
        for k in ks:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            time.sleep(rest_s)
            s = timed(lambda: a @ b, repeats)
            row = {"m": m, "n": n, "k": k, "bf16_s": s, "bf16_tflops": 2 * m * n * k / s / 1e12}
            if torch.cuda.is_available():
                a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
                time.sleep(rest_s)
                s8 = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                           repeats)
                row.update({"fp8_s": s8, "fp8_tflops": 2 * m * n * k / s8 / 1e12})
                del a8, b8
            out.append(row)
            del a, b
    return out


def eager_ops(dev, tokens: int, widths: list[int], ffn: int, vocabs: list[int], repeats: int) -> list[dict]:
    """The element-wise chains of an eager-PyTorch transformer layer, forward and forward+backward, on `tokens`
    tokens: each op's seconds and the HBM bytes per element that time is worth at the copy rate measured by hbm()
    (the engine counts these chains in bytes: EAGER_RMSNORM_BYTES, EAGER_ROTARY_BYTES, EAGER_SWIGLU_BYTES and
    ELEMENTWISE_BACKWARD_FACTOR; CROSS_ENTROPY_TRAFFIC per logit)."""
    out = []

    def run(name, width, elements, make, fwd):
        inputs = make()
        wrt = [t for t in inputs if t.requires_grad] + (list(fwd.parameters()) if isinstance(fwd, nn.Module) else [])
        grad_out = None

        def f():
            with torch.no_grad():
                fwd(*inputs)

        def fb():
            nonlocal grad_out
            y = fwd(*inputs)
            if grad_out is None or grad_out.shape != y.shape:
                grad_out = torch.randn_like(y) if y.dim() else torch.ones_like(y)
            torch.autograd.grad(y, wrt, grad_out)  # fresh gradients, not accumulated into .grad
        tf, tfb = timed(f, repeats), timed(fb, repeats)
        out.append({"op": name, "width": width, "elements": elements, "fwd_s": tf, "fwd_bwd_s": tfb})
        del inputs

    def leaf(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_(True)

    for h in widths:
        norm = RMSNorm(h).to(dev, dtype=torch.bfloat16)
        run("rmsnorm_eager", h, tokens * h, lambda: (leaf(tokens, h),), norm)
        ln = nn.LayerNorm(h).to(dev, dtype=torch.bfloat16)
        run("layernorm", h, tokens * h, lambda: (leaf(tokens, h),), ln)
        run("residual_add", h, tokens * h, lambda: (leaf(tokens, h), leaf(tokens, h)), lambda a, b: a + b)
        d = 128
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2).float() / d))
        ang = torch.outer(torch.arange(tokens).float(), inv)
        freqs = torch.polar(torch.ones_like(ang), ang)[None, :, None, :].to(dev)
        run("rotary_eager", h, tokens * h, lambda: (leaf(1, tokens, h // d, d),), lambda x: rotary(x, freqs))
    run("swiglu_eager", ffn, tokens * ffn, lambda: (leaf(tokens, ffn), leaf(tokens, ffn)),
        lambda g, u: F.silu(g) * u)
    run("gelu", ffn, tokens * ffn, lambda: (leaf(tokens, ffn),), F.gelu)
    for v in vocabs:
        labels = torch.randint(0, v, (tokens,), device=dev)
        run("cross_entropy_eager", v, tokens * v, lambda: (leaf(tokens, v),),
            lambda logits: F.cross_entropy(logits.float(), labels))
    return out


# FP8 formats' largest finite values (OCP FP8 spec): e4m3 for activations and weights, e5m2 for gradients.
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def _amax_scale(y, fmax: float, dim=None):
    """Dynamic scale: fmax over the absolute maximum, of the whole tensor (dim None) or along `dim`."""
    amax = y.abs().amax() if dim is None else y.abs().amax(dim=dim, keepdim=True)
    return fmax / amax.float().clamp(min=1e-12)


def _quantise(y, scale, fp8_dtype, fmax: float):
    return (y.float() * scale).clamp(-fmax, fmax).to(fp8_dtype)


def _cast_both_layouts(y, fp8_dtype=torch.float8_e4m3fn, fmax: float = E4M3_MAX):
    """Whole-tensor dynamic cast and its transposed copy (the layout the weight-gradient GEMM reads)."""
    y8 = _quantise(y, _amax_scale(y, fmax), fp8_dtype, fmax)
    return y8, y8.t().contiguous()


def _compiled(fn):
    """fn under torch.compile, in a graph of its own: the probes' variants share lambda code, and Dynamo would
    otherwise stop recompiling it after its recompile limit and run the rest eagerly, silently."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False, fullgraph=True)


def _rmsnorm_fn(x, w):
    """torchtitan's RMSNorm as a function (fp32 inside, cast back, times the weight)."""
    y = x.float()
    return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w


def fp8_cast(dev, tokens: int, widths: list[int], ffn: int, repeats: int, compiled: bool) -> list[dict]:
    """What casting a GEMM input to FP8 costs beside the kernel that produces it, in HBM bytes per element at the
    copy rate hbm() measures (the engine's FP8_CAST_BYTES / FP8_CAST_BYTES_FUSED, per GEMM-input element).

    Producers: RMSNorm over [tokens, h] (the QKV and MLP-up inputs) and SwiGLU over [tokens, ffn] (the down
    projection's input), each timed alone and with its cast; a stored bf16 tensor (an attention or GEMM output, or a
    saved input cast again in the backward) cast on its own. Casts: dynamic per-tensor scaling (the scale is the
    tensor's amax, known only after a pass over it: torchao tensorwise, Transformer Engine current scaling), with and
    without the transposed copy the weight-gradient GEMM reads; a scale given in advance (Transformer Engine's
    delayed scaling, both layouts written in one pass); per-row scaling (torchao rowwise: the row's amax, then along
    the other axis for the backward). Each variant runs under torch.compile when `compiled` (one graph per
    variant, so producer and cast may fuse as in torchtitan's compiled blocks), else eagerly."""
    e4m3 = torch.float8_e4m3fn

    def tensorwise(y):
        return _quantise(y, _amax_scale(y, E4M3_MAX), e4m3, E4M3_MAX)

    def given(y, s):
        y8 = _quantise(y, s, e4m3, E4M3_MAX)
        return y8, y8.t().contiguous()

    def rowwise(y):
        return _quantise(y, _amax_scale(y, E4M3_MAX, -1), e4m3, E4M3_MAX)

    def colwise_t(y):  # rowwise's second quantisation, along the tokens, written in the layout the GEMM reads
        return _quantise(y, _amax_scale(y, E4M3_MAX, 0), e4m3, E4M3_MAX).t().contiguous()

    variants = {
        "produce": lambda p, s: p(),
        "produce+tensorwise": lambda p, s: (lambda y: (y, tensorwise(y)))(p()),
        "produce+tensorwise+transposed": lambda p, s: (lambda y: (y, *_cast_both_layouts(y)))(p()),
        "produce+given_scale+transposed": lambda p, s: (lambda y: (y, *given(y, s)))(p()),
        "produce+rowwise": lambda p, s: (lambda y: (y, rowwise(y)))(p()),
        "stored:tensorwise+transposed": lambda p, s: _cast_both_layouts(p()),
        "stored:colwise+transposed": lambda p, s: colwise_t(p()),
        "stored:grad_e5m2+transposed": lambda p, s: _cast_both_layouts(p(), torch.float8_e5m2, E5M2_MAX),
    }
    out = []
    scale = torch.tensor(1.0, device=dev)
    for producer, width in [("rmsnorm", w) for w in widths] + [("swiglu", ffn)]:
        if producer == "rmsnorm":
            x, w = torch.randn(tokens, width, device=dev, dtype=torch.bfloat16), torch.ones(width, device=dev,
                                                                                             dtype=torch.bfloat16)
            produce = lambda x=x, w=w: _rmsnorm_fn(x, w)  # noqa: E731
        else:
            g, u = (torch.randn(tokens, width, device=dev, dtype=torch.bfloat16) for _ in range(2))
            produce = lambda g=g, u=u: F.silu(g) * u  # noqa: E731
        stored = produce()
        for name, fn in variants.items():
            source = (lambda s=stored: s) if name.startswith("stored:") else produce
            call = (lambda fn=fn, source=source: fn(source, scale))
            if compiled:
                call = _compiled(call)
            with torch.no_grad():
                s = timed(call, repeats, warmup=3)
            out.append({"producer": producer, "width": width, "elements": tokens * width, "variant": name,
                        "compiled": compiled, "seconds": s})
        del stored
    return out


def fp8_shared(dev, tokens: int, width: int, repeats: int) -> dict:
    """Whether torch.compile casts an input that several FP8 linears share once or once per linear: an RMSNorm
    output cast (dynamic per-tensor scale, with its transposed copy) by one linear, and the same cast written out
    three times as wq, wk and wv each do in torchao's Float8Linear, in one compiled graph and eagerly. The engine
    counts one cast per linear for separate projections (compute.elementwise_bytes, `per_linear`); equal compiled
    times would mean the compiler computes it once. Forward only, without autograd."""
    cast = _cast_both_layouts
    x = torch.randn(tokens, width, device=dev, dtype=torch.bfloat16)
    w = torch.ones(width, device=dev, dtype=torch.bfloat16)
    variants = {"norm": lambda: _rmsnorm_fn(x, w),
                "norm+1_cast": lambda: (lambda y: (y, *cast(y)))(_rmsnorm_fn(x, w)),
                "norm+3_casts": lambda: (lambda y: (y, *cast(y), *cast(y), *cast(y)))(_rmsnorm_fn(x, w))}
    out: dict = {"tokens": tokens, "width": width}
    for compiled in (True, False):
        for name, fn in variants.items():
            call = _compiled(fn) if compiled else fn
            with torch.no_grad():
                out[f"{'compiled' if compiled else 'eager'}:{name}_s"] = timed(call, repeats, warmup=3)
    return out


def sustained(dev, telemetry: Telemetry, size: int, seconds: float) -> dict:
    """The size^3 BF16 product back to back; per second of wall time: products done, TFLOP/s, clock, power."""
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    flops = 2 * size ** 3
    timeline = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        count = 0
        while time.perf_counter() - t0 < 1.0:
            for _ in range(8):
                a @ b
            count += 8
            sync()
        t1 = time.perf_counter()
        timeline.append({"t": round(t1 - (end - seconds), 2), "tflops": count * flops / (t1 - t0) / 1e12,
                         **telemetry.window(t0, t1)})
    first, last = timeline[:3], timeline[len(timeline) // 2:]
    return {"size": size, "seconds": seconds, "timeline": timeline,
            "burst_tflops": max(r["tflops"] for r in first),
            "sustained_tflops": statistics.median(r["tflops"] for r in last),
            "burst_sm_clock_mhz": statistics.median(r.get("sm_clock_mhz", math.nan) for r in first),
            "sustained_sm_clock_mhz": statistics.median(r.get("sm_clock_mhz", math.nan) for r in last),
            "sustained_power_w": statistics.median(r.get("power_w", math.nan) for r in last)}


def duty(dev, telemetry: Telemetry, fractions: list[float], seconds: float, size: int, copy_gib: float) -> list[dict]:
    """GEMMs interleaved with memory-bound copies, at a given share of GEMM time: the rate the GEMMs run at and the
    SM clock and power the board holds under its cap, as the share of tensor-core work falls (a training step mixes
    GEMMs with element-wise work, attention and collectives). Each share runs `seconds`; GEMM time is read from CUDA
    events around each block of 8 products, the rest is device-to-device copies of `copy_gib`."""
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    src = torch.empty(int(copy_gib * 2**30), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    gemm_block = timed(lambda: [a @ b for _ in range(8)], 5)
    copy_s = timed(lambda: dst.copy_(src), 10)
    out = []
    for frac in fractions:
        copies = round(gemm_block * (1 - frac) / frac / copy_s)
        gemm_s, blocks = 0.0, 0
        t_start = time.perf_counter()
        while time.perf_counter() - t_start < seconds:
            events = []
            for _ in range(20):
                start, end = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) \
                    if torch.cuda.is_available() else (None, None)
                if start is not None:
                    start.record()
                for _ in range(8):
                    a @ b
                if end is not None:
                    end.record()
                    events.append((start, end))
                for _ in range(copies):
                    dst.copy_(src)
            sync()
            gemm_s += sum(s_.elapsed_time(e_) / 1e3 for s_, e_ in events)
            blocks += 20
        wall = time.perf_counter() - t_start
        row = {"gemm_share_asked": frac, "copies_per_block": copies, "blocks": blocks, "wall_s": wall,
               "gemm_share": gemm_s / wall if gemm_s else None,
               "gemm_tflops": blocks * 8 * 2 * size ** 3 / gemm_s / 1e12 if gemm_s else None,
               **telemetry.window(t_start + 1.0, t_start + wall)}
        out.append(row)
    return out


def attention(dev, backend_names: list[str], lengths: list[int], head_dims: list[int], tokens: int,
              repeats: int) -> list[dict]:
    """Causal SDPA over `tokens` tokens a call (batch = tokens / length), 32 heads (16 at head dim 128 beyond
    16K tokens is not needed). TFLOP/s counts the causal half of 4 s^2 h d forward and 2.5x that backward
    (FlashAttention's convention: Dao 2023)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = []
    for backend_name in backend_names:
        backend = getattr(SDPBackend, backend_name) if backend_name != "DEFAULT" else None
        for d in head_dims:
            heads = 4096 // d
            for s in lengths:
                if s > tokens:
                    continue
                b = tokens // s
                q, k, v = (torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16)
                fwd_flops = 4 * b * heads * s * s * d * 0.5
                row = {"backend": backend_name, "head_dim": d, "heads": heads, "seq_len": s, "batch": b}
                try:
                    ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
                    with ctx:
                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=True)

                        def fwd_bwd():
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            o.backward(grad)
                        tf, tfb = timed(fwd, repeats), timed(fwd_bwd, repeats)
                    row.update({"fwd_s": tf, "fwd_bwd_s": tfb, "fwd_tflops": fwd_flops / tf / 1e12,
                                "bwd_tflops": 2.5 * fwd_flops / (tfb - tf) / 1e12,
                                "fwd_bwd_tflops": 3.5 * fwd_flops / tfb / 1e12})
                except Exception as exc:  # a back end this GPU or build lacks
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                out.append(row)
                del q, k, v, grad
    return out


# --- whole training steps ---------------------------------------------------------------------------------------

@dataclass
class StepConfig:
    """One measured training step, described in the plan spec's own fields (so gpu_compare.py can plan it)."""

    name: str
    style: str              # "llama": RMSNorm, rotary, separate q/k/v and SwiGLU w1/w3 projections, no biases
                            # "mpt": LayerNorm, learned positions, fused Wqkv, GELU MLP, biases, tied embeddings
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    micro_batch: int
    accumulation: int       # micro-batches per optimizer step (global batch = micro_batch x accumulation)
    attention: str = "FLASH_ATTENTION"


STEPS = [
    StepConfig("Llama-3-8B shape, 8 layers, 8K tokens", "llama", 8, 4096, 32, 8, 14336, 128256, 8192, 1, 2),
    StepConfig("Llama-3.2-1B shape (untied), 2K tokens", "llama", 16, 2048, 32, 8, 8192, 128256, 2048, 8, 2),
    StepConfig("MPT-1B shape, 2K tokens", "mpt", 24, 2048, 16, 16, 8192, 50368, 2048, 8, 2),
    StepConfig("Llama-3-8B shape, 8 layers, 8K tokens, cuDNN attention", "llama", 8, 4096, 32, 8, 14336, 128256,
               8192, 1, 2, "CUDNN_ATTENTION"),
]


class RMSNorm(nn.Module):
    """torchtitan's eager RMSNorm: in fp32, cast back, scaled by the weight."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
        return y.type_as(x) * self.weight


def rotary(x, freqs):
    """torchtitan's rotary embedding: pairs as complex numbers in fp32, times the unit phasors."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self, c: StepConfig):
        super().__init__()
        self.c, d = c, c.hidden // c.heads
        self.head_dim = d
        if c.style == "llama":
            self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
            self.wq = nn.Linear(c.hidden, c.heads * d, bias=False)
            self.wk = nn.Linear(c.hidden, c.kv_heads * d, bias=False)
            self.wv = nn.Linear(c.hidden, c.kv_heads * d, bias=False)
            self.wo = nn.Linear(c.heads * d, c.hidden, bias=False)
            self.w1 = nn.Linear(c.hidden, c.ffn_hidden, bias=False)
            self.w3 = nn.Linear(c.hidden, c.ffn_hidden, bias=False)
            self.w2 = nn.Linear(c.ffn_hidden, c.hidden, bias=False)
        else:
            self.norm1, self.norm2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
            self.wqkv = nn.Linear(c.hidden, 3 * c.hidden)
            self.wo = nn.Linear(c.hidden, c.hidden)
            self.up = nn.Linear(c.hidden, c.ffn_hidden)
            self.down = nn.Linear(c.ffn_hidden, c.hidden)

    def forward(self, x, freqs):
        c, d = self.c, self.head_dim
        b, s, _ = x.shape
        h = self.norm1(x)
        if c.style == "llama":
            q = rotary(self.wq(h).view(b, s, c.heads, d), freqs)
            k = rotary(self.wk(h).view(b, s, c.kv_heads, d), freqs)
            v = self.wv(h).view(b, s, c.kv_heads, d)
            rep = c.heads // c.kv_heads
            k, v = (t.repeat_interleave(rep, dim=2) for t in (k, v))  # torchtitan's repeat_kv
        else:
            q, k, v = self.wqkv(h).view(b, s, 3, c.heads, d).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, c.hidden))
        h = self.norm2(x)
        if c.style == "llama":
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x + self.down(F.gelu(self.up(h)))


class Model(nn.Module):
    def __init__(self, c: StepConfig):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.pos = nn.Embedding(c.seq_len, c.hidden) if c.style == "mpt" else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden) if c.style == "llama" else nn.LayerNorm(c.hidden)
        self.output = None if c.style == "mpt" else nn.Linear(c.hidden, c.vocab, bias=False)
        d = c.hidden // c.heads
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(c.seq_len).float(), inv)
        # A plain attribute, not a buffer: Module.to(dtype=bfloat16) would cast the complex phasors to real.
        self.freqs = torch.polar(torch.ones_like(angles), angles)[None, :, None, :]

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[None, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.freqs)
        x = self.norm(x)
        logits = self.output(x) if self.output is not None else x @ self.embed.weight.t()
        return F.cross_entropy(logits.float().view(-1, self.c.vocab), labels.view(-1))


class Trainer:
    """One eager training step of `c`: BF16 weights, fp32 master weights with fused AdamW, `accumulation`
    micro-batches, attention on the config's SDPA back end."""

    def __init__(self, dev, c: StepConfig):
        from torch.nn.attention import SDPBackend
        torch.manual_seed(0)
        self.c = c
        self.model = Model(c).to(dev, dtype=torch.bfloat16)
        self.model.freqs = self.model.freqs.to(dev)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone() for p in self.params]
        self.opt = torch.optim.AdamW(self.masters, lr=1e-5, fused=torch.cuda.is_available())
        self.tokens = torch.randint(0, c.vocab, (c.micro_batch, c.seq_len), device=dev)
        self.labels = torch.randint(0, c.vocab, (c.micro_batch, c.seq_len), device=dev)
        self.backend = getattr(SDPBackend, c.attention) if torch.cuda.is_available() else SDPBackend.MATH

    def step(self):
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel([self.backend]):
            for _ in range(self.c.accumulation):
                self.model(self.tokens, self.labels).backward()
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad.float()
            p.grad = None
        self.opt.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.masters)
        for m in self.masters:
            m.grad = None

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.params)


def train_step(dev, telemetry: Telemetry, c: StepConfig, steps: int, warmup: int) -> dict:
    """Timed eager training steps (Trainer), their SM clock and power, and PyTorch's peak memory."""
    trainer = Trainer(dev, c)
    step = trainer.step
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    sync()
    times, t_start = [], time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    t_end = time.perf_counter()
    row = {"config": asdict(c), "params": trainer.n_params, "step_s": statistics.median(times), "step_s_all": times,
           **telemetry.window(t_start, t_end)}
    if torch.cuda.is_available():
        row["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        row["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    del trainer, step
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


# Kernel-name patterns of each kind of work, first match wins (cuBLAS/CUTLASS GEMMs, fused attention, the optimizer,
# everything else memory-bound).
KERNEL_KINDS = (("attention", ("flash", "fmha", "cudnn", "attn")),
                ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "sm80_", "ampere_", "cublas")),
                ("optimizer", ("adam",)),
                ("memory-bound", ("",)))


def profile_step(dev, c: StepConfig) -> dict:
    """One training step of `c` under torch.profiler: CUDA kernel time by kind and the 25 longest kernels."""
    from torch.profiler import ProfilerActivity, profile
    trainer = Trainer(dev, c)
    step = trainer.step
    for _ in range(2):
        step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        step()
        sync()
    wall = time.perf_counter() - t0
    kinds: dict = {}
    kernels: dict = {}
    for e in prof.events():
        if e.device_type.name != "CUDA" and not (not torch.cuda.is_available() and e.device_type.name == "CPU"):
            continue
        if getattr(e, "is_user_annotation", False) or e.name.startswith(("Optimizer.", "ProfilerStep")):
            continue  # a user annotation's range on the GPU timeline (Optimizer.step#AdamW.step), not a kernel
        us = e.time_range.elapsed_us()
        name = e.name
        kind = next(k for k, pats in KERNEL_KINDS if any(p in name.lower() for p in pats))
        kinds.setdefault(kind, [0.0, 0])
        kinds[kind][0] += us
        kinds[kind][1] += 1
        kernels.setdefault(name, [0.0, 0, kind])
        kernels[name][0] += us
        kernels[name][1] += 1
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:25]
    del trainer, step
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"config": asdict(c), "profiled_wall_s": wall,
            "kinds": {k: {"s": v[0] / 1e6, "kernels": v[1]} for k, v in kinds.items()},
            "top": [{"name": n[:160], "s": v[0] / 1e6, "calls": v[1], "kind": v[2]} for n, v in top]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the results here as JSON (default: standard output)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks the script, measures nothing")
    ap.add_argument("--only", default="hbm,launch,gemm,sustained,attention,steps,profile,gemm_k,eager,attention_long,"
                                      "duty,attention_short,fp8_cast,fp8_shared",
                    help="comma-separated parts to run (default: all)")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        print("gpu_probe: no CUDA GPU visible; run with --smoke to check the script on the CPU", file=sys.stderr)
        return 2
    dev = torch.device("cpu" if smoke else "cuda")
    telemetry = Telemetry().start() if not smoke else Telemetry()
    result: dict = {"tool": "bench/gpu_probe.py", "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                    "smoke": smoke}
    if not smoke:
        p = torch.cuda.get_device_properties(0)
        result["device"] = {"name": p.name, "sm_count": p.multi_processor_count,
                            "memory_gib": p.total_memory / 2**30, **telemetry.info()}

    def part(name, fn):
        if name not in parts:
            return
        t0 = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as exc:
            result[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        print(f"gpu_probe: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    tokens = 256 if smoke else 16384
    shapes = {"square": (512, 512, 512) if smoke else (8192, 8192, 8192)}
    shapes.update({f"llama8b_{k}": (tokens, n // 32 if smoke else n, k_ // 32 if smoke else k_)
                   for k, (n, k_) in LLAMA8B_GEMMS.items()})
    part("hbm", lambda: hbm(dev, 0.01 if smoke else 4.0))
    part("launch", lambda: launch(dev, 50 if smoke else 2000))
    if "gemm" in parts:
        part("gemm", lambda: {"bf16": gemm_bf16(dev, shapes, 3 if smoke else 20),
                              "fp8": [] if smoke else gemm_fp8(dev, shapes, 20)})
    part("sustained", lambda: sustained(dev, telemetry, 256 if smoke else 8192, 2.0 if smoke else SUSTAIN_S))
    if smoke:
        part("attention", lambda: attention(dev, ["DEFAULT"], [64, 128], [64], 256, 2))
    else:
        part("attention", lambda: attention(dev, ["FLASH_ATTENTION", "CUDNN_ATTENTION"],
                                            [1024, 2048, 4096, 8192, 16384], [128, 64], 16384, 10))
    small = [StepConfig("smoke llama", "llama", 2, 128, 4, 2, 256, 1000, 64, 2, 2),
             StepConfig("smoke mpt", "mpt", 2, 128, 4, 4, 512, 1000, 64, 2, 2)]
    if smoke:
        part("steps", lambda: [train_step(dev, telemetry, c, 2, 1) for c in small])
    else:
        part("steps", lambda: [train_step(dev, telemetry, c, 6, 2) for c in STEPS])
    if smoke:
        part("attention_long", lambda: attention(dev, ["DEFAULT"], [128, 256], [64], 256, 2))
    else:
        # Beyond the 16K tokens above (ring attention's chunks at 256K tokens over CP 8 are 32K long): 64K tokens a
        # call, one sequence of 64K down to eight of 8K.
        part("attention_long", lambda: attention(dev, ["FLASH_ATTENTION", "CUDNN_ATTENTION"],
                                                 [8192, 16384, 32768, 65536], [128], 65536, 5))
    if smoke:
        part("attention_short", lambda: attention(dev, ["DEFAULT"], [32, 64], [64], 256, 2))
    else:
        # Below the 1K tokens above (llm-foundry's 512-token rows): 16K tokens a call.
        part("attention_short", lambda: attention(dev, ["FLASH_ATTENTION", "CUDNN_ATTENTION"], [256, 512, 1024, 16384],
                                                  [128, 64], 16384, 10))
    if smoke:
        part("duty", lambda: duty(dev, telemetry, [1.0, 0.5], 0.5, 128, 0.001))
    else:
        part("duty", lambda: duty(dev, telemetry, [1.0, 0.8, 0.6, 0.4, 0.2], 8.0, 8192, 1.0))
    if smoke:
        part("gemm_k", lambda: gemm_k_sweep(dev, 256, [128], [64, 128], 2, 0.0))
        part("eager", lambda: eager_ops(dev, 256, [128], 512, [1000], 2))
    else:
        part("gemm_k", lambda: gemm_k_sweep(dev, 16384, [4096, 8192], [256, 512, 1024, 2048, 4096, 8192, 16384], 20,
                                            0.3))
        part("eager", lambda: eager_ops(dev, 16384, [2048, 4096], 14336, [50368, 128256], 10))
    if smoke:
        part("fp8_cast", lambda: {"compiled": fp8_cast(dev, 64, [128], 256, 2, True),
                                  "eager": fp8_cast(dev, 64, [128], 256, 2, False)})
    else:
        part("fp8_cast", lambda: {"compiled": fp8_cast(dev, 16384, [4096], 14336, 20, True),
                                  "eager": fp8_cast(dev, 16384, [4096], 14336, 20, False)})
    part("fp8_shared", lambda: fp8_shared(dev, 64 if smoke else 16384, 128 if smoke else 4096, 2 if smoke else 20))
    if smoke:
        part("profile", lambda: [profile_step(dev, c) for c in small])
    else:
        part("profile", lambda: [profile_step(dev, c) for c in STEPS[:3]])
    telemetry.stop()
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
