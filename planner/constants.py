"""The few physical constants of the compute and memory model, with where each comes from.

They are efficiencies and byte counts, never per-case corrections: one set serves every GPU, model and layout.
The ones marked FITTED were fitted by `bench/calibrate.py --fit` on the rows of both reference files that
planner.holdout keeps in the fit (GEMM_K_HALF, COMM_INTERFERENCE and FLASH_REFERENCE_LENGTH ended at the top of their
ranges, 256, 0.3 and 16384; TRITON_FLASH_RELATIVE at 0.65); every other value comes from a cited measurement.
Communication efficiencies live in `collectives.py` beside the collective model that uses them.
"""
from __future__ import annotations

# --- Matrix multiplies -----------------------------------------------------------------------------------
# Achievable GEMM throughput, HBM efficiency, sustained clock and kernel overhead are per-GPU catalog data
# (fixtures/gpus.json, each row with its source; spec fields cluster.gpu.gemm_efficiency etc.).
# A GEMM tile pays a fixed prologue/epilogue; efficiency falls as K / (K + K_HALF) for a short reduction
# dimension (CUTLASS main-loop pipelining; a tile must stream ~2-4 K-slices of 32-64 before it is busy).
# This is the A100's; compute.k_half scales it with the GPU's peak per SM. FITTED within [32, 256] elements.
GEMM_K_HALF = 256
# Output tile of the GEMM kernels, for tile and wave quantization (CUTLASS/cuBLAS 128x128 default tiles).
GEMM_TILE_M = 128
GEMM_TILE_N = 128

# --- Attention core -----------------------------------------------------------------------------------
# Causal flash attention's fraction of the BF16 peak is per-GPU catalog data (attention_efficiency).
# FlashAttention's backward pass does 2.5x the forward's matmul work (it recomputes S and P): Dao 2023, sec. 3.
FLASH_BACKWARD_FACTOR = 2.5
# FlashAttention written in Triton (the 2022-23 kernels llm-foundry's attn_impl=triton and others shipped) runs at
# this fraction of the FlashAttention-2-class rate of the catalog: "FlashAttention-2 is 1.3-2.5x faster than
# FlashAttention in Triton" for the forward and backward pass together (Dao 2023, FlashAttention-2, sec. 4.1 and
# fig. 4, A100, head dim 64 and 128). FITTED within [1/2.5, 1/1.3] = [0.40, 0.77].
TRITON_FLASH_RELATIVE = 0.65
# Causal masking lets flash attention skip half of the s x s square; unfused attention computes all of it.
CAUSAL_FRACTION = 0.5
# Flash attention's rate grows with the key length L one kernel sweeps: rate = plateau x L / (L + L_half). The
# per-tile prologue and epilogue (load a Q tile, write O and the log-sum-exp; in the backward, write a K/V tile's
# dK and dV and add its dQ share) amortise over the L/B tiles swept, and the backward's amortise more slowly.
# Measured on an H200 (bench/gpu_probe.py, bench/results/gpu_probe_h200.json, 2026-11-27: PyTorch 2.11 SDPA,
# FlashAttention-2 and cuDNN back ends, causal, head dim 64 and 128, 16K tokens a call, 1K-16K tokens a sequence):
# one L_half per pass fits all four series, forward 530 tokens (rms 3.8%, worst 11%), backward 1,130 (rms 2.7%,
# worst 5%); e.g. FlashAttention-2 at head dim 128 runs its backward at 160, 205, 241, 280, 310 TFLOP/s at 1K-16K.
# FlashAttention-3's forward alone rises faster (pytorch/benchmark PR 2391, H100: 430-621 TFLOP/s at 0.5K-16K,
# L_half 240), but no training stack in the reference files runs it.
FLASH_HALF_LENGTH = 530
FLASH_BACKWARD_HALF_LENGTH = 1130
# Ring attention's merges (context parallelism): HBM bytes per local element, at the GPU's HBM rate, beyond the
# attention kernels. Each ring step after the first folds its partial output into the running one by their
# log-sum-exps; the backward adds every step's gradients into dQ, dK, dV. Counted from the code (training.cp_impl):
# - te: Transformer Engine's AttnFuncWithCPAndKVP2P (Megatron-Core, NeMo). One fused kernel a step
#   (flash_attn_fwd_out_correction under jit_fuser: reads the step's 16-bit output and the running output, writes
#   it): 6 bytes per query element; the backward adds each step's dQ into dQ and each dK, dV into the pair it
#   receives (6 bytes per element); K and V keep their own (grouped-query) head count; no per-step copies.
# - pytorch: PyTorch's context_parallel (torch/distributed/tensor/experimental/_attention.py; its round-robin load
#   balance since pytorch/pytorch #132442, Aug 2024), as torchtitan runs it. _SDPAMerger casts each step's output to
#   fp32 (read 2, write 4) and merges in three eager kernels (out - block_out, times the sigmoid, out minus that:
#   12 + 8 + 12): 38 bytes per query element. Each step that passes K and V on concatenates them (torch.cat, read 2
#   write 2 each): 8 bytes per key element, K and V together, forward and backward. The backward holds dQ, dK, dV in
#   fp32 and adds each step's 16-bit gradient (read 4 + 2, write 4: 10 bytes), the round-robin half-chunk steps through
#   _partial_update's torch.cat of the whole buffer (8 more), and concatenates dK and dV in fp32 to send them on (8
#   each): 10 bytes per query element and 42 per key element a step, the last rank (whole-buffer updates every step)
#   setting the pace. Once a call: the fp32 output's cast back (6 per query element) and K, V made contiguous (8 per
#   key element); in the backward the fp32 buffers' zeroing and casts back (10 per query element, 28 per key element).
#   torchtitan's Llama repeats the K/V heads up to the query heads before SDPA (repeat_kv), so there K and V are as
#   large as Q.
CP_MERGE_BYTES_TE = 6.0
CP_GRAD_Q_BYTES_TE = 6.0
CP_GRAD_KV_BYTES_TE = 12.0
CP_MERGE_BYTES_PYTORCH = 38.0
CP_KV_COPY_BYTES_PYTORCH = 8.0
CP_GRAD_Q_BYTES_PYTORCH = 10.0
CP_GRAD_KV_BYTES_PYTORCH = 42.0
CP_ONCE_FWD_BYTES_PYTORCH = (6.0, 8.0)    # per query element, per key element
CP_ONCE_BWD_BYTES_PYTORCH = (10.0, 28.0)
# The key length one kernel sweeps at which a GPU's catalog attention_efficiency holds. Each catalog figure is one
# number read off FlashAttention benchmarks run at 512 to 16K tokens (Dao 2023, fig. 4-6, A100; Shah et al. 2024,
# fig. 4-6, H100), whose rates rise with the length as above, so one figure holds at one length: a sweep of L keys
# runs at (1 + L_half / L_REF) / (1 + L_half / L) of it (at 2K tokens 0.82 of the 16K rate forward, 0.69 backward;
# the H200 measured 0.88 and 0.66 for FlashAttention-2 at head dim 128, and its forward and backward together ran at
# 315 TFLOP/s at 16K, the H100 catalog's 0.32 of 989). FITTED within [2048, 16384], the benchmarks' lengths of 2K
# and more.
FLASH_REFERENCE_LENGTH = 16384

# --- Memory-bound work ----------------------------------------------------------------------------------
# HBM traffic of the element-wise kernels' backward relative to their forward, counted per element:
# LayerNorm 8h vs 4h bytes (reads dy and x, writes dx, adds the residual gradient), bias-dropout-add 5h vs 7h,
# GeLU 6f vs 4f (SwiGLU 10f vs 6f): 50h+6f vs 38h+4f for a GPT layer, ~1.3-1.4 overall.
ELEMENTWISE_BACKWARD_FACTOR = 1.35
# Unfused softmax + dropout over the s x s scores: forward 9 bytes per element (softmax reads and writes 2-byte
# scores, dropout reads, writes and keeps a 1-byte mask), backward 11 (softmax reads y and dy, writes dx;
# dropout reads dy and the mask, writes dx).
SOFTMAX_DROPOUT_BYTES = (9.0, 11.0)
# Unfused softmax alone, without dropout: forward 4 bytes per element (reads and writes 2-byte scores), backward 6
# (reads y and dy, writes dx).
SOFTMAX_BYTES = (4.0, 6.0)
# Transformer Engine runs a grouped linear layer's per-expert cuBLAS GEMMs round-robin over this many CUDA streams
# (nvte_multi_stream_cublas_gemm and nvte_get_num_compute_streams, transformer_engine/common: 4 compute streams), so
# the tiles of that many experts share the SMs' waves (training.expert_gemm "streams").
TE_GEMM_STREAMS = 4
# Kernels per transformer layer in the forward pass (Megatron fused kernels: norm, QKV, rotary or none,
# attention 1-3, projection, bias-dropout-add, norm, MLP up, activation, MLP down, bias-dropout-add).
KERNELS_PER_LAYER_FORWARD = 12
# The same in eager PyTorch (no torch.compile): RMSNorm, rotary and SwiGLU each run as several kernels
# (counted from torchtitan's llama model at 9dec370: 2 x 7 norm ops, 2 x 6 rotary ops, 3 SwiGLU ops, the GEMMs).
KERNELS_PER_LAYER_EAGER = 36
# Eager-PyTorch element-wise chains, HBM bytes per element (torchtitan/fms Llama at 2024, read + written):
# RMSNorm x.float() 2+4, pow 4+4, mean 4, x * rsqrt 4+4, type_as 4+2, * weight 2+2 = 36 (fused: 4);
# rotary via view_as_complex x.float() 2+4, complex multiply 4+4 (+ the angles), type_as 4+2 = 20 (fused: 4);
# SwiGLU silu(g) 2+2 then * u 2+2+2 = 10 (fused: 6).
EAGER_RMSNORM_BYTES = 36.0
EAGER_ROTARY_BYTES = 20.0
EAGER_SWIGLU_BYTES = 10.0
# FP8 cast traffic per GEMM-input element: amax scan 2 + cast read 2 + write 1 + transposed write 1
# (Transformer Engine / torchao float8 with dynamic or delayed per-tensor scaling; Micikevicius et al. 2022).
FP8_CAST_BYTES = 6.0
FP8_CAST_BYTES_FUSED = 2.0   # the FP8 copy and its transpose; scan and cast fused into the producing kernel
# Rowwise scaling's second quantisation of each GEMM input along the other axis, for the backward (torchao float8
# rowwise recipe): that axis's scale is a column's amax over all the tokens, known only after a pass over the input
# (read 2), then the cast pass (read 2, write 1) replaces the transposed copy (write 1): 4 bytes. Measured under
# torch.compile (bench/gpu_probe.py --only fp8_cast): the column-wise cast with its transposed layout takes 0.90 and
# 0.96 of the time of a whole-tensor cast (FP8_CAST_BYTES, 6 bytes) of the same RMSNorm and SwiGLU outputs on an
# H200 (bench/results/gpu_fp8_cast_h200.json), 0.75 and 1.0 on an H100 (gpu_micro_h100.json): 4.5-6.0 bytes,
# 3.5-5.0 beyond the transposed copy. Engine 2.17 and earlier counted 2, as if scan and cast fused.
FP8_ROWWISE_EXTRA_BYTES = 4.0
# Block scaling's second quantisation (Transformer Engine MXFP8: 32-element blocks; 1x128 blocks): each block's
# scale is local, so one pass scans and casts it: read 2, write 1, instead of a transposed copy.
FP8_BLOCKWISE_EXTRA_BYTES = 2.0
# Rowwise scaling's backward GEMMs (accumulated at full precision) run as tensorwise cuBLAS GEMMs whose 16-bit
# output a separate kernel then multiplies by the row and column scales (pytorch/ao #1325: the CUTLASS rowwise
# kernel is too slow without fast accumulation; #2184: one extra kernel per GEMM, reading and writing its output):
# 4 bytes per output element of every data- and weight-gradient GEMM.
FP8_ROWWISE_RESCALE_BYTES = 4.0
# PyTorch's row-wise scaled_mm (a CUTLASS kernel, fast accumulation) against the tensor-wise cuBLAS kernel on H100:
# "most shapes are within 90-100% of tensor-wise efficiency, but there's a long tail going down to 50%"
# (pytorch/pytorch #147971, 2025-02). The low end of the bulk: 0.9.
FP8_ROWWISE_GEMM_RELATIVE = 0.9

# Cross-entropy over one micro-batch's logits, bytes per logit (training.cross_entropy).
# fused: Megatron-Core's vocab-parallel cross-entropy on fp32 logits computes the softmax and its gradient in place:
# about 3 passes forward (max, exp-sum, loss) and 2.5 backward of 4 bytes each, and one 4-byte copy held from the
# forward into the backward (megatron/core/tensor_parallel/cross_entropy.py).
# eager: PyTorch's F.cross_entropy on logits cast to fp32, uncompiled (torchtitan's loss: `cross_entropy(pred.float())`,
# "compiling loss function causes CUDA errors, turning off for now" in its train.py of 2024-25; Hugging Face
# transformers' ForCausalLMLoss upcasts the same way). Forward: the cast reads 2 and writes 4, log_softmax reads 4
# twice and writes 4 (18). Backward: nll_loss's dense gradient writes 4, log_softmax's backward reads 8 and writes 4,
# the cast back reads 4 and writes 2 (22). At the start of the backward the saved log-softmax, its incoming gradient
# and the gradient it writes are held at once: 12 bytes.
# chunked: torchtitan's ChunkedLossWrapper (torchtitan/components/loss.py, 2026) runs the output layer and an eager
# loss on one of num_chunks = 8 slices of the tokens at a time, forward and backward, so the held logits are eager's
# over 8; the traffic per logit is eager's. Fused linear cross-entropy kernels (Liger) hold no more.
CROSS_ENTROPY_CHUNKS = 8
CROSS_ENTROPY_TRAFFIC = {"fused": (12.0, 10.0), "eager": (18.0, 22.0), "chunked": (18.0, 22.0)}
CROSS_ENTROPY_HELD_BYTES = {"fused": 4.0, "eager": 12.0, "chunked": 12.0 / CROSS_ENTROPY_CHUNKS}

# Mixed-precision Adam step: reads the optimizer state (OPTIMIZER_BYTES: fp32 master weight, momentum and
# variance, 12 B) and the gradient (4 B), writes the state back and the 16-bit weight (2 B), and zeroes the gradient
# (4 B): 2 x state + ADAM_OTHER_BYTES per parameter, 34 bytes of HBM traffic with fp32 state (Rajbhandari et al.
# 2020, sec. 3.1 for the 16-byte state; traffic counted from the update rule).
ADAM_OTHER_BYTES = 10

# --- Memory footprint -----------------------------------------------------------------------------------
# Mixed-precision Adam state per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1): 2-byte weights beside the
# optimizer state.
WEIGHT_BYTES = 2
# Optimizer state per parameter by training.optimizer_states: fp32 master weight and Adam moments (12 B, Rajbhandari
# et al. 2020, sec. 3.1); bf16 moments beside the fp32 master (8 B: DeepSeek-V3 technical report, sec. 3.3.3;
# Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 with
# OptimizerConfig.store_param_remainders off); bf16 moments and only the low 16 bits of the fp32 master, whose high
# half is the bf16 weight itself (6 B: Megatron-Core OptimizerConfig.store_param_remainders, its default with the
# precision-aware optimizer; Apex DistributedFusedAdam store_param_remainders; the same 6 B as Apex's dtype bf16, a
# bf16 master beside bf16 moments, NeMo's distributed_fused_adam with optim.dtype bf16).
OPTIMIZER_BYTES = {"fp32": 12, "bf16": 8, "bf16_remainder": 6}
# Gradients: Megatron-LM accumulates and reduces gradients in fp32 when training in bf16 (arguments.py: bf16
# implies accumulate_allreduce_grads_in_fp32), 4 bytes; fp16 training keeps fp16 gradients, 2 bytes.
GRAD_BYTES = {"bf16": 4, "fp8": 4, "fp16": 2}
# ... unless the stack reduces them in bf16 (Megatron --grad-reduce-in-bf16; FSDP MixedPrecision(reduce_dtype=
# bfloat16), as fms-fsdp's bfSixteen policy): training.grad_reduce_dtype.
GRAD_BYTES_BF16_REDUCE = 2
# CUDA context, cuBLAS workspaces and NCCL buffers per GPU, GiB (PyTorch + NCCL defaults: context ~0.5 GiB,
# NCCL ~0.3-1 GiB with 8-32 channels of 4 MiB buffers per peer).
RUNTIME_RESERVE_GIB = 1.5
# PyTorch's caching allocator cannot use every byte: fragmentation typically wastes 5-15% of reserved memory
# (PyTorch memory-management docs; Megatron-LM reports). We keep 8% of the rest free, none with
# training.expandable_segments (memory.fragmentation_fraction).
FRAGMENTATION_FRACTION = 0.08

# --- Schedule -------------------------------------------------------------------------------------------
# Fraction of the data-parallel gradient reduction that can hide behind the last micro-batch's backward pass
# (bucketed, overlapped reduce-scatter/all-reduce as in PyTorch DDP and Megatron's --overlap-grad-reduce).
# Communication kernels steal SMs and HBM bandwidth from the compute they overlap with.
DP_OVERLAP_EFFICIENCY = 0.8
# Fraction of overlapped ("hidden") communication time that still lands on the critical path: NCCL runs one
# CTA per channel (16-32 channels on NVLink/InfiniBand systems, i.e. 12-24% of an H100's 132 SMs) and streams
# through the HBM the overlapped GEMMs use (NCCL docs, NCCL_MIN/MAX_NCHANNELS; Rashidi et al. 2021, "Enabling
# Compute-Communication Overlap in Distributed Deep Learning Training Platforms": 10-30% slowdown of the
# overlapped compute). FITTED within [0.05, 0.3].
COMM_INTERFERENCE = 0.3

# Pinned-memory copies between a GPU and CPU memory reach about this fraction of the host link's rate each way
# (PCIe: 128b/130b encoding and TLP headers; NVIDIA's bandwidthTest gives ~26 of 32 GB/s each way on PCIe 4.0 x16
# A100 systems). Activation offloading's copies run on the copy engines, beside the compute, not on its SMs.
HOST_COPY_EFFICIENCY = 0.8

# Part of every identical-request hash (webui/services.py): a new version never reuses an answer of the old one.
# 2.0: per-GPU constants as catalog data, FSDP/ZeRO-3 per-layer gathers, overlap and FP8 recipe costs, CP costs,
# ZeRO-2 per-micro-batch reductions, refit on both reference files (issue 8).
# 2.1: no per-FSDP-unit host time; Triton flash attention, FSDP-style ZeRO-2, bf16 gradient reduction, early-stop
# and partial recomputation, FP8 sequence-parallel gathers; refit.
# 2.2: expert parallelism folded over TP·CP·DP, FP8 short-K penalty, TP overlap per adjacent GEMM, FP8 recipes'
# rescale costs, checkpoint_impl (PyTorch's selective policy gathers the SP inputs again).
# Also 2.2: the output layer in 16 bits under FP8; row-wise FP8 forward GEMMs at FP8_ROWWISE_GEMM_RELATIVE.
# 2.3: training.projections (separate Q/K/V and gate/up GEMMs); async TP leaves the backward's re-gathers exposed.
# 2.4: unfused attention's backward GEMMs keep the batch in M (no weight-like gradient over the batch).
# 2.5: training.attention = cudnn (cuDNN fused attention, Transformer Engine's default on Hopper and later) at the
# GPU's cudnn_attention_efficiency.
# 2.6: training.fp8_saved_inputs (Transformer Engine keeps FP8 linears' 1-byte inputs for the backward) and
# training.pp_comm_overlap (Megatron-Core's interleaved schedule overlaps stage hand-offs with compute).
# 2.7: training.activation_offload_layers (activations in CPU memory over cluster.node.host_gbytes_per_s).
# 2.8: FLASH_REFERENCE_LENGTH (a catalog attention efficiency holds at one sweep length; shorter sequences' attention
# runs slower, longer faster).
# 2.9: training.expandable_segments (PyTorch's expandable segments: no fragmentation allowance).
# 2.10: MoE layers keep their top_k dispatched token copies (the experts' fc1 input) for the backward.
# Also 2.10: training.fp8_weight_cache (Transformer Engine casts FP8 weights once per step under Megatron-Core).
# 2.11: separate FP8 linears (wq, wk, wv; w1, w3) each cast the input they share, unless tensorwise sequence
# parallelism cast it once before the gather.
# Also 2.11: training.cross_entropy (PyTorch's eager cross-entropy on fp32 logits holds 12 bytes a logit, not 4).
# 2.12: MoE experts' GEMMs grouped (training.expert_gemm: Transformer Engine's 4 streams or one grouped kernel);
# Blackwell Ultra's catalog constants (GB300 sustained clock at 1,400 W, doubled SFU throughput in attention);
# model.residual_streams (hyper-connections, DeepSeek-V4's mHC: n residual streams' traffic and memory).
# 2.13: peak memory per pipeline stage: an uneven split spares the last stage, then the first (Llama 3, Zero Bubble),
# and the busiest GPU is the first, second or last stage with that stage's own layers and vocabulary matrices.
# 2.14: training.optimizer_states (bf16 Adam moments, with or without the fp32 master kept as a 16-bit remainder);
# FP8 GEMMs reach half rate at the same reduction length as 16-bit ones (compute.k_half: DeepGEMM, Transformer
# Engine's GEMM tutorial), and the 500 W H100's sustained clock refitted (0.72 -> 0.70).
# 2.15: MoE tokens travel in 16 bits in FP8 training too (Megatron-Core's dispatchers quantise on arrival), unless
# training.ep_dispatch_dtype = "fp8" (DeepSeek-V3's own framework, Megatron-Core's ncclep MXFP8 dispatch).
# 2.16: model.router_groups / router_group_top_k (group-limited routing: a deduplicating dispatch reaches fewer
# NVLink domains; DeepSeek-V3's 8 groups, 4 a token).
# 2.17: flash attention's backward reaches half rate at its own, longer sweep (FLASH_BACKWARD_HALF_LENGTH 1,130
# tokens; the forward's FLASH_HALF_LENGTH 240 -> 530), both measured on an H200 (bench/gpu_probe.py).
# 2.18: rowwise FP8's second quantisation costs a column scan before its cast (FP8_ROWWISE_EXTRA_BYTES 2 -> 4,
# measured on an H200 by bench/gpu_probe.py --only fp8_cast); block scaling keeps its one pass
# (FP8_BLOCKWISE_EXTRA_BYTES).
# 2.19: ring attention's merge traffic (CP_*_BYTES_*) and training.cp_impl (Transformer Engine or PyTorch's
# context_parallel, whose fp32 eager merges move several times the bytes).
# 2.20: the search also tries micro-batches of more than 64 sequences while one holds at most 131,072 tokens
# (search.MAX_MICRO_BATCH_TOKENS); step times of a given layout unchanged.
# 2.21: training.tp_wgrad_overlap (default on): the backward's QKV and MLP-up input-gradient reductions run beside
# their weight-gradient GEMMs, as Megatron and Transformer Engine do; off for PyTorch TP and 2020-21 Megatron rows.
# 2.22: interleaving no longer needs the micro-batches of a step to be a multiple of PP, only at least PP: Megatron-
# Core runs them in larger groups (--microbatch-group-size-per-virtual-pipeline-stage, memory.vp_group), whose
# extra warm-up activations the first stage holds; step times of a given layout unchanged.
# 2.23: training.attention = te (Transformer Engine's own pick: the faster of cuDNN and FlashAttention-2 on the GPU),
# which the megatron_core stack now sets, with fp8_param_gather; rows of Transformer Engine stacks read as te (the
# same kernel they were costed with). Step times of a given spec unchanged unless it names megatron_core.
# 2.24: the context-parallel ring's hops follow the overlap rule of every other collective (steptime._exposed: 80% of
# the attention as the window, 30% of the hidden time still paid); they were exposed only past the whole attention.
ENGINE_VERSION = "2.24"


def as_dict() -> dict[str, float]:
    """The constants, for the answer's provenance block and the README."""
    return {name.lower(): value for name, value in globals().items()
            if name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)}
