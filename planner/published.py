"""Check the engine against published training runs (`planner/data/published_runs.json` format).

Each row becomes a plan spec with the published layout pinned (TP, PP, DP and whatever else the row states);
the engine searches only what the row leaves open (e.g. micro-batch size, interleaving), and the predicted
step time is compared with the measured one. Interpretation rules for rows, stated once here:
- Hardware: the GPU type names a catalog GPU and its usual node (A100 "80GB" or an 80 GB memory -> 80 GB, else the
  40 GB part that DGX A100 shipped with in 2020); a part the catalog lacks (GH200, PCIe cards) is refused, naming
  gpu_type; stated GPUs per node, NVLink domain, NICs and port speed override the node (fewer GPUs a node: a
  smaller NVLink domain where the node is the domain, and the usual NICs per GPU); the port speed picks the
  InfiniBand generation (100 EDR, 200 HDR, 400 NDR, 800 XDR); without a port speed, the bandwidth and kind (RoCE,
  Ethernet, EFA) the fabric notes give set one NIC per GPU.
- Attention kernel, precision, recompute, sharding, software switches (torch.compile, async TP, FP8 gathers) and
  the network in the fabric notes: what the row's text says, read by planner/runtext.py.
- Sequence parallelism and optimizer sharding are opt-in features a paper states when it uses them: a null
  means off (SP off, ZeRO stage 0). Both postdate the 2020-21 Megatron runs (Korthikanti et al. 2022).
- The measured step time: step_time_s, else the derived one, else from tokens/s/GPU, MFU or TFLOP/s/GPU (hardware
  FLOPs when the row says its TFLOP/s include recomputation, model FLOPs otherwise; attention counted over the
  full s x s square unless the row's tflops_kind says "causal").
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import runtext as rt
from .catalog import Catalog, load_catalog
from .model import flops_per_token, hardware_flops_per_step, model_flops_per_step, param_count
from .report import plan
from .errors import SpecError
from .memory import fragmentation_fraction
from .spec import PlanSpec, parse_spec

# Keyword in the row's gpu_type -> catalog GPU, first match wins (so "GB200" is not read as "B200"). H100s whose
# row says HBM2e are Meta's 96 GB, 500 W-capped Grand Teton part (torchtitan rows), a catalog GPU of its own.
GPU_BY_KEYWORD = (("GB300", "GB300"), ("B300", "B300"), ("GB200", "GB200"), ("B200", "B200"),
                  ("H200 NVL", "H200 NVL"), ("H200 PCIE", "H200 NVL"), ("H200", "H200 SXM 141GB"),
                  ("H800", "H800 SXM5 80GB"), ("H100", "H100 SXM5 80GB"), ("V100", "V100 SXM3 32GB"),
                  ("MI355X", "AMD MI355X"), ("MI325X", "AMD MI325X"), ("MI300X", "AMD MI300X"))
NODE_BY_GPU = {"GB300": "GB300 NVL72 compute tray", "B300": "HGX B300", "GB200": "GB200 NVL72 compute tray",
               "B200": "DGX B200", "H200 SXM 141GB": "HGX H200", "H200 NVL": "H200 NVL server (4-GPU NVLink bridges)",
               "H800 SXM5 80GB": "HGX H800",
               "H100 SXM5 80GB": "DGX H100", "H100 SXM5 96GB HBM2e 500W": "DGX H100",
               "V100 SXM3 32GB": "DGX-2 (V100)", "A100 SXM4 80GB": "DGX A100", "A100 SXM4 40GB": "DGX A100",
               "AMD MI355X": "AMD MI355X platform (8 GPUs)", "AMD MI325X": "AMD MI325X platform (8 GPUs)",
               "AMD MI300X": "AMD MI300X platform (8 GPUs)"}
# Parts a row may name that share a keyword with a catalog GPU but are not it: reading them as the catalog part
# would cost the run on the wrong peak, memory or node, silently. The planner asks for their figures instead.
NOT_IN_CATALOG = ((re.compile(r"GH200|GRACE[- ]HOPPER"), "the Grace Hopper superchip (96 or 144 GB, 4-superchip "
                   "nodes) is not the H200 SXM"),
                  (re.compile(r"^(?!.*SXM).*((H100|H800|A100|A800).*\bPCIE|\bPCIE\b.*(H100|H800|A100|A800))"),
                   "a PCIe card runs at a lower power limit than the SXM module the catalog holds, without NVSwitch"),
                  (re.compile(r"H100[- ]?NVL\b"), "the H100 NVL (94 GB, PCIe, paired NVLink bridges) is not the H100 "
                   "SXM"))
# The A800 is the A100 with its NVLink cut from 600 to 400 GB/s (NVIDIA A800 SXM4 datasheet, 2022); a row that
# names it and states no NVLink bandwidth gets that.
A800_NVLINK_GBYTES_PER_S = 400
FABRIC_BY_PORT = {100: "EDR InfiniBand fat tree", 200: "HDR InfiniBand fat tree", 400: "NDR InfiniBand fat tree",
                  800: "XDR InfiniBand fat tree"}
SLINGSHOT_FABRIC = "Dragonfly 400 Gb/s (Slingshot-style)"
# End-to-end latency of a fabric a row names only by its kind (as the catalog's RoCE, TCP and EFA fabrics).
FABRIC_LATENCY_US = {"roce": 3.0, "ethernet": 30.0, "efa": 15.0}
# Vocabulary of a tokenizer a row names but whose size it leaves out: the padded vocab_size of the model's
# published config.json (DeepSeek-V3: 129,280 = 40 x 3,232; Qwen3: 151,936 = 128 x 1,187, the rows' stated
# make_vocab_size_divisible_by).
VOCAB_BY_TOKENIZER = (("deepseek-v3", 129_280), ("qwen3", 151_936))
# GPT-3-like rows that state no vocabulary (Zero Bubble, sec. 5.1) used Megatron-LM's GPT-2 BPE, 50,257 tokens
# padded to a multiple of 128: 50,304.
GPT2_VOCAB_PADDED = 50_304
# Row fields the harness does arithmetic with (or hands to the spec as numbers); a row that gives one of them as
# anything but a number is reported naming the field, not with the TypeError it would raise further on.
ROW_NUMBERS = ("gpus", "gpus_per_node", "nvlink_domain_gpus", "nics_per_node", "ib_gbps_per_port",
               "nvlink_gbytes_per_s_per_gpu", "gpu_memory_gb", "params_billion", "layers", "hidden", "heads",
               "kv_heads", "ffn_hidden", "vocab", "seq_len", "global_batch", "micro_batch", "tp", "pp", "dp", "cp",
               "ep", "experts", "top_k", "expert_ffn_hidden", "shared_experts", "dense_layers", "step_time_s",
               "tokens_per_sec_per_gpu", "mfu_percent", "tflops_per_gpu", "peak_tflops_per_gpu_stated")
YES_NO = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False,
          "none": False}
# Row fields read as free text (planner/runtext.py): text or null (checked_row).
ROW_TEXTS = ("group", "model", "arch_notes", "gpu_type", "precision", "recompute", "pipeline_schedule",
             "tflops_kind", "fabric_notes", "notes", "verification", "memory")
# Appended to the layout of a published run that fits only without the fragmentation allowance (compare).
WITHOUT_MARGIN = " (fits without the fragmentation margin)"
# Rows whose authors explored the local batch per run without stating it: the search may pick any micro-batch
# dividing this many sequences per GPU (with gradient accumulation over the rest).
EXPLORED_LOCAL_BATCH = 16


# The PyTorch team's own benchmark documents (torchtitan's, and torchao's, measured with torchtitan). Those that
# state their H100 name one part, Meta's Grand Teton H100 (96 GB HBM2e, 500 W cap: torchtitan
# benchmarks/llama3_h100_202412_torchtitan.md and asyncTP_llama3_h100_2025-06_torchtitan.md "Hardware",
# docs/performance.md "HBM2e based lower TDP SXM H100"); one of them that leaves the variant out is read as run
# on the same fleet, not on the 700 W HBM3 part.
PYTORCH_TEAM_SOURCES = ("pytorch/torchtitan", "pytorch/ao ")  # the space: "pytorch/ao torchao/...", not pytorch/audio
STATED_H100_VARIANT = re.compile(r"\d+\s*GB|HBM|SXM|PCIE|NVL|\d+\s*W\b")


def gpu_name(row: dict[str, Any]) -> str:
    text = (row.get("gpu_type") or "").upper()
    source = str((row.get("source") or {}).get("title") or "").lower()
    unstated_pytorch_team = not STATED_H100_VARIANT.search(text) and any(s in source for s in PYTORCH_TEAM_SOURCES)
    for part, why in NOT_IN_CATALOG:
        if part.search(text):
            raise SpecError.one("gpu_type", f"{row.get('gpu_type')!r}: {why}; give its figures as a custom GPU "
                                            f"and node in a plan spec")
    if "H100" in text and ("HBM2E" in text or unstated_pytorch_team):
        return "H100 SXM5 96GB HBM2e 500W"
    for keyword, name in GPU_BY_KEYWORD:
        if keyword in text:
            return name
    if not text.strip():
        raise SpecError.one("gpu_type", "is not stated")
    if "A100" not in text and "A800" not in text:  # an A800 is an A100 with slower NVLink
        raise SpecError.one("gpu_type", f"{row.get('gpu_type')!r} names no GPU of the catalog")
    big = "80" in text or (row.get("gpu_memory_gb") or 0) >= 80
    return "A100 SXM4 80GB" if big else "A100 SXM4 40GB"


def _derived(row: dict[str, Any], key: str) -> Any:
    return (row.get("derived") or {}).get(key)


def _gated(row: dict[str, Any], catalog: Catalog) -> bool:
    """Gated (SwiGLU) MLP if the notes say so; otherwise whichever of gated / plain matches the stated parameter
    count better (Llama-style models have ffn_hidden 2.7-3.5 h and three matrices); otherwise plain when
    ffn_hidden is 4 h."""
    notes = (row.get("arch_notes") or "").lower()
    if any(word in notes for word in ("swiglu", "gated", "geglu")):
        return True
    if any(word in notes for word in ("gelu", "4h mlp", "relu")):
        return False
    stated = row.get("params_billion")
    if stated and not row.get("experts"):
        def error(gated: bool) -> float:
            doc = row_to_spec_doc(row, catalog, gated=gated)
            return abs(param_count(parse_spec(doc, catalog).model).total / 1e9 - stated)
        return error(True) < error(False)
    return bool(row.get("ffn_hidden")) and row["ffn_hidden"] != 4 * row["hidden"]


def _vocab(row: dict[str, Any]) -> int | None:
    if row.get("vocab"):
        return row["vocab"]
    notes = (row.get("arch_notes") or "").lower()
    for tokenizer, size in VOCAB_BY_TOKENIZER:
        if f"tokenizer {tokenizer}" in notes or f"/{tokenizer}" in notes:
            return size
    if "gpt-3" in (row.get("model") or "").lower() or "gpt-3" in notes:
        return GPT2_VOCAB_PADDED
    return None


def _global_batch(row: dict[str, Any]) -> int | None:
    """Stated (sequences, or tokens per batch / seq_len), else derived, else one micro-batch per DP rank (the
    rows without one say no gradient accumulation was used); DP is GPUs / (TP x PP x CP) where the row leaves it
    out."""
    if row.get("global_batch"):
        return row["global_batch"]
    if row.get("tokens_per_batch") and row.get("seq_len"):
        return int(row["tokens_per_batch"]) // row["seq_len"]
    if _derived(row, "derived_global_batch"):
        return int(_derived(row, "derived_global_batch"))
    if _derived(row, "derived_tokens_per_batch"):
        return int(_derived(row, "derived_tokens_per_batch")) // row["seq_len"]
    dp = row.get("dp") or _derived(row, "derived_dp") or _implied_dp(row)
    if dp and not row.get("micro_batch") and "explored per run" in (row.get("recompute") or "").lower():
        # The authors picked the best local batch per run: offer the search up to EXPLORED_LOCAL_BATCH per GPU.
        return dp * EXPLORED_LOCAL_BATCH
    return dp * (row.get("micro_batch") or 1) if dp else None


def _implied_dp(row: dict[str, Any]) -> int | None:
    """GPUs / (TP x PP x CP) when the row states the others and they divide its GPUs."""
    model_parallel = (row.get("tp") or 1) * (row.get("pp") or 1) * (row.get("cp") or 1)
    gpus = row.get("gpus") or 0
    return gpus // model_parallel if gpus and gpus % model_parallel == 0 else None


# A model's shape a row may leave to its name: the catalog preset's fields for those the row leaves null.
PRESET_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k",
                "expert_ffn_hidden", "shared_experts", "dense_layers")


def model_preset(row: dict[str, Any], catalog: Catalog) -> dict[str, Any] | None:
    """The catalog model preset the row's model names ("Llama 3 70B", "GPT-3 175B (Brown et al.)"), when the row
    leaves its shape out; the longest preset name found in the model text wins, its parenthetical aside."""
    if row.get("layers") and row.get("hidden") and row.get("heads"):
        return None
    text = " ".join(str(row.get("model") or "").lower().split())
    names = sorted(catalog.get("model", {}), key=lambda n: -len(n))
    found = next((n for n in names if n.split(" (")[0].lower() in text), None)
    return catalog["model"][found] if found else None


def _model_doc(row: dict[str, Any], catalog: Catalog, gated: bool | None) -> dict[str, Any]:
    notes = (row.get("arch_notes") or "").lower()
    preset = model_preset(row, catalog)
    if preset is not None:
        row = {**row, **{k: preset.get(k) for k in PRESET_SHAPE if row.get(k) is None and preset.get(k)}}
        if gated is None and not any(w in notes for w in ("swiglu", "gated", "geglu", "gelu", "relu")):
            gated = preset.get("gated_mlp", True)
    model = {"name": row.get("model"), "layers": row.get("layers"), "hidden": row.get("hidden"),
             "heads": row.get("heads"), "kv_heads": row.get("kv_heads"), "ffn_hidden": row.get("ffn_hidden"),
             "vocab": _vocab(row), "seq_len": row.get("seq_len"),
             "gated_mlp": _gated(row, catalog) if gated is None else gated,
             "tied_embeddings": ("tied" in notes and "untied" not in notes) if preset is None or notes
             else bool(preset.get("tied_embeddings")), "dropout": rt.dropout(row)}
    for key in ("experts", "top_k", "expert_ffn_hidden", "shared_experts", "dense_layers"):
        if row.get(key) and not (key in ("experts", "top_k") and row[key] == 1):
            model[key] = row[key]
    model.update(_routing(model, catalog))
    if rt.affirmed(r"\bmhc\b|hyper[- ]connections?", notes):
        model["residual_streams"] = rt.hyper_connection_streams(notes)
    return model


# The shape that names an MoE architecture, for the routing rows leave out (_routing).
ROUTED_SHAPE = ("layers", "hidden", "experts", "top_k", "expert_ffn_hidden", "shared_experts")


def _routing(model: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The router groups of the catalog preset with the row's MoE shape: group-limited routing is part of an
    architecture (DeepSeek-V3's 8 groups, 4 per token, are in its config.json and every recipe of it), which the
    rows give by name and shape, not by router setting."""
    if (model.get("experts") or 1) <= 1:
        return {}
    for preset in catalog.get("model", {}).values():
        if all(preset.get(k) == model.get(k) for k in ROUTED_SHAPE) and (preset.get("router_groups") or 1) > 1:
            return {"router_groups": preset["router_groups"], "router_group_top_k": preset["router_group_top_k"]}
    return {}


def _layout_doc(row: dict[str, Any], model: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    layout = {k: row.get(k) if row.get(k) is not None else _derived(row, f"derived_{k}")
              for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch")}
    interleaved = rt.affirmed(r"interleaved", (row.get("pipeline_schedule") or "").lower())  # not "non-interleaved"
    vp = row.get("vp") or _derived(row, "derived_vp") or (interleaved and _derived(row, "derived_chunks_per_stage")) \
        or rt.virtual_stages(row)
    schedule = (row.get("pipeline_schedule") or "").lower()
    layout["vpp"] = rt.first_int(vp) or (1 if "1f1b" in schedule and not interleaved else None)
    if (layout["pp"] or 1) > 1 and (defaults := rt.torchtitan_pipeline(row)) is not None:
        count, size, stages = defaults
        if not vp:
            layout["vpp"] = stages
        local = (_global_batch(row) or 0) // (layout["dp"] or 1)  # sequences per DP rank (CP ranks share them)
        split = local // count if count and local >= count and local % count == 0 else None
        if layout["micro_batch"] is None:
            layout["micro_batch"] = size or split
    layout["recompute"] = rt.recompute_mode(row)
    if rt.block_level(row) and (share := _block_share(row, model, catalog)) is not None:
        layout["recompute"], layout["recompute_fraction"] = "full", round(share, 4)
    # PyTorch-native tensor parallelism (DTensor, torchtitan's apply_tp) always shards the norms along the
    # sequence (SequenceParallel on attention_norm, ffn_norm and norm: torchtitan parallelize_llama.py @9dec370),
    # so a native row that does not say is sequence-parallel; elsewhere only a row that says so is.
    stated = row.get("sequence_parallel")
    sp = bool(stated) if stated is not None else rt.native_stack(row)
    layout["sequence_parallel"] = sp and (layout["tp"] or 1) > 1
    layout["zero"] = rt.zero_stage(row.get("optimizer_sharding"))
    layout["cp"] = layout["cp"] or 1
    layout["ep"] = layout["ep"] or 1
    return {k: v for k, v in layout.items() if v is not None}


def _block_share(row: dict[str, Any], model: dict[str, Any], catalog: Catalog) -> float | None:
    """The share of layers a block-level checkpointing row recomputes (runtext.recompute_fraction), from the
    model's forward FLOPs per token: all of them and those of the layers."""
    try:
        m = parse_spec({"model": model, "training": {"global_batch": 1},
                        "cluster": {"num_gpus": 1, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                                    "fabric": "NDR InfiniBand fat tree"}}, catalog).model
    except SpecError:
        return None
    fpt = flops_per_token(m)
    layers = m.layers * (fpt.gemm_per_layer + fpt.attention_per_layer)
    return rt.recompute_fraction(row, 3.0 * fpt.forward(m.layers), layers)


def row_to_spec_doc(row: dict[str, Any], catalog: Catalog, gated: bool | None = None) -> dict[str, Any]:
    """The plan spec document of a published run, with its stated layout pinned."""
    row = checked_row(row)
    gpu = gpu_name(row)
    node, fabric = _network(row, catalog, gpu)
    notes = (row.get("notes") or "").lower()
    model = _model_doc(row, catalog, gated)
    native = rt.native_stack(row)
    return _deepspeed_pipeline(row, _pipelined_fsdp(row, {"model": model,
            "training": {"global_batch": _global_batch(row), "precision": rt.precision(row, gpu),
                         "attention": rt.attention_kernel(row, gpu), "tp_comm_overlap": rt.tp_overlap(row),
                         "tp_wgrad_overlap": rt.tp_wgrad_overlap(row, gpu),
                         "elementwise": rt.elementwise(row), "projections": rt.projections(row),
                         "cross_entropy": rt.cross_entropy(row),
                         "checkpoint_impl": "pytorch" if native else "megatron",
                         "ep_comm_overlap": rt.ep_overlap(row),
                         "fp8_param_gather": rt.fp8_gather(row), "zero_granularity": rt.zero_granularity(row),
                         "grad_reduce_dtype": rt.grad_reduce_dtype(row),
                         "optimizer_states": rt.optimizer_states(row),
                         "fp8_recipe": rt.fp8_recipe(row),
                         # torchao float8 (the PyTorch-native stacks' FP8) keeps its linears' 16-bit inputs
                         "fp8_saved_inputs": "bf16" if native else "fp8",
                         # Megatron-Core passes is_first_microbatch to Transformer Engine, which then casts the
                         # weights once per step; the PyTorch-native stacks cast them in every forward
                         "fp8_weight_cache": not native,
                         "pp_comm_overlap": rt.pp_overlap(row),
                         # torchtitan runs PyTorch's context_parallel; Megatron-Core, Transformer Engine's ring
                         "cp_impl": "pytorch" if native else "te",
                         "activation_offload_layers": rt.offload_layers(row),
                         "expandable_segments": rt.expandable_segments(row),
                         "ep_dispatch": "dedup" if rt.affirmed(r"deepep|hybridep", notes) else "all_to_all",
                         "ep_dispatch_dtype": rt.ep_dispatch_dtype(row),
                         # torchtitan's MoE runs torch._grouped_mm; Megatron-Core, Transformer Engine's GroupedLinear
                         "expert_gemm": "grouped" if native else "streams",
                         "partition_activations": rt.partition_activations(row)},
            "cluster": {"num_gpus": row["gpus"], "gpu": gpu, "node": node, "fabric": fabric},
            "layout": _layout_doc(row, model, catalog)}))


def _deepspeed_pipeline(row: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """DeepSpeed's pipeline engine runs one schedule, plain 1F1B without virtual stages, and reduces the
    gradients after the whole batch's last backward, not behind it (deepspeed/runtime/pipe/schedule.py,
    TrainSchedule.steps: ReduceTiedGrads, ReduceGrads and OptimizerStep on the last step). A row that ran it
    (Megatron-DeepSpeed, GPT-NeoX) and states no virtual stages ran none."""
    layout = doc["layout"]
    if (layout.get("pp") or 1) > 1 and rt.deepspeed_stack(row):
        layout.setdefault("vpp", 1)
        doc["training"]["overlap_grad_reduce"] = False
    return doc


def _pipelined_fsdp(row: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """PyTorch FSDP2 under PyTorch's pipeline schedules holds what ZeRO-1 holds: the schedule turns off resharding
    and gradient reduction for every micro-batch's backward but the last (torch.distributed.pipelining.stage,
    backward_maybe_with_nosync: set_reshard_after_backward(False), set_requires_gradient_sync(False)), and
    torchtitan keeps the gathered weights after the forward under PP (reshard_after_forward=False, "to avoid
    per-microbatch all-gathers"). So a stage's 16-bit weights stay gathered and its gradients accumulate unsharded
    for the whole step, gathered once and reduce-scattered once; the reduce-scatter runs after the last
    micro-batch's backward has finished (the schedule calls FSDP's post-backward by hand), not behind it.

    Any other stack said to shard gradients or weights under a pipeline (ZeRO-2 or -3 with PP, as Llama 3's
    "FSDP-style" sharding over its 4D parallelism) is read the same way, as the planner itself refuses ZeRO-2/3
    with PP (search.py: no stack shards them across pipeline micro-batches): it holds what ZeRO-1 holds."""
    layout = doc["layout"]
    if (layout.get("zero") or 0) >= 2 and (layout.get("pp") or 1) > 1:
        layout["zero"] = 1
        if rt.native_stack(row):
            doc["training"]["overlap_grad_reduce"] = False
    return doc


def checked_row(row: Any) -> dict[str, Any]:
    """The row with every field the harness reads checked, and three shorthands spelled out: a yes/no recompute
    (true: the stack's activation checkpointing of whole layers, full; false: none), a yes/no sequence_parallel,
    and a source given as its bare title. A field of the wrong kind raises SpecError naming it, as a bad spec field does."""
    if not isinstance(row, dict):
        raise SpecError.one("row", f"must be an object of run fields, not {_shown(row)}")
    for key in ROW_NUMBERS:
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise SpecError.one(key, f"must be a number of 0 or more, not {_shown(value)}")
    out = dict(row)
    if isinstance(out.get("recompute"), bool):
        out["recompute"] = "full" if out["recompute"] else "none"
    if isinstance(out.get("source"), str):
        out["source"] = {"title": out["source"]}
    sp = out.get("sequence_parallel")
    if sp is not None and not isinstance(sp, bool):  # "yes", "no", 0, 1 as a table writes them
        word = str(sp).strip().lower()
        if word not in YES_NO:
            raise SpecError.one("sequence_parallel", f"must be true or false, not {_shown(sp)}")
        out["sequence_parallel"] = YES_NO[word]
    for key in ROW_TEXTS:
        if out.get(key) is not None and not isinstance(out[key], str):
            raise SpecError.one(key, f"must be text, not {_shown(out[key])}")
    for key in ("source", "derived"):
        if out.get(key) is not None and not isinstance(out[key], dict):
            raise SpecError.one(key, f"must be an object, not {_shown(out[key])}")
    sharding = out.get("optimizer_sharding")
    if sharding is not None and not isinstance(sharding, (str, int)):
        raise SpecError.one("optimizer_sharding", f"must be text or a ZeRO stage, not {_shown(sharding)}")
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _network(row: dict[str, Any], catalog: Catalog, gpu: str) -> tuple[dict[str, Any], str | dict[str, Any]]:
    """The node (the GPU's usual one, with what the row states overriding it) and the fabric: InfiniBand of the
    stated port speed; else what the fabric notes give (bandwidth per GPU or per node, RoCE / Ethernet / EFA),
    one NIC per GPU carrying the GPU's share."""
    usual = catalog["node"][NODE_BY_GPU[gpu]]
    node = dict(usual)
    for key, field in (("gpus_per_node", "gpus"), ("nvlink_domain_gpus", "nvlink_domain_gpus"),
                       ("nics_per_node", "nics"), ("ib_gbps_per_port", "nic_gbits_per_s"),
                       ("nvlink_gbytes_per_s_per_gpu", "nvlink_gbytes_per_s")):
        if row.get(key):
            node[field] = row[key]
    if usual["nvlink_domain_gpus"] == usual["gpus"] and not row.get("nvlink_domain_gpus"):
        # A node whose NVLink domain is the node: fewer GPUs a node (4 of a DGX's 8) is a smaller domain, not one
        # that spans nodes (only NVL72-style racks do, and their trays say so in the catalog).
        node["nvlink_domain_gpus"] = min(node["nvlink_domain_gpus"], node["gpus"])
    if not row.get("nics_per_node"):  # the usual node's NICs per GPU, on the stated GPUs
        node["nics"] = max(1, round(usual["nics"] * node["gpus"] / usual["gpus"]))
    per_gpu, kind = rt.network(row, node["gpus"])
    if per_gpu and not (row.get("nics_per_node") or row.get("ib_gbps_per_port")):
        node["nics"], node["nic_gbits_per_s"] = node["gpus"], per_gpu
    if "A800" in (row.get("gpu_type") or "").upper() and not row.get("nvlink_gbytes_per_s_per_gpu"):
        node["nvlink_gbytes_per_s"] = A800_NVLINK_GBYTES_PER_S
    if row["gpus"] < node["gpus"]:
        node["gpus"] = node["nvlink_domain_gpus"] = row["gpus"]  # part of one node (Zero Bubble's 8-GPU rows)
    if node["nvlink_domain_gpus"] == 72 and row["gpus"] % 72 and row["gpus"] % 64 == 0:
        node["nvlink_domain_gpus"] = 64  # NVL72 racks run jobs of 64 GPUs (16 of 18 trays, 2 spares)
    if kind == "slingshot":
        # HPE Slingshot: the catalog's Slingshot-style dragonfly (RoCE-class latency), at the row's port rate.
        fabric = dict(catalog["fabric"][SLINGSHOT_FABRIC], name="Slingshot dragonfly (the run's fabric notes)")
        return node, {**fabric, "link_gbits_per_s": node["nic_gbits_per_s"]}
    if kind in (None, "infiniband") or row.get("ib_gbps_per_port"):
        return node, FABRIC_BY_PORT.get(int(node["nic_gbits_per_s"]), "NDR InfiniBand fat tree")
    return node, {"name": f"{kind} fat tree (the run's fabric notes)", "topology": "fat_tree", "kind": kind,
                  "latency_us": FABRIC_LATENCY_US[kind], "switch_radix": 64}


def measured_step_time(row: dict[str, Any], spec: PlanSpec) -> float | None:
    if row.get("step_time_s"):
        return float(row["step_time_s"])
    if (row.get("derived") or {}).get("derived_step_time_s"):
        return float(row["derived"]["derived_step_time_s"])
    tokens = spec.training.global_batch * spec.model.seq_len
    n = spec.cluster.num_gpus
    if row.get("tokens_per_sec_per_gpu"):
        return tokens / (row["tokens_per_sec_per_gpu"] * n)
    model_flops = model_flops_per_step(spec.model, spec.training.global_batch)
    kind = (row.get("tflops_kind") or "").lower()
    if "causal" in kind and not re.search(r"\bnot\s+halved|causal[^.;,]{0,20}\bnot\b", kind):
        # The row counts only the unmasked half of the attention square (model.flops_per_token counts all of it).
        half_attention = 3 * 0.5 * flops_per_token(spec.model).attention_per_layer * spec.model.layers
        model_flops -= half_attention * spec.training.global_batch * spec.model.seq_len
    if row.get("mfu_percent"):
        # MFU is a share of the peak its publisher divided by (an FP8 run may quote FP8's); the catalog's BF16 peak
        # where the row states none.
        peak = row.get("peak_tflops_per_gpu_stated") or spec.cluster.gpu.peak_tflops
        return model_flops / (row["mfu_percent"] / 100 * peak * 1e12 * n)
    if row.get("tflops_per_gpu"):
        recompute = spec.layout.recompute or "none"
        # Hardware FLOPs where the row counts the recomputation (Narayanan et al. 2021, eq. 3); model FLOPs where it
        # says it does not ("recompute not counted", "activation recompute NOT counted").
        counted = rt.affirmed(r"recompute|recomputation|eq\.3", kind) and not re.search(
            r"(recompute|recomputation)[^.;,]{0,12}\bnot\b", kind)
        flops = hardware_flops_per_step(spec.model, spec.training.global_batch, recompute) if counted else model_flops
        return flops / (row["tflops_per_gpu"] * 1e12 * n)
    return None


@dataclass(frozen=True)
class Comparison:
    id: str
    measured_s: float
    predicted_s: float | None    # None: the engine found the published layout infeasible
    layout: str
    why: str = ""
    memory_gib: float | None = None  # the predicted peak memory per GPU of the published layout

    @property
    def error(self) -> float | None:
        return None if self.predicted_s is None else self.predicted_s / self.measured_s - 1.0


# An overlay's layout key and the row field that states it; the row's own value wins.
OVERLAY_ROW_FIELDS = {"micro_batch": "micro_batch", "vpp": "vp", "recompute": "recompute",
                      "sequence_parallel": "sequence_parallel", "zero": "optimizer_sharding"}


def apply_overlay(doc: dict[str, Any], overlay: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """Add layout details the row leaves null but its authors published elsewhere (launch scripts). A detail the
    row states itself is kept, so an edited copy of a reference row is costed as edited."""
    for key, field in OVERLAY_ROW_FIELDS.items():
        if key in overlay and row.get(field) is None:
            doc["layout"][key] = overlay[key]
    if "overlap_grad_reduce" in overlay:
        doc["training"]["overlap_grad_reduce"] = overlay["overlap_grad_reduce"]
    return doc


def compare(rows: list[dict[str, Any]], catalog: Catalog | None = None,
            overlays: dict[str, dict[str, Any]] | None = None,
            training: dict[str, Any] | None = None) -> list[Comparison]:
    """Each row's prediction with its published layout pinned, against what it measured. `training` replaces
    training options of every row's spec (bench/stack_presets.py: a stack's settings instead of the run's own)."""
    catalog = catalog or load_catalog()
    out = []
    for row in rows:
        try:
            row = checked_row(row)
            doc = apply_overlay(row_to_spec_doc(row, catalog), (overlays or {}).get(row.get("id"), {}), row)
            doc["training"].update(training or {})
            spec = parse_spec(doc, catalog)
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            # A row this harness cannot turn into a spec is reported, not raised: one odd row must not hide
            # the others' results.
            why = str(exc) if isinstance(exc, SpecError) else f"row lacks a usable {exc}"
            out.append(Comparison(str(row.get("id")), float("nan"), None, "", f"no spec: {why}"))
            continue
        measured = measured_step_time(row, spec)
        if measured is None:
            continue
        answer, label = plan(spec, top=1), ""
        if "out_of_memory" in answer["rejected_examples"] and fragmentation_fraction(spec.training) > 0:
            # The run ran, so its layout fit. The fragmentation allowance is a planning margin for the caching
            # allocator (memory.fragmentation_fraction), not memory the layout needs: a published run is judged
            # against the memory it needs, and says so where that matters: the layout fits only without the
            # margin, or the margin made the search pick a costlier setting the row leaves open (recompute).
            # Where the margin rejected nothing, planning without it gives the same answer: not planned again.
            relaxed = plan(replace(spec, training=replace(spec.training, expandable_segments=True)), top=1)
            if relaxed["plans"] and (not answer["plans"]
                                     or relaxed["plans"][0]["label"] != answer["plans"][0]["label"]):
                answer, label = relaxed, WITHOUT_MARGIN
            # otherwise the reasons stay the planner's own, margin included
        if answer["plans"]:
            best = answer["plans"][0]
            out.append(Comparison(row["id"], measured, best["step_time_s"], best["label"] + label,
                                  memory_gib=best["memory_gib"]["total"]))
        else:
            why = "; ".join(answer["rejected_examples"].values())
            out.append(Comparison(row["id"], measured, None, "", why))
    return out


def error_table(comparisons: list[Comparison]) -> str:
    lines = [f"{'run':<26} {'measured s':>10} {'predicted s':>11} {'error':>7}  layout"]
    for c in comparisons:
        pred = f"{c.predicted_s:11.3f}" if c.predicted_s is not None else f"{'infeasible':>11}"
        err = f"{c.error:+7.1%}" if c.error is not None else f"{'-':>7}"
        lines.append(f"{c.id:<26} {c.measured_s:10.3f} {pred} {err}  {c.layout or c.why}")
    errors = [abs(c.error) for c in comparisons if c.error is not None]
    if errors:
        lines.append(f"median |error| {statistics.median(errors):.1%}, max |error| {max(errors):.1%}, "
                     f"{len(errors)} runs")
    return "\n".join(lines)


def load_overlays(path: Path | str) -> dict[str, dict[str, Any]]:
    return json.loads(Path(path).read_text())["runs"]


def load_rows(path: Path | str) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text())
    return data["cases"] if isinstance(data, dict) else data
