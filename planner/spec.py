"""The plan spec: parse and validate one planning request into frozen dataclasses.

The format is `docs/plan-spec.md`; the CLI, the JSON API and the browser form all call `parse_spec`,
so every tool reports the same field-named messages (`model.heads: must divide model.hidden (12288)`).

Field metadata (type, bounds, unit, help) lives in one table per section (`SECTIONS`), which the web form
reads too, so a bound or a help text is written once. Sizes are bounded so that no input can make the search
hang or exhaust a worker: the search cost grows with the number of divisors of these numbers, never with
their size, and the bounds keep even that small.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from .constants import FRAGMENTATION_FRACTION
from .errors import FieldError, SpecError
from .jsonio import Overflow
from .stacks import FRAMEWORKS, GENERIC, with_stack

REQUIRED = object()  # sentinel: the field has no default

PRECISIONS = ("bf16", "fp16", "fp8")
RECOMPUTE = ("none", "selective", "full")
TOPOLOGIES = ("fat_tree", "rail_optimized", "dragonfly", "torus")
FABRIC_KINDS = ("infiniband", "roce", "ethernet", "efa")
ATTENTION_KERNELS = ("flash", "cudnn", "te", "triton", "unfused")
ELEMENTWISE_MODES = ("fused", "eager")
EP_DISPATCH = ("all_to_all", "dedup")
EP_DISPATCH_DTYPES = ("bf16", "fp8")
EXPERT_GEMMS = ("streams", "grouped")
FP8_RECIPES = ("tensorwise", "rowwise", "blockwise")
ZERO_GRANULARITIES = ("bucket", "layer")
GRAD_REDUCE_DTYPES = ("fp32", "bf16")
OPTIMIZER_STATES = ("fp32", "bf16", "bf16_remainder")
FP8_SAVED_INPUTS = ("fp8", "bf16")
CHECKPOINT_IMPLS = ("megatron", "pytorch")
CP_IMPLS = ("te", "pytorch")
PROJECTIONS = ("fused", "separate")
CROSS_ENTROPY_IMPLS = ("fused", "eager", "chunked")
# Rank orders, innermost first. TP is always innermost (it must stay inside an NVLink domain); the two orders
# that matter differ in whether DP or PP gets the nearer GPUs (the same leaf switch or rail group).
RANK_ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")


@dataclass(frozen=True)
class Field:
    """One spec field: its type, default, bounds, unit and help text (shown by the form)."""

    name: str
    kind: type
    default: Any = REQUIRED
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    unit: str = ""
    help: str = ""


MODEL_FIELDS = (
    Field("name", str, "custom model", help="Free text, shown on the plan page."),
    Field("layers", int, lo=1, hi=2048, help="Transformer blocks."),
    Field("hidden", int, lo=1, hi=262_144, help="Model (embedding) width h."),
    Field("heads", int, lo=1, hi=4096, help="Attention (query) heads; must divide hidden."),
    Field("kv_heads", int, None, lo=1, hi=4096,
          help="Key/value heads (fewer than heads = grouped-query attention). Default: heads."),
    Field("ffn_hidden", int, None, lo=1, hi=1_048_576, help="MLP inner width. Default: 4 x hidden."),
    Field("gated_mlp", bool, False, help="SwiGLU-style MLP with three matrices (Llama)."),
    Field("vocab", int, lo=1, hi=8_388_608, help="Vocabulary size."),
    Field("seq_len", int, lo=1, hi=16_777_216, unit="tokens", help="Training sequence length."),
    Field("experts", int, 1, lo=1, hi=8192, help="Mixture of experts: routed experts per MoE layer (1 = dense)."),
    Field("top_k", int, 1, lo=1, hi=8192, help="Routed experts each token visits."),
    Field("router_groups", int, 1, lo=1, hi=8192,
          help="Group-limited routing: the routed experts fall into this many equal groups of consecutive experts "
               "(DeepSeek-V3: 8); 1 = no groups."),
    Field("router_group_top_k", int, None, lo=1, hi=8192,
          help="Group-limited routing: a token's experts come from at most this many groups (DeepSeek-V3: 4, so a "
               "token reaches at most 4 of 8 nodes). Default: every group (no limit)."),
    Field("expert_ffn_hidden", int, None, lo=1, hi=1_048_576,
          help="MLP inner width of one expert. Default: ffn_hidden."),
    Field("shared_experts", int, 0, lo=0, hi=64, help="Always-active shared experts per MoE layer (DeepSeek)."),
    Field("dense_layers", int, 0, lo=0, hi=2048, help="Leading layers with a dense MLP in an MoE model."),
    Field("tied_embeddings", bool, False, help="Input and output embeddings share one matrix."),
    Field("residual_streams", int, 1, lo=1, hi=16,
          help="Parallel residual streams per token (hyper-connections: DeepSeek-V4's mHC keeps 4, mixed before and "
               "after every attention and MLP block); 1 = the ordinary residual."),
    Field("dropout", bool, None,
          help="Dropout after attention and MLP (keeps 1-byte masks, streams more bytes). Default: on for a "
               "non-gated (GPT-style) MLP, as Megatron GPT; off for Llama-style models (MPT sets 0 too)."),
)

TRAINING_FIELDS = (
    Field("global_batch", int, lo=1, hi=16_777_216, unit="sequences", help="Sequences per optimizer step."),
    Field("precision", str, "bf16", choices=PRECISIONS,
          help="Matrix-multiply precision: bf16/fp16, or fp8 (Transformer Engine style, bf16 elsewhere)."),
    Field("tokens", float, None, lo=1, hi=1e16, unit="tokens",  # 0 was taken, then asked for on the page
          help="Tokens to train, for time to train and GPU-hours."),
    Field("framework", str, GENERIC, choices=FRAMEWORKS,
          help="Training stack whose settings fill every option below that the request leaves out "
               "(planner/data/stacks.json, each with its source): megatron_core (Megatron-Core with Transformer "
               "Engine), torchtitan (FSDP2, DTensor TP, torch.compile, torchao float8), fsdp (PyTorch FSDP with "
               "eager models: llm-foundry, fms-fsdp, Hugging Face); generic = each option's own default. An "
               "option the request states wins."),
    Field("overlap_grad_reduce", bool, True,
          help="Overlap the data-parallel gradient reduction with the backward pass (PyTorch DDP, Megatron "
               "--overlap-grad-reduce); off = reduce after the backward pass."),
    Field("tp_comm_overlap", bool, False,
          help="Overlap tensor-parallel collectives with the GEMMs they feed (Megatron --tp-comm-overlap, "
               "torchtitan async TP); off = synchronous, the Megatron default."),
    Field("tp_wgrad_overlap", bool, True,
          help="In the backward pass, reduce the input gradient of the QKV and MLP-up layers (reduce-scatter with "
               "sequence parallelism, else all-reduce) while their weight-gradient GEMMs run: what Megatron's and "
               "Transformer Engine's linear layers do by default (Megatron-LM since September 2021, Megatron-Core, "
               "NeMo); off = the reduction follows both GEMMs (PyTorch's tensor parallelism, torchtitan without "
               "async TP; Megatron-LM of 2020-21). With tp_comm_overlap, layouts with sequence parallelism "
               "overlap every TP collective instead."),
    Field("fp8_recipe", str, "tensorwise", choices=FP8_RECIPES,
          help="With fp8: tensorwise (one scale per tensor: Transformer Engine delayed scaling, torchao tensorwise), "
               "rowwise (torchao: one per row; for the backward each input is scanned by column and quantised again "
               "along that axis, and the backward GEMMs rescale their outputs in a separate kernel) or blockwise "
               "(Transformer Engine MXFP8 and 1x128 block scaling: each input quantised along both axes, scales "
               "applied inside the GEMMs)."),
    Field("fp8_param_gather", bool, False,
          help="With fp8: gather parameters in FP8, 1 byte each (FSDP2 float8 all-gather, Megatron "
               "--fp8-param-gather); off = 16-bit gathers."),
    Field("fp8_weight_cache", bool, False,
          help="With fp8: cast each layer's weights to FP8 (and their transposes) once per step and reuse them in "
               "every micro-batch (Transformer Engine's is_first_microbatch weight cache, which Megatron-Core and "
               "NeMo use); off = cast again in every micro-batch's forward (torchao float8, torchtitan, Transformer "
               "Engine called without it)."),
    Field("fp8_saved_inputs", str, "fp8", choices=FP8_SAVED_INPUTS,
          help="With fp8: what each FP8 linear keeps for its weight-gradient GEMM: fp8 (Transformer Engine, so "
               "Megatron-Core and NeMo: the 1-byte cast input) or bf16 (torchao float8, torchtitan: the 16-bit input, "
               "cast again in the backward)."),
    Field("ep_dispatch", str, "all_to_all", choices=EP_DISPATCH,
          help="MoE token dispatch: all_to_all (a copy per routed expert) or dedup (DeepEP/HybridEP: one copy per "
               "remote NVLink domain, fanned out over NVLink)."),
    Field("ep_dispatch_dtype", str, "bf16", choices=EP_DISPATCH_DTYPES,
          help="With fp8 and expert parallelism: what MoE tokens travel in. bf16: 16-bit hidden states, quantised by "
               "the experts' first linear on arrival (Megatron-Core's alltoall and flex dispatchers, DeepEP and "
               "HybridEP included; torchtitan). fp8: quantised before they leave, 1 byte plus a scale per 32-128 "
               "values, for the forward dispatch and the gradient sent back the same way, the other two all-to-alls "
               "in 16 bits (DeepSeek-V3's own framework; Megatron-Core's ncclep backend with "
               "--moe-dispatch-fwd-dtype and --moe-combine-bwd-dtype mxfp8)."),
    Field("expert_gemm", str, "streams", choices=EXPERT_GEMMS,
          help="How a GPU runs its local experts' GEMMs: streams (Transformer Engine's GroupedLinear under "
               "Megatron-Core --moe-grouped-gemm: one cuBLAS GEMM per expert, spread over 4 CUDA streams, so the "
               "tiles of 4 experts share the SMs' waves) or grouped (one grouped-GEMM kernel over every local "
               "expert: torch._grouped_mm in torchtitan, DeepGEMM, CUTLASS grouped GEMM)."),
    Field("partition_activations", bool, False,
          help="With full recomputation, TP > 1 and no sequence parallelism: split each layer's saved input over the "
               "TP ranks and all-gather it before the layer is recomputed (Megatron --distribute-saved-activations, "
               "DeepSpeed activation_checkpointing.partition_activations, metaseq "
               "--distribute-checkpointed-activations): a TP-th of those activations, one more TP all-gather a layer "
               "in the backward."),
    Field("pp_comm_overlap", bool, True,
          help="With virtual pipeline stages: send and receive each chunk's activations while the next chunk "
               "computes (Megatron-Core's interleaved schedule, overlap_p2p_comm, its default); off = every "
               "hand-off waits (Megatron-LM before Megatron-Core, --no-overlap-p2p-communication, torchtitan)."),
    Field("cp_load_balance", bool, True,
          help="With context parallelism: split the sequence into 2·cp chunks and give each rank one from each end "
               "(Megatron-Core / Transformer Engine zigzag), so causal attention work is even; off = contiguous "
               "chunks, the last rank does 2·cp/(cp+1) of the average."),
    Field("cp_impl", str, "te", choices=CP_IMPLS,
          help="With context parallelism, whose ring attention runs: te (Transformer Engine, so Megatron-Core and "
               "NeMo: one fused kernel a step merges the partial outputs, 16-bit gradient sums) or pytorch (PyTorch's "
               "context_parallel, as torchtitan uses it: each step's output merged in fp32 by several eager kernels, "
               "fp32 gradient buffers rebuilt by concatenation, K and V copied every step and, in torchtitan's "
               "Llama, repeated to the query heads): several times the memory traffic a step."),
    Field("activation_offload_layers", int, 0, lo=0, hi=2048,
          help="Layers of each pipeline stage whose saved activations go to CPU memory during the forward pass and "
               "come back before their backward (Megatron-Core and NeMo cpu_offloading_num_layers): they leave the "
               "GPU's memory but for two in flight, and the copies hide behind compute as far as the node's host "
               "link allows. At most a stage's layers less one (Megatron-Core: fewer than the model's layers)."),
    Field("expandable_segments", bool, False,
          help="PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set by NeMo and "
               "Megatron-Bridge recipes and by torchtitan's run_train.sh): freed memory is always reusable, so no "
               "allowance is kept for fragmentation; off = the default caching allocator, with "
               f"{FRAGMENTATION_FRACTION:.0%} of the activations kept free for it."),
    Field("ep_comm_overlap", bool, False,
          help="Overlap MoE all-to-alls with another micro-batch's compute (Megatron-Core "
               "--overlap-moe-expert-parallel-comm); off = on the critical path."),
    Field("zero_granularity", str, "bucket", choices=ZERO_GRANULARITIES,
          help="How ZeRO-2 moves weights and gradients: bucket (Megatron's distributed optimizer, DeepSpeed: "
               "gradients reduce-scattered in large buckets, weights gathered once per step) or layer (PyTorch FSDP "
               "SHARD_GRAD_OP, FSDP2 without resharding after the forward: every micro-batch gathers each layer "
               "before its forward and reduce-scatters its gradient after its backward). ZeRO-3 always works "
               "layer by layer."),
    Field("grad_reduce_dtype", str, "fp32", choices=GRAD_REDUCE_DTYPES,
          help="Precision in which bf16/fp8 training accumulates and reduces gradients: fp32 (Megatron's default, "
               "torchtitan, FSDP mixed precision with an fp32 reduce) or bf16 (Megatron --grad-reduce-in-bf16, FSDP "
               "reduce_dtype=bfloat16): half the reduction traffic and gradient memory. fp16 training keeps fp16 "
               "gradients either way."),
    Field("optimizer_states", str, "fp32", choices=OPTIMIZER_STATES,
          help="How Adam keeps its state per parameter: fp32 (fp32 master weight and moments, 12 bytes: Megatron, "
               "DeepSpeed and FSDP defaults), bf16 (bf16 moments beside the fp32 master, 8 bytes: DeepSeek-V3, "
               "Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
               "with store_param_remainders off) or bf16_remainder (bf16 moments and only the master's low 16 bits, "
               "its high half being the bf16 weight, 6 bytes: the same Megatron-Core flags with its default "
               "store_param_remainders, Apex DistributedFusedAdam with store_param_remainders, or with dtype bf16 "
               "as NeMo's distributed_fused_adam: a bf16 master, the same 6 bytes). Needs bf16 weights: not fp16."),
    Field("checkpoint_impl", str, "megatron", choices=CHECKPOINT_IMPLS,
          help="How recomputation runs: megatron (the whole layer's forward again; selective recomputation keeps "
               "the collectives' outputs) or pytorch (non-reentrant torch.utils.checkpoint, as FSDP and torchtitan "
               "use it: full recomputation stops once the last tensor the backward needs is rebuilt, skipping the "
               "MLP's output projection; selective is the per-operator policy, which gathers the sequence-parallel "
               "inputs again)."),
    Field("projections", str, "fused", choices=PROJECTIONS,
          help="How a layer's input projections run: fused (one GEMM for Q, K and V and one for the MLP's gate and "
               "up: Megatron-Core linear_qkv and linear_fc1, MPT's Wqkv) or separate (a GEMM each: torchtitan's wq, "
               "wk, wv and w1, w3, Hugging Face Llama), whose narrow K and V GEMMs run further from peak."),
    Field("cross_entropy", str, "fused", choices=CROSS_ENTROPY_IMPLS,
          help="How the loss runs over the logits: fused (Megatron-Core's vocab-parallel cross-entropy, fused loss "
               "kernels, a compiled loss: the fp32 softmax and its gradient in place, 4 bytes a logit held into the "
               "backward) or eager (PyTorch's F.cross_entropy on logits cast to fp32, as torchtitan runs it without "
               "compiling the loss and Hugging Face models do: 12 bytes a logit at the start of the backward, which "
               "at long sequences and 128K-token vocabularies is tens of GiB) or chunked (torchtitan's "
               "ChunkedLossWrapper, fused linear cross-entropy kernels: the output layer and the loss run an eighth "
               "of the tokens at a time, so an eighth of eager's logits is ever held; traffic as eager)."),
    Field("elementwise", str, "fused", choices=ELEMENTWISE_MODES,
          help="How norms, rotary embedding and activations run: fused kernels (Megatron, Transformer Engine, "
               "torch.compile) or eager PyTorch, one kernel per operation in fp32."),
    Field("attention", str, "flash", choices=ATTENTION_KERNELS,
          help="Attention kernel: flash (FlashAttention-2 class: FA2, PyTorch SDPA's default; fused, causal, no "
               "s x s matrix in memory), cudnn (cuDNN fused attention: Transformer Engine's default on Hopper and "
               "later; FlashAttention-3 class there, ~1.7x FA2 on H100), te (Transformer Engine's own pick, as "
               "Megatron-Core and NeMo run it: the faster of the two on the GPU, cuDNN on Hopper and later, "
               "FlashAttention-2 before), triton "
               "(FlashAttention written in Triton, 2022-23: llm-foundry attn_impl=triton; fused, slower) or unfused "
               "(Megatron before FlashAttention, 2022)."),
)

GPU_FIELDS = (
    Field("name", str, "custom GPU", help="Shown on the plan page; a catalog name fills the fields left empty."),
    Field("peak_tflops", float, lo=0.001, hi=1e6, unit="TFLOP/s",
          help="Dense 16-bit tensor-core peak: BF16, or FP16 on a GPU without BF16 (V100)."),
    Field("memory_gib", float, lo=0.001, hi=1e5, unit="GiB", help="HBM capacity."),
    Field("memory_gbytes_per_s", float, lo=0.001, hi=1e6, unit="GB/s", help="HBM bandwidth."),
    Field("fp8_tflops", float, None, lo=0, hi=1e6, unit="TFLOP/s",
          help="Dense FP8 tensor-core peak; empty = 2 x peak_tflops (Hopper and later), 0 = no FP8."),
    Field("bf16", bool, None,
          help="BF16 tensor cores: empty = yes (Ampere and later); no for Volta (V100), whose tensor cores run FP16 "
               "only, so it trains in fp16 and bf16 is refused."),
    Field("sm_count", int, 132, lo=1, hi=10_000,
          help="Streaming multiprocessors, for GEMM wave quantization (A100 108, H100 132, B200 148)."),
    # Achievable-throughput constants: catalog data per GPU type, each with its source in fixtures/gpus.json;
    # the defaults below are for a custom GPU nobody has measured (the middle of the measured GPUs).
    Field("gemm_efficiency", float, 0.80, lo=0.05, hi=1.0,
          help="Fraction of the dense BF16 peak a large, well-shaped GEMM reaches (cuBLAS maximum achievable "
               "matmul FLOPS: A100 0.87, H100 0.80, B200 0.78)."),
    Field("fp8_gemm_efficiency", float, 0.72, lo=0.05, hi=1.0,
          help="Fraction of the dense FP8 peak a large FP8 GEMM reaches (H100 0.71, B200 0.76)."),
    Field("sustained_clock", float, 1.0, lo=0.3, hi=1.0,
          help="Tensor-core clock sustained under the power cap in training, as a fraction of the clock the peak "
               "is quoted at (1 = no throttling; a 500 W-capped H100 runs lower)."),
    Field("hbm_efficiency", float, 0.85, lo=0.3, hi=1.0,
          help="Fraction of the HBM bandwidth that streaming (element-wise) kernels reach."),
    Field("kernel_overhead_us", float, 4.0, lo=0.0, hi=1000.0, unit="µs",
          help="Fixed cost of one kernel: launch, ramp-up and tail."),
    Field("attention_efficiency", float, 0.55, lo=0.05, hi=1.0,
          help="Fraction of the BF16 peak causal flash attention reaches, forward and backward, over a 16K-token "
               "sequence (FlashAttention-2 on A100 0.55; on H100 0.32); shorter ones run slower (2K: 0.82 of it "
               "forward, 0.69 backward)."),
    Field("cudnn_attention_efficiency", float, None, lo=0.05, hi=1.0,
          help="The same for cuDNN fused attention (training.attention = cudnn): H100 0.54 (FlashAttention-3 "
               "class), A100 0.45 (slower than FlashAttention-2 there). Empty: as attention_efficiency."),
)

NODE_FIELDS = (
    Field("name", str, "custom node", help="Shown on the plan page; a catalog name fills the fields left empty."),
    Field("gpus", int, lo=1, hi=1024, help="GPUs per node (per server or compute tray)."),
    Field("nvlink_domain_gpus", int, None, lo=1, hi=65_536,
          help="GPUs in one NVLink domain; may span nodes (GB200 NVL72: 72). Default: gpus."),
    Field("nvlink_gbytes_per_s", float, lo=0.001, hi=1e5, unit="GB/s",
          help="Scale-up bandwidth per GPU, bidirectional as vendors quote it (H100 NVLink 4: 900)."),
    Field("nics", int, lo=0, hi=64, help="Scale-out NICs (ports) per node for compute traffic."),
    Field("nic_gbits_per_s", float, lo=0.001, hi=1e5, unit="Gb/s", help="Bandwidth of one NIC port."),
    Field("nvlink_sharp", bool, False,
          help="NVSwitch in-network reduction (NVLS) for all-reduce inside the NVLink domain (H100 and later)."),
    Field("host_gbytes_per_s", float, 128.0, lo=0.001, hi=1e5, unit="GB/s",
          help="Each GPU's link to CPU memory, bidirectional as vendors quote it (PCIe 5.0 x16: 128; GB200 "
               "NVLink-C2C: 900 per Grace CPU, shared by its two GPUs); activation offloading copies over it."),
)

FABRIC_FIELDS = (
    Field("name", str, "custom fabric", help="Shown on the plan page; a catalog name fills the fields left empty."),
    Field("topology", str, "fat_tree", choices=TOPOLOGIES,
          help="fat_tree: leaves and spines (tapered by oversubscription); rail_optimized: NIC i of every node on "
               "leaf i; dragonfly: all-to-all groups joined by global links; torus: 3D torus of nodes."),
    Field("latency_us", float, 1.0, lo=0.01, hi=10_000, unit="µs",
          help="One-way end-to-end latency (InfiniBand ~1, RoCE a few, TCP Ethernet 10-50)."),
    Field("oversubscription", float, 1.0, lo=1.0, hi=64.0,
          help="Leaf downlink to uplink bandwidth ratio (1 = full bisection); the global-link taper on a dragonfly."),
    Field("kind", str, "infiniband", choices=FABRIC_KINDS, help="Link technology."),
    Field("link_gbits_per_s", float, None, lo=0.001, hi=1e5, unit="Gb/s",
          help="Port speed of the fabric (HDR 200, NDR 400, XDR 800); a faster NIC runs at this speed. "
               "Default: the node's NIC speed."),
    Field("switch_radix", int, 64, lo=4, hi=2048, help="Ports per switch (NDR Quantum-2: 64)."),
    Field("pod_gpus", int, None, lo=1, hi=1_048_576,
          help="GPUs per full-bisection pod above the leaves (Llama 3: 3072); empty = one pod."),
    Field("pod_oversubscription", float, 1.0, lo=1.0, hi=64.0,
          help="Bandwidth taper between pods (Llama 3: 7)."),
    Field("group_gpus", int, None, lo=1, hi=1_048_576,
          help="Dragonfly: GPUs per group. Torus: ignored. Default: as many as one pod of switches holds."),
)

LAYOUT_FIELDS = (
    Field("tp", int, None, lo=1, hi=65_536, help="Tensor-parallel degree (inside one NVLink domain)."),
    Field("pp", int, None, lo=1, hi=2048, help="Pipeline-parallel stages."),
    Field("dp", int, None, lo=1, hi=1_048_576, help="Data-parallel replicas."),
    Field("cp", int, None, lo=1, hi=65_536, help="Context-parallel degree (splits the sequence)."),
    Field("ep", int, None, lo=1, hi=8192,
          help="Expert-parallel degree (MoE): experts split over this many ranks of a pipeline stage, folded over "
               "the TP, CP and DP ranks (Megatron-Core, expert tensor parallelism 1)."),
    Field("micro_batch", int, None, lo=1, hi=16_777_216, unit="sequences", help="Sequences per micro-batch."),
    Field("vpp", int, None, lo=1, hi=2048, help="Virtual pipeline stages per GPU (interleaved 1F1B)."),
    Field("recompute", str, None, choices=RECOMPUTE, help="Activation recomputation."),
    Field("recompute_fraction", float, None, lo=0.01, hi=1.0,
          help="With full recomputation: the share of each pipeline stage's layers recomputed (Megatron "
               "--recompute-method block, torchtitan's every-k-th-block AC, fms-fsdp selective_checkpointing); the "
               "others keep their activations. Default: every layer."),
    Field("sequence_parallel", bool, None, help="Megatron sequence parallelism (needs tp > 1)."),
    Field("zero", int, None, lo=0, hi=3, help="ZeRO stage: 0 plain DP, 1 distributed optimizer, 2, 3 (FSDP)."),
    Field("rank_order", str, None, choices=RANK_ORDERS, help="Rank order, innermost first."),
)

SECTIONS: dict[str, tuple[Field, ...]] = {
    "model": MODEL_FIELDS,
    "training": TRAINING_FIELDS,
    "cluster.gpu": GPU_FIELDS,
    "cluster.node": NODE_FIELDS,
    "cluster.fabric": FABRIC_FIELDS,
    "layout": LAYOUT_FIELDS,
}

MAX_GPUS = 1_048_576

# How many ranked layouts an answer keeps: the one bound for the CLI's --top and --rank, the API's ?top= and the
# saved plans (the form keeps the default). An answer's size, not a search bound: every layout is searched anyway.
TOP = Field("top", int, 10, lo=1, hi=50, help="How many ranked layouts the answer keeps.")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    gated_mlp: bool
    vocab: int
    seq_len: int
    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int
    dense_layers: int
    tied_embeddings: bool
    dropout: bool = True
    residual_streams: int = 1
    router_groups: int = 1
    router_group_top_k: int = 1

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0


@dataclass(frozen=True)
class TrainingSpec:
    global_batch: int
    precision: str
    tokens: float | None
    overlap_grad_reduce: bool
    attention: str
    framework: str = GENERIC
    tp_comm_overlap: bool = False
    tp_wgrad_overlap: bool = True
    elementwise: str = "fused"
    ep_comm_overlap: bool = False
    fp8_param_gather: bool = False
    fp8_weight_cache: bool = False
    ep_dispatch: str = "all_to_all"
    ep_dispatch_dtype: str = "bf16"
    expert_gemm: str = "streams"
    partition_activations: bool = False
    fp8_recipe: str = "tensorwise"
    cp_load_balance: bool = True
    cp_impl: str = "te"
    zero_granularity: str = "bucket"
    checkpoint_impl: str = "megatron"
    grad_reduce_dtype: str = "fp32"
    optimizer_states: str = "fp32"
    projections: str = "fused"
    cross_entropy: str = "fused"
    fp8_saved_inputs: str = "fp8"
    pp_comm_overlap: bool = True
    activation_offload_layers: int = 0
    expandable_segments: bool = False

    @property
    def saves_fp8_inputs(self) -> bool:
        """FP8 training whose linears keep the 1-byte cast of their inputs for the backward (Transformer Engine)."""
        return self.precision == "fp8" and self.fp8_saved_inputs == "fp8"


@dataclass(frozen=True)
class GPUSpec:
    name: str
    peak_tflops: float
    memory_gib: float
    memory_gbytes_per_s: float
    fp8_tflops: float | None
    sm_count: int
    gemm_efficiency: float = 0.80
    fp8_gemm_efficiency: float = 0.72
    sustained_clock: float = 1.0
    hbm_efficiency: float = 0.85
    kernel_overhead_us: float = 4.0
    attention_efficiency: float = 0.55
    cudnn_attention_efficiency: float | None = None
    bf16: bool | None = None  # None: yes (Ampere and later)

    @property
    def fp8_peak_tflops(self) -> float:
        """Dense FP8 peak: as given, else twice the BF16 peak (Hopper, Ada, Blackwell tensor cores)."""
        return 2.0 * self.peak_tflops if self.fp8_tflops is None else self.fp8_tflops


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: int
    nvlink_domain_gpus: int
    nvlink_gbytes_per_s: float
    nics: int
    nic_gbits_per_s: float
    nvlink_sharp: bool
    host_gbytes_per_s: float = 128.0


@dataclass(frozen=True)
class FabricSpec:
    name: str
    topology: str
    latency_us: float
    oversubscription: float
    kind: str
    link_gbits_per_s: float | None
    switch_radix: int
    pod_gpus: int | None
    pod_oversubscription: float
    group_gpus: int | None


@dataclass(frozen=True)
class ClusterSpec:
    num_gpus: int
    gpu: GPUSpec
    node: NodeSpec
    fabric: FabricSpec

    @property
    def num_nodes(self) -> int:
        return max(1, self.num_gpus // self.node.gpus)


@dataclass(frozen=True)
class LayoutSpec:
    """Pinned layout fields; None means "search this axis"."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    micro_batch: int | None = None
    vpp: int | None = None
    recompute: str | None = None
    recompute_fraction: float | None = None
    sequence_parallel: bool | None = None
    zero: int | None = None
    rank_order: str | None = None

    def pinned(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class PlanSpec:
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    layout: LayoutSpec = field(default_factory=LayoutSpec)

    def to_dict(self) -> dict[str, Any]:
        """Canonical plain-JSON form: every default filled in, catalog names expanded."""
        return asdict(self)


# --------------------------------------------------------------------------------------------------------
# Parsing


class _Collector:
    """Gathers FieldErrors so one pass reports every problem, not just the first."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, field_path: str, message: str) -> None:
        self.errors.append(FieldError(field_path, message))

    def raise_if_any(self) -> None:
        if self.errors:
            raise SpecError(self.errors)


def _coerce(f: Field, value: Any, path: str, errs: _Collector) -> Any:
    """Convert one JSON value to the field's type and check its bounds; None on error."""
    if value is None:
        if f.default is REQUIRED:
            errs.add(path, "is required")
        return None
    if f.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        errs.add(path, f"must be true or false, not {value!r}")
        return None
    if f.kind is str:
        if not isinstance(value, str):
            errs.add(path, f"must be a string, not {describe_value(value)}")
            return None
        value = value.strip()
        problem = text_problem(value)
        if problem:
            errs.add(path, problem)
            return None
        if f.choices and value not in f.choices:
            errs.add(path, f"must be one of {', '.join(f.choices)} (got {value[:40]!r})")
            return None
        if len(value) > 200:
            errs.add(path, "must be at most 200 characters")
            return None
        return value
    number = as_number(value)
    if number is None:
        errs.add(path, not_a_number(value, whole=f.kind is int))
        return None
    if math.isinf(number):
        # An integer too large for a float (JSON allows any number of digits), or Infinity.
        bound = f.hi if number > 0 else f.lo
        side = "most" if number > 0 else "least"
        errs.add(path, f"must be at {side} {quantity(bound, f.unit)}" if bound is not None else "must be finite")
        return None
    if f.kind is int:
        if number != math.floor(number):
            errs.add(path, f"must be a whole number (got {fmt_number(number)})")
            return None
        number = int(number)
    if f.lo is not None and number < f.lo:
        errs.add(path, f"must be at least {quantity(f.lo, f.unit)} (got {fmt_number(number)})")
        return None
    if f.hi is not None and number > f.hi:
        errs.add(path, f"must be at most {quantity(f.hi, f.unit)} (got {fmt_number(number)})")
        return None
    return number


def quantity(bound: float, unit: str) -> str:
    """A bound (or any count) with its unit, a count noun in the singular for one ("1 sequence", "2 sequences")."""
    if not unit:
        return fmt_number(bound)
    return f"{fmt_number(bound)} {unit[:-1] if bound == 1 and unit in ('sequences', 'tokens') else unit}"


# Unicode's bidirectional formatting characters (UAX #9: embeddings, overrides, isolates and marks).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt, Unicode 15.1): characters a renderer
# shows as nothing when it has no glyph for them, such as the combining grapheme joiner U+034F, the variation
# selectors U+FE00-FE0F and the Hangul fillers U+115F and U+3164, which are not all format characters (Cf).
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


def _shows_nothing(c: str) -> bool:
    point = ord(c)
    return unicodedata.category(c) in ("Cf", "Cc") or any(lo <= point <= hi for lo, hi in DEFAULT_IGNORABLE)


def invisible(text: str) -> bool:
    """Whether text shows nothing: spaces, and format, control and default-ignorable characters (a zero-width space,
    U+200B, made a plan heading of nothing but "on 64 × H100")."""
    return all(c.isspace() or unicodedata.category(c) in ("Zs", "Zl", "Zp") or _shows_nothing(c) for c in text)


def look_alike_key(name: str) -> str:
    """What a name reads as: Unicode compatibility form (NFKC: a decomposed "è" is the composed one), characters
    that show nothing dropped (a zero-width space, a variation selector), runs of spaces as one, case folded. Two
    catalog names with one key look the same in a menu, a plan title and a sweep's legend. (Letters of other scripts
    that look alike, a Cyrillic "Н" for a Latin "H", are Unicode's confusables, UTS #39: not judged here.)"""
    shown = "".join(c for c in unicodedata.normalize("NFKC", name) if not _shows_nothing(c))
    return " ".join(shown.split()).casefold()


def lone_surrogate(text: str) -> bool:
    """Whether `text` holds half of a UTF-16 surrogate pair (U+D800-U+DFFF), which UTF-8 cannot encode."""
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


MODIFIED_SUFFIX = " (modified)"


def modified_name(name: str) -> str:
    """The name of a catalog row whose values a request changed (a form's edit, a sweep's axis): a plan must not
    name hardware or a model it does not describe. Within the 200 characters a name may have."""
    return name[:200 - len(MODIFIED_SUFFIX)] + MODIFIED_SUFFIX


def unmodified_name(name: str) -> str | None:
    """The catalog row's name that `name` is the modified_name of ("H100 SXM5 80GB" for "H100 SXM5 80GB
    (modified)"), or None when it is no such name."""
    return name[:-len(MODIFIED_SUFFIX)] if name.endswith(MODIFIED_SUFFIX) else None


def text_problem(value: str) -> str | None:
    """Why a text value cannot be a name, or None. JSON's \\u escapes can spell a lone UTF-16 surrogate
    ("\\ud800"), which no UTF-8 page, database query or file can hold; control characters break pages and logs
    (and PostgreSQL refuses NUL); bidirectional controls reorder the page around the name."""
    if lone_surrogate(value):
        return "must be valid Unicode text (it holds a lone UTF-16 surrogate, such as \\ud800)"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "must not contain control characters"
    if any(c in BIDI_CONTROLS for c in value):
        return "must not contain bidirectional control characters (they reorder the page around it)"
    return None


def parse_top(value: Any, name: str = "top") -> int:
    """A request's `top` (a number, or text from a query string or a command line; None for the default) within
    TOP's bounds. Raises a SpecError naming `name` ("top", "--top", "--rank")."""
    errs = _Collector()
    top = _coerce(TOP, value, name, errs)
    errs.raise_if_any()
    return TOP.default if top is None else top


def fmt_number(x: float) -> str:
    """A bound or a value as the user would write it: 1048576, 0.5, 1e+30 (never rounded to 1.04858e+06), and
    exactly: 512.0000000000001 is not "512" (the shortest text that reads back as the same float)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# Numbers as people write them that the plain form refuses, and how to write them instead: thousands separated by
# commas ("1,048,576", as the sweep page writes budgets) and a decimal comma ("1,5").
THOUSANDS_TEXT = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
DECIMAL_COMMA_TEXT = re.compile(r"[+-]?\d+,\d+")


def not_a_number(value: Any, whole: bool = False) -> str:
    """The message for a value that is not a number, saying how to write one that was meant as a number (`whole`:
    a field of whole numbers, where "8,192" has only the one reading)."""
    message = f"must be a number, not {describe_value(value)}"
    text = value.strip() if isinstance(value, str) else ""
    if THOUSANDS_TEXT.fullmatch(text):
        # "1,500" could also be a decimal comma: say both readings rather than guess one
        plain = text.replace(",", "")
        if DECIMAL_COMMA_TEXT.fullmatch(text) and not whole:
            return f"{message}: write {plain} without thousands separators, or {text.replace(',', '.')} with a point"
        return f"{message}: write {plain} without thousands separators"
    if DECIMAL_COMMA_TEXT.fullmatch(text) and not whole:
        return f"{message}: write decimals with a point ({text.replace(',', '.')})"
    return message


def as_number(value: Any) -> float | None:
    """A JSON number or numeric text as a float; +-inf for one past any bound (more digits than a float holds,
    "1e400"); None for anything else, NaN and Infinity included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # more digits than a float holds: out of any bound, said as such
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value if math.isfinite(value) or isinstance(value, Overflow) else None
    if isinstance(value, str):
        # Plain decimal notation only: Python's float() also reads "1_000", "inf", "nan" and digits of other
        # scripts ("１２８"), which a person typing a number does not mean (and "1,000" it refuses).
        if not PLAIN_NUMBER.fullmatch(value.strip()):
            return None
        return float(value.strip())  # "1e400" is inf: out of bounds, not "not a number"
    return None


def _key_name(key: Any) -> str:
    """An unknown key as a printable, bounded field name (keys come from untrusted JSON)."""
    text = "".join(c if c.isprintable() else "?" for c in str(key))[:40]
    return text if text.strip() else repr(text)


def describe_value(value: Any) -> str:
    """A value as JSON names it (messages speak the spec's language, not Python's)."""
    if isinstance(value, str):
        return repr(value[:40])
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value) and not isinstance(value, Overflow):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return JSON_KINDS.get(type(value), type(value).__name__)


JSON_KINDS = {type(None): "null", dict: "an object", list: "a list", int: "a number", float: "a number",
              Overflow: "a number"}


def _section(data: Any, path: str, spec_fields: tuple[Field, ...], errs: _Collector) -> dict[str, Any] | None:
    """Coerce one JSON object against its field table; unknown keys are errors (they are usually typos)."""
    if not isinstance(data, Mapping):
        errs.add(path, "is required" if data is None else f"must be an object, not {describe_value(data)}")
        return None
    known = {f.name for f in spec_fields}
    for key in data:
        if key not in known:
            errs.add(f"{path}.{_key_name(key)}", f"unknown field (known: {', '.join(sorted(known))})")
    out: dict[str, Any] = {}
    for f in spec_fields:
        raw = data.get(f.name)
        if raw == "" and f.kind is not str:
            raw = None  # an empty form field means "not given"
        if f.name == "name" and isinstance(raw, str) and invisible(raw):
            raw = None  # a blank name is no name: the section's default ("custom model"), not an empty heading
        value = _coerce(f, raw, f"{path}.{f.name}", errs)
        out[f.name] = f.default if value is None and f.default is not REQUIRED else value
    return out


def section_problems(data: Any, spec_fields: tuple[Field, ...]) -> list[FieldError]:
    """What the field table refuses in one section's values (a catalog row read from a file), fields named bare."""
    errs = _Collector()
    _section(data, "", spec_fields, errs)
    return [FieldError(e.field.lstrip("."), e.message) for e in errs.errors]


def _hardware(data: Any, path: str, spec_fields: tuple[Field, ...], table: Mapping[str, Mapping] | None,
              errs: _Collector) -> dict[str, Any] | None:
    """A hardware entry is either the name of a catalog entry or an inline object; an inline object whose name
    is in the catalog inherits the fields it leaves out (e.g. sm_count) from that entry, and is named
    "NAME (modified)" where it changes any of them."""
    # A name that cannot be text is refused before the catalog is searched (a database cannot be queried for it);
    # an inline object's name is then refused with its other fields.
    problem = text_problem(data) if isinstance(data, str) else None
    if problem:
        errs.add(path, problem)
        return None
    if _neither_name_nor_object(data, path, "a catalog name", errs):
        return None
    if isinstance(data, str):
        entry = (table or {}).get(data.strip())
        if entry is None:
            names = sorted(table or {})
            hint = f" (known: {', '.join(names[:20])})" if names else " (no catalog available)"
            errs.add(path, f"unknown catalog name {data[:60]!r}{hint}")
            return None
        return _section(entry, path, spec_fields, errs)
    row = _catalog_row_named(data, table)
    if row is not None:
        data = {**row, **{k: v for k, v in data.items() if v is not None}}
    return _section(data, path, spec_fields, errs)


def _model(data: Any, presets: Mapping[str, Mapping] | None, errs: _Collector) -> dict[str, Any] | None:
    """The model: an inline object, or the name of a catalog preset ("Llama 3 70B"), read as the preset's fields.
    An inline object is taken as written, inheriting nothing; one that carries a preset's name with other values
    is named "NAME (modified)", as a hardware entry is."""
    if isinstance(data, str):
        return _hardware(data, "model", MODEL_FIELDS, presets, errs)
    if _neither_name_nor_object(data, "model", "a model preset's name", errs):
        return None
    preset = _catalog_row_named(data, presets)  # None unless `data` is an object named after a preset
    missing = [f.name for f in MODEL_FIELDS if f.default is REQUIRED and data.get(f.name) in (None, "")] \
        if preset is not None else []
    if missing:
        # {"name": "Llama 3 70B", "layers": 40} reads as the preset with one change, as it does for a GPU; say why
        # it is not, beside each "is required".
        errs.add("model", f"an inline model takes nothing from the preset {data['name'].strip()!r} of its name: "
                          f"give {', '.join(missing)} too, or name the preset (\"model\": \"{data['name'].strip()}\")")
    return _section(data, "model", MODEL_FIELDS, errs)


def _neither_name_nor_object(data: Any, path: str, name: str, errs: _Collector) -> bool:
    """A value that is neither text nor an object (nor absent, which the section calls required): the message names
    both forms the field takes ("must be an object" alone hid the name)."""
    if data is None or isinstance(data, (str, Mapping)):
        return False
    errs.add(path, f"must be {name} or an object, not {describe_value(data)}")
    return True


def _catalog_row_named(data: Any, table: Mapping[str, Mapping] | None) -> Mapping[str, Any] | None:
    """The catalog row whose name an inline object carries, if any."""
    if isinstance(data, Mapping) and isinstance(data.get("name"), str) and not text_problem(data["name"]):
        return (table or {}).get(data["name"].strip())
    return None


def _named_row(data: Any, table: Mapping[str, Mapping] | None) -> tuple[str, Mapping[str, Any]] | None:
    """(name, row) of the catalog row an inline object names, as "NAME" or as "NAME (modified)"; None for neither."""
    row = _catalog_row_named(data, table)
    if row is not None:
        return data["name"].strip(), row
    name = data.get("name") if isinstance(data, Mapping) else None
    base = unmodified_name(name.strip()) if isinstance(name, str) and not text_problem(name) else None
    if base is not None and base in (table or {}):
        return base, table[base]
    return None


def _rename_if_changed(section: dict[str, Any], named: tuple[str, Mapping[str, Any]] | None, path: str,
                       spec_fields: tuple[Field, ...]) -> None:
    """An inline `section` (its derived fields filled in) named after a catalog row is named "NAME" while it has all
    of the row's values and "NAME (modified)" (modified_name) where it has others, whichever of the two it was
    given: a plan never names hardware or a model it does not describe, and the same request made from the form,
    the JSON API or the CLI is one plan (the form's "custom" sections start from a row, edited or not, and a saved
    spec reads back unchanged)."""
    if named is None:
        return
    name, row = named
    # the row as the engine reads it (8 == 8.0, derived fields filled in), so a section written out in full matches
    stored = section_as_read(path, row)
    same = all(section.get(f.name) == stored.get(f.name) for f in spec_fields if f.name != "name")
    section["name"] = name if same else modified_name(name)


def section_as_read(path: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A catalog row of section `path` as the engine reads it: values coerced (8 == 8.0), defaults and derived
    fields filled in; a value the field tables refuse is left out."""
    return _derived(path, _section(row, path, SECTIONS[path], _Collector()) or {})


def _derived(path: str, section: dict[str, Any]) -> dict[str, Any]:
    """`section` with the fields the engine derives from others filled in (in place), where it has them all."""
    try:
        if path == "model":
            _fill_model_defaults(section)
        elif path == "cluster.node":
            section["nvlink_domain_gpus"] = section["nvlink_domain_gpus"] or section["gpus"]
    except (KeyError, TypeError):  # a catalog row the engine's rules refuse: compared as it stands
        pass
    return section


def _upgrade_training(data: Any) -> Any:
    """Specs saved before engine 2.2 said `recompute_early_stop` (a bool) for what `checkpoint_impl` names now;
    read them as they were meant, so a saved plan still opens and re-runs."""
    if not isinstance(data, Mapping) or "recompute_early_stop" not in data or "checkpoint_impl" in data:
        return data
    old = {k: v for k, v in data.items() if k != "recompute_early_stop"}
    flag = data["recompute_early_stop"]
    if isinstance(flag, bool):
        old["checkpoint_impl"] = "pytorch" if flag else "megatron"
        return old
    return data  # not a bool: reported as an unknown field, as any other


def parse_spec(data: Any, catalog: Mapping[str, Mapping[str, Mapping]] | None = None) -> PlanSpec:
    """Validate a spec document (already JSON-decoded) and return it as frozen dataclasses.

    `catalog` maps "gpu", "node" and "fabric" to {name: fields}; it resolves hardware given by name.
    Raises SpecError listing every problem, each naming its field.
    """
    errs = _Collector()
    if not isinstance(data, Mapping):
        errs.add("spec", f"must be a JSON object, not {describe_value(data)}")
        errs.raise_if_any()
    for key in data:
        if key not in ("model", "training", "cluster", "layout"):
            errs.add(_key_name(key), "unknown section (known: model, training, cluster, layout)")
    cat = catalog or {}
    model = _model(data.get("model"), cat.get("model"), errs)
    training = _section(with_stack(_upgrade_training(data.get("training"))), "training", TRAINING_FIELDS, errs)
    layout = _section({} if data.get("layout") is None else data["layout"], "layout", LAYOUT_FIELDS, errs)
    cluster_data = data.get("cluster")
    gpu = node = fabric = None
    num_gpus = None
    if not isinstance(cluster_data, Mapping):
        errs.add("cluster",
                 "is required" if cluster_data is None else f"must be an object, not {describe_value(cluster_data)}")
    else:
        for key in cluster_data:
            if key not in ("num_gpus", "gpu", "node", "fabric"):
                errs.add(f"cluster.{_key_name(key)}", "unknown field (known: fabric, gpu, node, num_gpus)")
        num_gpus = _coerce(Field("num_gpus", int, lo=1, hi=MAX_GPUS), cluster_data.get("num_gpus"),
                           "cluster.num_gpus", errs)
        gpu = _hardware(cluster_data.get("gpu"), "cluster.gpu", GPU_FIELDS, cat.get("gpu"), errs)
        node = _hardware(cluster_data.get("node"), "cluster.node", NODE_FIELDS, cat.get("node"), errs)
        fabric = _hardware(cluster_data.get("fabric"), "cluster.fabric", FABRIC_FIELDS, cat.get("fabric"), errs)
    # Cross-field rules run for every group of sections whose own fields are all valid, so one pass reports as
    # much as it can; they need their fields present and typed.
    bad = {e.field.split(".")[0] if not e.field.startswith("cluster") else "cluster" for e in errs.errors}
    if "model" not in bad:
        _derived("model", model)
        _rename_if_changed(model, _named_row(data.get("model"), cat.get("model")), "model", MODEL_FIELDS)
        _check_model(model, errs)
    if "training" not in bad:
        _check_training(training, errs)
    if not bad & {"cluster", "training"}:
        _derived("cluster.node", node)
        for section, key, spec_fields in ((gpu, "gpu", GPU_FIELDS), (node, "node", NODE_FIELDS),
                                          (fabric, "fabric", FABRIC_FIELDS)):
            _rename_if_changed(section, _named_row(cluster_data.get(key), cat.get(key)), f"cluster.{key}",
                               spec_fields)
        _check_cluster(num_gpus, gpu, node, fabric, training, errs)
    if not bad & {"cluster", "training", "model", "layout"}:
        _check_layout(layout, num_gpus, model, training, errs)
    errs.raise_if_any()
    return PlanSpec(
        model=ModelSpec(**model),
        training=TrainingSpec(**training),
        cluster=ClusterSpec(num_gpus=num_gpus, gpu=GPUSpec(**gpu), node=NodeSpec(**node),
                            fabric=FabricSpec(**fabric)),
        layout=LayoutSpec(**layout),
    )


def _fill_model_defaults(m: dict[str, Any]) -> None:
    m["kv_heads"] = m["kv_heads"] or m["heads"]
    m["ffn_hidden"] = m["ffn_hidden"] or 4 * m["hidden"]
    m["expert_ffn_hidden"] = m["expert_ffn_hidden"] or m["ffn_hidden"]
    m["dropout"] = not m["gated_mlp"] if m["dropout"] is None else m["dropout"]
    m["router_group_top_k"] = m["router_group_top_k"] or m["router_groups"]


def _check_model(m: dict[str, Any], errs: _Collector) -> None:
    if m["hidden"] % m["heads"]:
        errs.add("model.heads", f"must divide model.hidden ({m['hidden']})")
    if m["kv_heads"] > m["heads"] or m["heads"] % m["kv_heads"]:
        errs.add("model.kv_heads", f"must divide model.heads ({m['heads']})")
    if m["top_k"] > m["experts"]:
        errs.add("model.top_k", f"must be at most model.experts ({m['experts']})")
    groups, picked = m["router_groups"], m["router_group_top_k"]
    if groups > 1 and m["experts"] == 1:
        errs.add("model.router_groups", "router groups need an MoE model (experts > 1)")
    elif m["experts"] % groups:
        errs.add("model.router_groups", f"must divide model.experts ({m['experts']})")
    elif picked > groups:
        errs.add("model.router_group_top_k", f"must be at most model.router_groups ({groups})")
    elif m["experts"] >= m["top_k"] > (choosable := picked * (m["experts"] // groups)):  # else top_k's own message
        errs.add("model.router_group_top_k",
                 f"leaves {choosable} experts to choose from, fewer than model.top_k ({m['top_k']})")
    if m["experts"] == 1 and (m["shared_experts"] or m["dense_layers"]):
        errs.add("model.experts", "shared_experts and dense_layers need an MoE model (experts > 1)")
    if m["dense_layers"] >= m["layers"] and m["experts"] > 1:
        errs.add("model.dense_layers", f"must be less than model.layers ({m['layers']})")


def _check_training(training: dict[str, Any], errs: _Collector) -> None:
    if training["precision"] == "fp16" and training["optimizer_states"] == "bf16_remainder":
        errs.add("training.optimizer_states", "bf16_remainder keeps the fp32 master as the bf16 weight plus its low "
                                              "16 bits, and fp16 weights are not the high half of an fp32 number: "
                                              "use fp32 or bf16 with fp16 training")


def _check_cluster(num_gpus: int, gpu: dict, node: dict, fabric: dict, training: dict, errs: _Collector) -> None:
    per_node = node["gpus"]
    if num_gpus % per_node and per_node % num_gpus:
        errs.add("cluster.num_gpus",
                 f"must be a positive multiple of node.gpus ({per_node}), or a divisor of it for part of one node")
    domain = node["nvlink_domain_gpus"]
    if domain % per_node and per_node % domain:
        errs.add("cluster.node.nvlink_domain_gpus",
                 f"must be a multiple of node.gpus ({per_node}) or divide it")
    if num_gpus > per_node and node["nics"] < 1:
        errs.add("cluster.node.nics", "must be at least 1 when the cluster has more than one node")
    elif min(num_gpus, per_node) > domain and node["nics"] < 1:
        # GPUs of one node in different NVLink domains reach each other only through the node's NICs (the model
        # has no PCIe peer-to-peer path between domains).
        errs.add("cluster.node.nics", f"must be at least 1 when a node holds more than one NVLink domain "
                                      f"(node.gpus {per_node}, nvlink_domain_gpus {domain})")
    if training["precision"] == "bf16" and gpu["bf16"] is False:
        # Volta's tensor cores multiply FP16 only (NVIDIA Tesla V100 GPU Architecture whitepaper, 2017); PyTorch
        # reports no BF16 support there (torch.cuda.is_bf16_supported) and runs BF16 matmuls without tensor cores.
        errs.add("training.precision", f"bf16 needs a GPU with BF16 tensor cores, and {gpu['name']!r} has none "
                                       "(cluster.gpu.bf16 is no): train in fp16")
    if training["precision"] == "fp8" and gpu["fp8_tflops"] == 0:
        errs.add("training.precision", f"fp8 needs a GPU with FP8 tensor cores, and {gpu['name']!r} has none "
                                       f"(cluster.gpu.fp8_tflops is 0)")
    for key in ("pod_gpus", "group_gpus"):
        size = fabric[key]
        if size is not None and size % per_node:
            errs.add(f"cluster.fabric.{key}", f"must be a multiple of node.gpus ({per_node})")


def _check_layout(lay: dict[str, Any], num_gpus: int, m: dict[str, Any], t: dict[str, Any],
                  errs: _Collector) -> None:
    """Pins that contradict the GPU count or the batch are spec errors; pins that do not fit the model or the
    hardware (TP across an NVLink domain, out of memory) are rejections the search reports."""
    axes = [a for a in ("tp", "cp", "pp", "dp") if lay[a] is not None]
    product = math.prod(lay[a] for a in axes)
    if len(axes) == 4 and product != num_gpus:
        errs.add("layout.dp", f"tp·cp·pp·dp = {product} must equal cluster.num_gpus ({num_gpus})")
    elif axes and num_gpus % product:
        names = "·".join(axes)
        errs.add(f"layout.{axes[-1]}", f"{names} = {product} must divide cluster.num_gpus ({num_gpus})")
    if lay["dp"] is not None and t["global_batch"] % lay["dp"]:
        errs.add("layout.dp", f"must divide training.global_batch ({t['global_batch']})")
    if lay["recompute_fraction"] is not None and lay["recompute"] not in (None, "full"):
        errs.add("layout.recompute_fraction", f"applies to full recomputation only (layout.recompute is "
                                              f"{lay['recompute']})")
    if lay["micro_batch"] is not None and lay["micro_batch"] > t["global_batch"]:
        errs.add("layout.micro_batch", f"must be at most training.global_batch ({t['global_batch']})")
    if lay["ep"] is not None and lay["ep"] > 1 and m["experts"] == 1:
        errs.add("layout.ep", "needs a mixture-of-experts model: model.experts is 1 (a dense model runs EP 1)")
    elif lay["ep"] is not None and lay["ep"] > m["experts"]:
        errs.add("layout.ep", f"must be at most model.experts ({m['experts']})")
    elif lay["ep"] is not None and m["experts"] % lay["ep"]:
        # Each EP rank holds experts / EP whole experts: EP 3 of Mixtral's 8 was searched over 45,674 layouts,
        # every one rejected for it.
        errs.add("layout.ep", f"must divide model.experts ({m['experts']})")
    if lay["pp"] is not None and lay["pp"] > m["layers"]:
        errs.add("layout.pp", f"must be at most model.layers ({m['layers']})")
    if lay["vpp"] is not None and lay["vpp"] > 1 and lay["pp"] == 1:  # pinned both: a contradiction, not a search
        errs.add("layout.vpp", "virtual pipeline stages need layout.pp > 1 (it is pinned to 1)")
    if t["activation_offload_layers"] >= m["layers"]:
        # Megatron-Core refuses cpu_offloading_num_layers >= num_layers; the engine caps each stage's count.
        errs.add("training.activation_offload_layers", f"must be less than model.layers ({m['layers']})")
