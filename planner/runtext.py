"""What the free-text fields of a published run say about how it ran (planner/published.py turns a row into a spec).

Every rule reads what a row states, in its own words, and never its measured figure: the precision, the recompute
mode, the optimizer sharding, the software stack and its switches (torch.compile, async TP, FP8 gathers), the
attention kernel and the network between nodes. Where a row says nothing, the rule returns None or the stack's
usual setting, stated in the function's docstring. The rules name no group of the reference files, so a row from
another source in the same format reads the same way.
"""
from __future__ import annotations

import re
from typing import Any

from .errors import SpecError
from .spec import PRECISIONS

PRE_FLASH_GPUS = ("V100", "A100")
# Stacks whose attention runs through Transformer Engine's DotProductAttention, and the words a row uses to name
# FlashAttention itself as its kernel (which then wins over the stack's default).
TE_STACKS = re.compile(r"transformer[ _]engine|megatron[- ]core|\bmcore\b|\bnemo\b|megatron-bridge"
                       r"|megatron-lm examples/moe_recipes")
NAMED_FLASH = ("flashattention", "flash-attn", "flash_attn", "attention_backend flash", "attention-backend flash",
               "sdpa")


def text_of(row: dict[str, Any], *keys: str) -> str:
    """The named fields of a row, joined and lower-cased."""
    return " ".join(str(row.get(k) or "") for k in keys).lower()


# A mention that says the thing was not used: "no FSDP", "without FSDP", "non-FSDP" before it; "FSDP 0", "FSDP=0",
# "FSDP: off", "FSDP n/a", "FSDP disabled" after it (tables that list every parallelism with its size).
NEGATED_BEFORE = re.compile(r"\b(no|without|not|non)[- ]?(using |use of |with )?(--)?$")  # "no --tp-comm-overlap"
NEGATED_AFTER = re.compile(r"\s*[:=]?\s*(0|off|false|no|none|n/a|disabled|not used)(?![\w.])")


# A mention that names the thing as what the run is compared with: "1.2x faster than Megatron-LM", "vs. FP8",
# "compared with DeepSpeed", "relative to the BF16 baseline".
COMPARED_BEFORE = re.compile(r"\b(than|vs\.?|versus|compared (to|with)|against|relative to)\s+(the\s+)?$")


def affirmed(word: str, text: str) -> bool:
    """Whether the text names `word` (a regex) as used: some mention of it that no negation qualifies and that
    does not name it as what the run is compared with."""
    for m in re.finditer(word, text):
        if NEGATED_BEFORE.search(text[max(0, m.start() - 18):m.start()]):
            continue
        if COMPARED_BEFORE.search(text[max(0, m.start() - 24):m.start()]):
            continue
        if NEGATED_AFTER.match(text, m.end()):
            continue
        return True
    return False


def megatron_stack(row: dict[str, Any]) -> bool:
    """A Megatron-family stack (Megatron-LM / -Core / -Bridge, NeMo, Transformer Engine models), named as used in
    the row or its group (not its source, whose title may only compare with one; nor "not Megatron", "faster
    than Megatron-LM")."""
    text = text_of(row, "id", "group", "precision", "notes", "optimizer_sharding", "model")
    return affirmed(r"megatron|" + TE_STACKS.pattern, text)


def deepspeed_stack(row: dict[str, Any]) -> bool:
    """A run of DeepSpeed's engine (Megatron-DeepSpeed, GPT-NeoX, DeepSpeed ZeRO), named as used in the row."""
    return affirmed(r"deepspeed", text_of(row, "id", "group", "notes", "optimizer_sharding", "model",
                                          "pipeline_schedule"))


def hyper_connection_streams(text: str) -> int:
    """The residual streams a row's hyper-connections keep: the expansion rate it states ("expansion rate 4",
    "n = 4", "hc_mult 4"), else mHC's 4 (DeepSeek-V4's, and the runs of DeepSeek-AI's mHC paper, 2025)."""
    stated = re.search(r"(?:expansion[- ]rate|hc[-_ ]mult|residual streams?|\bn)\s*[:=]?\s*(\d+)", text)
    return int(stated.group(1)) if stated else 4


def partition_activations(row: dict[str, Any]) -> bool:
    """Whether the run split its checkpointed layer inputs over the TP ranks: Megatron-LM's
    --distribute-saved-activations (formerly --distribute-checkpointed-activations), DeepSpeed's
    partition_activations (Megatron-DeepSpeed --partition-activations), metaseq's distribute_checkpointed_activations."""
    text = text_of(row, *SETTINGS_FIELDS)
    switch = r"partition[-_ ]activations|distribute[-_ ](?:saved|checkpointed)[-_ ]activations"
    return affirmed(switch, text) and not stated_off(switch, text)


def stated_off(switch: str, text: str) -> bool:
    """Whether the text sets the switch (a regex) off: "tp_comm_overlap: False", "activation_checkpointing=off",
    "overlap_moe_expert_parallel_comm false", "... disabled", "... no", "... 0"."""
    return re.search(rf"({switch})\s*[:=]?\s*(false|off|disabled|no|0)\b", text) is not None


def recompute_mode(row: dict[str, Any]) -> str | None:
    """The row's recompute text: "full ...", "selective ..." (per-op: the engine's selective mode), "none ...", and
    the same in the stacks' own words (activation / gradient checkpointing: full; --recompute-activations:
    selective; recompute_granularity null: none); "not stated" leaves it to the search, and so does block-level
    checkpointing of some blocks (full recomputation of part of the layers), unless recompute_fraction finds the
    share."""
    text = (row.get("recompute") or "").lower()
    if text.startswith("not stated") or "not stated" in text[:40]:
        return None
    if block_level(row):
        return None  # checkpoints an unstated share of the blocks: between none and full, the search picks
    for value in ("selective", "full", "none"):
        if text.startswith(value) or (value == "none" and text.startswith("no ")):
            return value
    # The same said another way: "off", "disabled", "without recomputation"; "activation checkpointing: full",
    # "recompute_granularity=full"; "per-op selective AC".
    if re.search(r"^(no|off|disabled|false|not used)\b|without (activation )?(recomput|checkpoint)", text):
        return "none"
    # A bare yes (a table's "Activation Checkpointing: True" column): the stack's checkpointing of whole layers.
    if re.fullmatch(r"(yes|on|true|enabled)\W*", text):
        return "full"
    # Megatron's recompute_granularity (NeMo activations_checkpoint_granularity) null: no recomputation.
    if re.search(r"granularity\s*[:=]?\s*(null|none)\b", text):
        return "none"
    # Megatron-LM's --recompute-activations flag is its selective granularity (arguments.py).
    if "selective" in text or "recompute-activations" in text:
        return "selective"
    if re.search(r"\bfull\b", text):
        return "full"
    # Whole-layer checkpointing named as such: FSDP/DeepSpeed "activation checkpointing", Hugging Face "gradient
    # checkpointing", Megatron 2020's --checkpoint-activations; unless the row says it was off.
    named = r"(activation|gradient)s?[-_ ]checkpointing|checkpoint[-_]activations"
    if re.search(named, text):
        return "none" if stated_off(named, text) else "full"
    if "megatron-lm readme" in str((row.get("source") or {}).get("title") or "").lower():
        return "full"
    return None


def block_level(row: dict[str, Any]) -> bool:
    """Checkpointing of whole blocks, some of them (fms-fsdp selective_checkpointing, torchtitan's per-layer
    selective AC "every k-th block", Megatron --recompute-method block with --recompute-num-layers, "20 of 80
    layers")."""
    text = (row.get("recompute") or "").lower()
    return any(word in text for word in ("block-level", "per-layer", "every k-th")) \
        or EVERY_NTH.search(text) is not None \
        or _megatron_block_layers(text) is not None or LAYERS_OF.search(text) is not None


# "every 2 layers", "every 4th block", "every other layer": one layer in n checkpointed ("every block" is all).
EVERY_NTH = re.compile(r"every (\d+|other)(?:st|nd|rd|th)?[- ](?:transformer )?(?:blocks?|layers?)")


# Megatron's --recompute-method block recomputes the first --recompute-num-layers layers of each model chunk (a
# pipeline stage, or each virtual stage of an interleaved one) and none of the rest (megatron/core/transformer/
# transformer_block.py, _checkpointed_forward); "uniform" recomputes them all, in groups of that many.
BLOCK_METHOD = re.compile(r"recompute[-_ ]method\W{0,3}block|method block|\(block\)|block method")
RECOMPUTE_LAYERS = re.compile(r"recompute[-_ ]num[-_ ]layers\W{0,3}(\d+)|(?:recompute|recomputation)\D{0,12}?(\d+) "
                              r"layers|(\d+) layers\W{0,3}(?:\(?block|recomputed)")
LAYERS_OF = re.compile(r"(\d+) of (?:the )?(\d+) (?:transformer )?layers")


def _megatron_block_layers(text: str) -> int | None:
    """The layers per model chunk a Megatron block-method row recomputes, where it says so."""
    if not BLOCK_METHOD.search(text):
        return None
    found = RECOMPUTE_LAYERS.search(text)
    return int(next(g for g in found.groups() if g)) if found else None


# torchtitan's selective_ac_option default for per-layer AC: "2  # 2 = checkpoint every other layer".
TORCHTITAN_SELECTIVE_AC_EVERY = 2


def recompute_fraction(row: dict[str, Any], model_flops: float, layer_forward_flops: float) -> float | None:
    """The fraction of layers a block-level row recomputes: stated as "every k-th" with k given, else from its
    published hardware and model FLOPs utilisation, HFU / MFU = (3 F + f L) / 3 F with F the forward FLOPs of a
    step and L those of the layers (PyTorch's FLOP counter counts the recomputed forward). None when neither is
    published: the search then picks the mode."""
    if not block_level(row):
        return None
    text = (row.get("recompute") or "").lower()
    every = EVERY_NTH.search(text)
    if every:
        return 1.0 / (2 if every.group(1) == "other" else max(1, int(every.group(1))))
    share = LAYERS_OF.search(text)
    if share and int(share.group(2)) > 0:
        return min(1.0, int(share.group(1)) / int(share.group(2)))
    per_chunk = _megatron_block_layers(text)
    layers = first_int(row.get("layers"))
    if per_chunk is not None and layers:
        chunks = (first_int(row.get("pp")) or 1) * (first_int(row.get("vp")) or 1)
        return min(1.0, per_chunk * chunks / layers)
    if "torchtitan" in text_of(row, "id", "group", "notes", "source"):
        # torchtitan's per-layer selective AC checkpoints every selective_ac_option-th block; a run that does not
        # say ran its default, "2  # 2 = checkpoint every other layer" (torchtitan/config_manager.py, 1ea476e9
        # 2024-04 through 9dec370 2024-12; its train_configs override only the op/layer choice).
        return 1.0 / TORCHTITAN_SELECTIVE_AC_EVERY
    hfu, mfu = row.get("hfu_percent"), row.get("mfu_percent")
    if not (hfu and mfu and hfu > mfu):
        return None
    return min(1.0, (hfu / mfu - 1.0) * model_flops / layer_forward_flops)


def first_int(value: Any) -> int | None:
    """3, 3.0 or "3 (middle) / 2 (ends)" -> 3 (the busiest stage's count); None when absent."""
    if value is None:
        return None
    digits = re.match(r"\s*(\d+)", str(value))
    return int(digits.group(1)) if digits else None


def zero_stage(sharding: Any) -> int | None:
    """optimizer_sharding: null, false, DDP or NO_SHARD -> 0; a ZeRO stage number; FSDP full shard / FSDP2
    fully_shard / hybrid shard (HSDP) / ZeRO-3 / ZeRO++ / Megatron-FSDP optim_grads_params -> 3; FSDP
    SHARD_GRAD_OP / ZeRO-2 / optim_grads -> 2; "distributed optimizer", ZeRO-1 or anything else sharded -> 1;
    "not stated", "unknown" -> None (the search picks)."""
    if isinstance(sharding, int) and not isinstance(sharding, bool):
        return sharding
    text = str(sharding or "").lower()
    if re.match(r"\s*(not stated|unknown|unspecified|n/a\b)", text):
        return None  # said to be unknown: the search picks, as for an unstated recompute
    if not text or text in ("none", "false", "no") or re.search(r"no[_ ]shard", text):
        return 0
    # Megatron-FSDP's data-parallel sharding strategies: optim (1), optim_grads (2), optim_grads_params (3).
    if "optim_grads_params" in text:
        return 3
    # "ZeRO-2", "ZeRO stage 2", "zero stage: 2", DeepSpeed's JSON "stage": 2
    stage = r"(zero[-_ ]?(stage)?|stage)[\"']?\s*[-:=]?\s*"
    if re.search(rf"shard_grad_op|{stage}2\b|optim_grads\b", text):
        return 2
    if re.search(rf"{stage}3\b|zero\+\+|full(y)?[_ ]shard|hybrid[_ ]shard", text) or affirmed(r"fsdp|hsdp", text):
        return 3
    if re.search(r"\bddp\b|plain data[- ]parallel", text) and not re.search(
            rf"{stage}1\b|distributed optimi[sz]er|\boptim\b", text):
        return 0
    return 1


def zero_granularity(row: dict[str, Any]) -> str:
    """layer for PyTorch FSDP, whose ZeRO-2 (SHARD_GRAD_OP; FSDP2 reshard_after_forward=False) gathers and
    reduce-scatters one unit at a time every micro-batch: a run that names FSDP, whatever stage it ran, would run
    its ZeRO-2 that way (the search's ZeRO-2 layouts for it); bucket (Megatron's distributed optimizer and
    Megatron-FSDP, DeepSpeed) otherwise."""
    text = str(row.get("optimizer_sharding") or "").lower()
    if "shard_grad_op" in text or "reshard_after_forward" in text:
        return "layer"
    pytorch_fsdp = affirmed(r"(?<!megatron-)fsdp|fully_shard|full_shard", text)
    return "layer" if pytorch_fsdp and not megatron_stack(row) else "bucket"


def grad_reduce_dtype(row: dict[str, Any]) -> str:
    """bf16 when the row says its gradients are reduced in bf16 (FSDP "param/reduce/buffer bf16", reduce_dtype
    bfloat16, grad-reduce-in-bf16 or Megatron-Bridge's grad_reduce_in_fp32 False, NeMo 1.0's distributed Adam
    grad_sync_dtype bf16, Composer's FSDP mixed_precision PURE); fp32 otherwise (Megatron's default and
    FSDP's usual mixed precision). Composer's PURE sets param, reduce and buffer dtypes all to the autocast
    precision, in every version (composer/trainer/dist_strategy.py, get_mixed_precision); what its DEFAULT reduces
    in changed between versions (fp32 or the autocast dtype), so a row that says only DEFAULT keeps fp32."""
    if re.search(r"mixed[_ ]precision[ =:]*pure\b", text_of(row, "precision")):  # not notes: they may say why not
        return "bf16"
    text = text_of(row, "precision", "notes")
    return "bf16" if re.search(r"reduce(_dtype)?[ /=:]*(buffer )?(bf16|bfloat16)|reduce/buffer bf16|"
                               r"grad[-_]reduce[-_]in[-_]bf16|grad[-_]reduce[-_]in[-_]fp32[ =:]*false|"
                               r"grad[-_]sync[-_]dtype[ =:]*(bf16|bfloat16)", text) else "fp32"


def optimizer_states(row: dict[str, Any]) -> str:
    """bf16_remainder for Megatron-Core's precision-aware optimizer with bf16 moments (its default
    store_param_remainders keeps the fp32 master as the bf16 weight plus 16 bits); bf16 for bf16 moments beside a
    whole fp32 master (--no-store-param-remainders, DeepSeek-V3's "BF16 optimizer states"); bf16_remainder's 6 bytes
    too for Apex DistributedFusedAdam with dtype bf16; fp32 otherwise."""
    text = " ; ".join(text_of(row, key) for key in ("precision", "notes", "optimizer_sharding"))  # not across fields
    bf16 = r"(bf16|bfloat16)"
    # Apex DistributedFusedAdam's dtype is its state's (NeMo's distributed_fused_adam, optim.dtype): bf16 master and
    # moments, the same 6 bytes as bf16 moments beside a master remainder (grad_sync_dtype is another setting).
    if affirmed(rf"(optim(izer)?[._ ]dtype|distributed[_ ]?fused[_ ]?adam[^;]{{0,60}}\bdtype)[ =:]*{bf16}", text):
        return "bf16_remainder"
    states = r"(adam )?(moments|optimi[sz]er states?)"
    if not affirmed(rf"exp[-_]avg(_sq)?[-_]dtype[ =:]*{bf16}|{bf16} {states}|{states} (are |kept |stored )*in {bf16}",
                    text):
        return "fp32"
    if re.search(r"no[-_]store[-_]param[-_]remainders|store[-_]param[-_]remainders[ =:]*false", text):
        return "bf16"
    return "bf16_remainder" if affirmed(r"precision[-_ ]aware[-_ ]optimi[sz]er|store[-_]param[-_]remainders",
                                        text) else "bf16"


# MoE tokens sent in FP8: "FP8 dispatch(ing)", "dispatch in FP8", Megatron-Core's moe_dispatch_fwd_dtype mxfp8.
FP8_DISPATCH = re.compile(r"(fp8|mxfp8)[-_ ]dispatch|dispatch(es|ed|ing)?[-_ ](tokens? )?in (mx)?fp8"
                          r"|moe[-_]dispatch[-_]fwd[-_]dtype\W{0,3}mxfp8")


def ep_dispatch_dtype(row: dict[str, Any]) -> str:
    """fp8 where the row says its MoE tokens travel in FP8 ("FP8 dispatching" as in DeepSeek-V3's report and DeepEP's
    benchmarks, Megatron-Core's moe_dispatch_fwd_dtype mxfp8); bf16 otherwise, what Megatron-Core's dispatchers
    and torchtitan send whatever the training precision."""
    return "fp8" if affirmed(FP8_DISPATCH.pattern, text_of(row, "precision", "notes")) else "bf16"


def fp8_recipe(row: dict[str, Any]) -> str:
    """rowwise (torchao's rowwise recipe), blockwise (MXFP8, NVFP4-style or 1x128 block scaling) or tensorwise
    (delayed or current per-tensor scaling, the default)."""
    text = (row.get("precision") or "").lower()
    if "rowwise" in text:
        return "rowwise"
    return "blockwise" if any(w in text for w in ("mxfp8", "blockwise", "block-wise", "block scaling")) \
        else "tensorwise"


def precision(row: dict[str, Any], gpu: str) -> str:
    """fp8 for any FP8 recipe (Transformer Engine delayed/blockwise, MXFP8, torchao Float8); bf16 as stated;
    "fp16", "16-bit" or unstated on V100/A100 -> fp16 (Megatron trained GPT in fp16 until 2021; only the gradient
    width, 2 vs 4 bytes, differs in the model)."""
    text = (row.get("precision") or "").lower()
    if affirmed(r"[a-z]*fp4", text):  # NVFP4 / MXFP4 GEMMs: costing them at 16 bits would be far too slow, silently so
        raise SpecError.one("precision", f"{row.get('precision')!r}: the engine has no 4-bit precision "
                                         f"(one of {', '.join(PRECISIONS)})")
    if affirmed(r"[a-z]*fp8|float8", text):  # not "BF16 (no FP8)"
        return "fp8"
    if "bf16" in text:
        return "bf16"
    if re.search(r"\b(fp32|tf32|float32)\b", text) and "16" not in text:  # not mixed precision at all
        raise SpecError.one("precision", f"{row.get('precision')!r}: the engine models 16- and 8-bit training "
                                         f"(one of {', '.join(PRECISIONS)})")
    pre_bf16 = any(g in gpu for g in PRE_FLASH_GPUS)
    return "fp16" if ("fp16" in text or "16-bit" in text or not text) and pre_bf16 else "bf16"


def dropout(row: dict[str, Any]) -> bool | None:
    """Off when the notes say "dropout 0" and for MPT (llm-foundry MPTConfig: attn_pdrop = resid_pdrop =
    emb_pdrop = 0); otherwise the engine's default (on for GPT-style models)."""
    text = text_of(row, "arch_notes", "model")
    return False if "dropout 0" in text or text.startswith("mpt") or " mpt" in text[:40] else None


def tp_overlap(row: dict[str, Any]) -> bool:
    """TP communication overlap when the row names it: torchtitan async TP, Megatron --tp-comm-overlap."""
    text = text_of(row, "id", "precision", "notes", "model")
    if "vanilla tp" in text or "vanillatp" in text:
        return False  # the synchronous baseline of an async-TP comparison
    # A switch the row states as off ("tp_comm_overlap: False", "ub_tp_comm_overlap false", "TP comm overlap
    # off"), or a named overlap ("--tp-comm-overlap", "async TP", "TP communication overlap on").
    # Transformer Engine's userbuffers are its TP-overlap communicators (Megatron-Bridge's userbuffers_* configs).
    # A mention the row negates ("without async TP", "no --tp-comm-overlap", "async TP disabled") is no overlap.
    switch = r"async[-_ ]?tp|userbuffers|tp[-_ ](comm(unication)?[-_ ])?overlap"
    if stated_off(switch, text):
        return False
    return affirmed(switch, text)


def ep_overlap(row: dict[str, Any]) -> bool:
    """MoE all-to-alls overlapped with another micro-batch's compute when the row says so (Megatron-Core
    --overlap-moe-expert-parallel-comm, or "EP overlap" in its feature list); off when it says the flag is false."""
    text = text_of(row, "notes", "precision")
    switch = r"overlap[_-]moe[_-]expert[_-]parallel[_-]comm|\bep overlap|\bep a2a overlap"
    if stated_off(switch, text):
        return False
    return affirmed(switch, text)


def pp_overlap(row: dict[str, Any]) -> bool:
    """Pipeline hand-offs overlapped with compute for Megatron-Core stacks (Transformer Engine, NeMo, the MoE
    recipes), whose interleaved schedule does it by default, unless the row says --no-overlap-p2p-communication,
    and for a stack the row says sends them by asynchronous point-to-point communication (Llama 3's, The Llama 3
    Herd of Models, sec. 3.3.2); off for every other stack: Megatron-LM before Megatron-Core (2020-21; the Zero
    Bubble fork, whose runtime asserts batched p2p without overlap) and torch.distributed.pipelining
    (torchtitan), which waits for each receive before the chunk that needs it."""
    text = text_of(row, "notes", "arch_notes", "model", "pipeline_schedule", "precision")
    if re.search(r"no[-_ ]overlap[-_ ]p2p|overlap_p2p_comm\s*[:=]?\s*false", text):
        return False
    if re.search(r"async(?:hronous)?[-_ ](?:point-to-point|p2p)", text):
        return True
    return affirmed(TE_STACKS.pattern, text + " " + text_of(row, "source"))


# How a row says that it kept some layers' activations in CPU memory (Megatron-Core / NeMo cpu_offloading_num_layers).
OFFLOAD_LAYERS = (
    re.compile(r"cpu[-_ ]offloading[-_ ]num[-_ ]layers\s*[:=]?\s*(\d+)"),
    re.compile(r"offload(?:s|ing|ed)?\s+(?:the\s+)?(?:saved\s+)?(?:activations?\s+of\s+)?(\d+)\s+(?:transformer\s+)?"
               r"layers"),
    re.compile(r"(\d+)\s+(?:transformer\s+)?layers'?\s+(?:of\s+)?activations?\s+(?:are\s+|were\s+)?offloaded"),
    re.compile(r"activation\s+(?:cpu\s+)?offload(?:ing)?\s*[:=]\s*(\d+)\s+layers"),
)


# The fields where a row states how its run was set up (recompute, offloading, allocator): the settings readers'
# one place to look.
SETTINGS_FIELDS = ("notes", "recompute", "arch_notes", "optimizer_sharding", "fabric_notes")


def offload_layers(row: dict[str, Any]) -> int:
    """Layers whose activations the run kept in CPU memory, as the row states them ("cpu_offloading_num_layers:
    20", "offloads the activations of 30 layers"); 0 where it says none or does not say. Offloading named modules
    rather than layers (Megatron-Core's fine-grained offloading) is not counted: the engine has no such option."""
    text = text_of(row, *SETTINGS_FIELDS)
    for pattern in OFFLOAD_LAYERS:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return 0


def expandable_segments(row: dict[str, Any]) -> bool:
    """Whether the run states PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True);
    off where it does not say, as PyTorch's default."""
    text = text_of(row, *SETTINGS_FIELDS)
    return re.search(r"expandable_segments\s*[:=]\s*true", text) is not None


# torchtitan's pipeline defaults where a run states neither its micro-batches nor its stages per rank. Until
# pytorch/torchtitan #1073 (2025-04-07) `pipeline_parallel_microbatches` defaulted to the PP degree; since then
# `pipeline_parallel_microbatch_size` defaults to 1. Both before and after, generate_split_points gives a
# multi-stage schedule (interleaved 1F1B, looped BFS, zero-bubble variants) two stages per rank and a
# single-stage one (1F1B, GPipe) one (torchtitan/parallelisms/pipelining_utils.py @9dec370,
# torchtitan/distributed/pipeline.py @5e2033c).
TORCHTITAN_MICROBATCH_SIZE_SINCE = "2025-04-07"
TORCHTITAN_DATED = re.compile(r"torchtitan[^()]{0,40}\((\d{4}-\d{2}-\d{2})\)")
MULTI_STAGE_SCHEDULES = ("interleaved", "looped", "zero bubble", "zerobubble", "zbv")


def torchtitan_pipeline(row: dict[str, Any]) -> tuple[int | None, int | None, int] | None:
    """(micro-batches per step or None, micro-batch size or None, stages per rank) that torchtitan chose for a
    pipeline-parallel row of its own that states neither; None for other stacks. The count or the size depends on
    the torchtitan version, read from a date beside its name ("torchtitan 9dec370 (2024-12-26)"); an undated row
    gets neither, only the stages per rank."""
    text = text_of(row, "notes", "model", "precision", "source")
    if "torchtitan" not in text:
        return None
    schedule = text_of(row, "pipeline_schedule")
    stages = 2 if any(word in schedule for word in MULTI_STAGE_SCHEDULES) else 1
    dated = TORCHTITAN_DATED.search(text)
    if not dated:
        return None, None, stages
    if dated.group(1) < TORCHTITAN_MICROBATCH_SIZE_SINCE:
        return int(row.get("pp") or 1), None, stages
    return None, 1, stages


# The virtual stages per pipeline rank a schedule states in words: "2 virtual stages", "4 model chunks per rank",
# "virtual pipeline size 5" (Megatron --virtual-pipeline-model-parallel-size), "vpp=4"; or as Megatron's
# --num-layers-per-virtual-pipeline-stage, layers / (pp x that).
VIRTUAL_STAGES = re.compile(r"(\d+)\s*(?:virtual (?:pipeline )?stages|(?:model )?chunks (?:per|/|each|on each)\s*"
                            r"(?:pipeline )?(?:rank|stage|device|gpu))"
                            r"|virtual[-_ ]pipeline(?:[-_ ]model[-_ ]parallel)?[-_ ]size\W{0,3}(\d+)"
                            r"|\bvpp?\s*[=:]\s*(\d+)|\bvpp\s+(\d+)")
LAYERS_PER_VIRTUAL_STAGE = re.compile(r"(?:num[-_ ])?layers[-_ ]per[-_ ]virtual[-_ ](?:pipeline[-_ ])?stage"
                                      r"\W{0,3}(\d+)")


def virtual_stages(row: dict[str, Any]) -> int | None:
    """The virtual pipeline stages per rank the row's schedule states in words (its `vp` field wins where given);
    None where it states none, and for a schedule it calls non-interleaved."""
    text = text_of(row, "pipeline_schedule")
    if re.search(r"non[- ]?interleaved", text):
        return None
    found = VIRTUAL_STAGES.search(text)
    if found:
        return int(next(g for g in found.groups() if g))
    per_stage = LAYERS_PER_VIRTUAL_STAGE.search(text)
    layers, pp = first_int(row.get("layers")), first_int(row.get("pp"))
    if per_stage and layers and pp and int(per_stage.group(1)) > 0:
        stages, rest = divmod(layers, pp * int(per_stage.group(1)))
        return stages if stages >= 1 and rest == 0 else None
    return None


# PyTorch-native training stacks: modules written in PyTorch, run eagerly unless torch.compile is on, and
# checkpointed with torch.utils.checkpoint's non-reentrant form (FSDP's checkpoint_wrapper default).
NATIVE_STACKS = ("fsdp", "torchtitan", "llm-foundry", "composer", "fms-fsdp", "torchao")
# Stacks that also run PyTorch modules eagerly but checkpoint their own way (DeepSpeed's reentrant checkpointing).
EAGER_STACKS = NATIVE_STACKS + ("deepspeed", "hugging face", "huggingface")
COMPILE_OFF = re.compile(r"(torch\.)?compile\s*[:=]\s*(off|false|no|n)\b|no(t| torch\.)? ?compile|nocompile"
                         r"|without (torch\.)?compile")
COMPILE_ON = re.compile(r"torch\.compile|\bcompile\s*[:=]\s*(on|true|yes|y)\b|_compile\b")


def elementwise(row: dict[str, Any]) -> str:
    """Eager for PyTorch-native stacks (FSDP, torchtitan, llm-foundry, fms-fsdp, torchao, DeepSpeed or Hugging Face
    without Megatron; or a group named F_) unless the row says torch.compile was on; fused for Megatron-style
    stacks, which run fused kernels."""
    if not _pytorch_stack(row, EAGER_STACKS):  # NATIVE_STACKS are among EAGER_STACKS
        return "fused"
    text = text_of(row, "id", "precision", "notes", "optimizer_sharding", "model")
    if COMPILE_OFF.search(text):
        return "eager"
    return "fused" if COMPILE_ON.search(text) else "eager"


FUSED_QKV = re.compile(r"fuse[_ ]?qkv\s*[:=]?\s*true|fused[-_ ]qkv")


def projections(row: dict[str, Any]) -> str:
    """Separate Q/K/V and gate/up GEMMs for torchtitan-based runs (its Llama has wq, wk, wv and w1, w3: torchtitan
    models/llama/model.py), unless the run says it fused Q, K and V (torchtitan's fuse_qkv option since ad7a86533,
    2026-04-16); fused for the others (Megatron-Core linear_qkv and linear_fc1, MPT's Wqkv)."""
    if "torchtitan" not in text_of(row, "id", "group", "precision", "notes", "model", "source"):
        return "fused"
    return "fused" if FUSED_QKV.search(text_of(row, "notes", "arch_notes", "model")) else "separate"


PEAK_MEMORY = re.compile(r"peak memory\s*(?:of\s*|=\s*|:\s*)?(\d+(?:\.\d+)?)\s*(gib|gb)\b")


def stated_peak_memory_gib(row: dict[str, Any]) -> float | None:
    """The peak memory per GPU the row states, in GiB ("Peak memory 83.9 GiB (doc)", "peak memory 30 GB"); a GB
    figure is converted (1e9 bytes). None when the row states none."""
    found = PEAK_MEMORY.search(text_of(row, "notes", "memory"))
    if not found:
        return None
    value = float(found.group(1))
    return value if found.group(2) == "gib" else value * 1e9 / 2**30


# When torchtitan compiled its loss with the model (torch.compile on): from e10cb9494 (2024-10-22, "compile it if
# compiling") until e8977b007 (2024-12-18, "turning off compile on loss function"), and again from bbb1b616e
# (2025-04-02, #1033: "enable compiling the loss function ... reduction of memory"). Dates are ISO strings.
TORCHTITAN_LOSS_COMPILED = (("2024-10-22", "2024-12-18"), ("2025-04-02", "9999-12-31"))
RUN_DATE = re.compile(r"\b(20\d\d)[-/](\d\d)[-/](\d\d)\b")


def run_date(row: dict[str, Any]) -> str | None:
    """The date of the software a row ran (ISO), read from its notes: the one beside torchtitan's name, else the
    first date given ("torch 38410cf9 (2025/06/14)"); None when the row gives none."""
    text = text_of(row, "notes")
    if dated := TORCHTITAN_DATED.search(text):
        return dated.group(1)
    found = RUN_DATE.search(text)
    return "-".join(found.groups()) if found else None


# A loss over slices of the tokens: torchtitan's ChunkedLossWrapper, Liger's fused linear cross-entropy.
CHUNKED_LOSS = re.compile(r"chunkedloss|chunked[-_ ](cross[-_ ]?entropy|loss)|fused[-_ ]linear[-_ ]cross[-_ ]?entropy"
                          r"|\bliger\b")


def cross_entropy(row: dict[str, Any]) -> str:
    """How the row's loss ran. Hugging Face models upcast the logits and call PyTorch's cross-entropy (transformers'
    ForCausalLMLoss): eager. torchtitan runs `cross_entropy(pred.flatten(0, 1).float(), ...)`, compiled with the
    model only in the versions of TORCHTITAN_LOSS_COMPILED: eager without torch.compile, or at a date outside them,
    or undated. Fused for the others (Megatron's vocab-parallel cross-entropy, llm-foundry's fused_crossentropy).
    Chunked wherever the row names a loss over slices of the tokens (torchtitan's ChunkedLossWrapper, Liger)."""
    text = text_of(row, "id", "group", "precision", "notes", "model", "source")
    if CHUNKED_LOSS.search(text_of(row, "notes", "arch_notes", "precision")):
        return "chunked"
    if affirmed(r"hugging ?face", text):
        return "eager"
    if "torchtitan" not in text:
        return "fused"
    date = run_date(row)
    compiled = elementwise(row) == "fused" and date is not None and any(
        start <= date < end for start, end in TORCHTITAN_LOSS_COMPILED)
    return "fused" if compiled else "eager"


def native_stack(row: dict[str, Any]) -> bool:
    """A PyTorch-native training stack (FSDP, torchtitan, llm-foundry, fms-fsdp, torchao; or a group named F_), as
    opposed to Megatron-style stacks with their own fused kernels and checkpointing."""
    return _pytorch_stack(row, NATIVE_STACKS)


def _pytorch_stack(row: dict[str, Any], names: tuple[str, ...]) -> bool:
    """A group named F_, or one of `names` used by the row (not negated: affirmed) and no Megatron stack named."""
    text = text_of(row, "id", "precision", "notes", "optimizer_sharding", "model")
    return str(row.get("group") or "").startswith("F_") or (
        any(affirmed(re.escape(word), text) for word in names) and not megatron_stack(row))


def fp8_gather(row: dict[str, Any]) -> bool:
    """FP8 parameter gathers when the row says so (fp8_param_gather, float8 all-gather, "fp8ag")."""
    text = text_of(row, "id", "precision", "notes")
    if "bf16 fsdp all-gather" in text or "bf16ag" in text:
        return False
    switch = r"fp8[-_ ]param[-_ ]gather|(?:enable_fsdp_)?float8[-_ ]all[-_ ]gather|fp8ag|float8 fsdp2 all-gather"
    if stated_off(switch, text):  # "fp8_param_gather False", "enable_fsdp_float8_all_gather=false"
        return False
    return affirmed(switch, text)  # "--fp8-param-gather" too; not "no fp8 param gather"


def attention_kernel(row: dict[str, Any], gpu: str) -> str:
    """The attention kernel the row names: an llm-foundry attn_impl ('triton', 'flash', 'torch'; per model size
    when the row lists sizes), FlashAttention in Triton, cuDNN fused attention, or a flash kernel (FlashAttention,
    SDPA). Transformer Engine stacks (Megatron-Core, NeMo) that name no kernel run Transformer Engine's own pick
    (te): cuDNN on Hopper and later, where TE disables FlashAttention "to give FusedAttention preference on Hopper+
    for performance reasons" (transformer_engine/pytorch/attention/dot_product_attention/utils.py,
    get_attention_backend), FlashAttention-2 before. Runs on
    V100/A100 that name none and predate FlashAttention (2022: the 2020-21 Megatron rows of groups other than F_
    and M_) ran Megatron's unfused softmax; every later stack runs a flash kernel."""
    impl = _attn_impl(row)
    if impl:
        return {"triton": "triton", "torch": "unfused"}.get(impl, "flash")
    text = text_of(row, "notes", "arch_notes", "model")
    if any(w in text for w in ("flashattention in triton", "triton flash", "triton attention")):
        return "triton"
    pre_hopper = any(g in gpu for g in PRE_FLASH_GPUS)
    te_stack = TE_STACKS.search(text)
    named = [w for w in ("flash", "triton", "sdpa", "cudnn") if affirmed(w, text)]
    if not pre_hopper and CUDNN_ATTENTION.search(text):
        return "cudnn"
    if not pre_hopper and te_stack and not any(affirmed(re.escape(w), text) for w in NAMED_FLASH):
        # Before the "no flash" rule below: Transformer Engine with FlashAttention switched off (NVTE_FLASH_ATTN=0,
        # "no flash attention") still runs its cuDNN FusedAttention on Hopper+, not an unfused softmax; Transformer
        # Engine's own pick (te) is that kernel there.
        return "te"
    if "flash" in text and not named:
        # "no flash attention", "without FlashAttention": the row names the kernel it did not run, and no other
        return "unfused"
    if "zero bubble" in text:
        # The Zero Bubble paper's runs (2023): its Megatron-LM fork's launch script of the paper's date
        # (sail-sg/zero-bubble-pipeline-parallelism 425b42e5, 2023-11-17, examples/pretrain_zero_bubble.sh: seq-length
        # 1024, fp16) does not pass --use-flash-attn, so Megatron's unfused softmax ran; the script gained the flag in
        # 2024. The paper's memory agrees: doubling the micro-batch from 6 to 12 adds 27 GB (Table 8), 91 bytes per
        # token and layer per unit of hidden size, Korthikanti et al.'s 34 + 5as/h = 87 without flash attention.
        return "unfused"
    if te_stack and not named:
        return "te"  # Transformer Engine's pick: FlashAttention before Hopper
    if te_stack or named:
        return "flash"
    # Stacks that postdate FlashAttention and run a flash kernel on any GPU: torchtitan and torchao (SDPA),
    # fms-fsdp (SDPA), llm-foundry (attn_impl flash or triton, read above where the row names it).
    return "unfused" if _before_2022(row, gpu) else "flash"


def _before_2022(row: dict[str, Any], gpu: str) -> bool:
    """A Megatron-style run of 2020-21: on V100/A100, by no stack that postdates FlashAttention (torchtitan,
    torchao, fms-fsdp, llm-foundry) and in neither the F_ nor the M_ groups (the published 2020-21 Megatron
    rows: Megatron-LM's 2020 README, Narayanan et al. 2021), nor a Transformer Engine stack (2022 on)."""
    if TE_STACKS.search(text_of(row, "notes", "arch_notes", "model")):
        return False
    flash_era = any(affirmed(re.escape(w), text_of(row, "id", "notes", "model", "optimizer_sharding"))
                    for w in FLASH_ERA_STACKS) and not megatron_stack(row)
    pre_hopper = any(g in gpu for g in PRE_FLASH_GPUS)
    return pre_hopper and not flash_era and not str(row.get("group") or "").startswith(("F_", "M_"))


def tp_wgrad_overlap(row: dict[str, Any], gpu: str) -> bool:
    """The backward's input-gradient reductions of the QKV and MLP-up layers run beside their weight-gradient
    GEMMs (training.tp_wgrad_overlap) for Megatron-family stacks after September 2021 (Megatron-LM 3f65246911,
    2021-09-02, made it the default; Megatron-Core and Transformer Engine keep it); not for PyTorch's tensor
    parallelism (the PyTorch-native stacks: DTensor reduces the gradient after both GEMMs) nor for the
    Megatron-LM runs of 2020-21, which predate it."""
    return not native_stack(row) and not _before_2022(row, gpu)


FLASH_ERA_STACKS = ("torchtitan", "torchao", "fms-fsdp", "llm-foundry")
# cuDNN named as the attention kernel, not for another op ("cuDNN LayerNorm", NVTE_NORM_FWD_USE_CUDNN).
CUDNN_ATTENTION = re.compile(r"cudnn[-_ ]*(fused[-_ ]*)?(attention|attn|sdpa|flash|fmha)|fused[-_ ]attention"
                            r"|sdpbackend\.cudnn|cudnn_attention|(attention|attn|sdpa)[^.;]{0,30}cudnn")
ATTN_IMPL = re.compile(r"attn_impl\b([^;]*)")
IMPL_CHOICE = re.compile(r"'(\w+)'(?:\s+for\s+([\w./]+))?")


def _attn_impl(row: dict[str, Any]) -> str | None:
    """attn_impl='x', or "attn_impl 'x' for 1b/3b and 'y' for 13b": the one listing the row's model size, else
    the unqualified one."""
    size = re.search(r"(\d+(?:\.\d+)?[mb])\b", (row.get("model") or "").lower())
    plain = None
    for clause in ATTN_IMPL.findall(row.get("notes") or ""):
        for impl, sizes in IMPL_CHOICE.findall(clause):
            if not sizes:
                plain = plain or impl
            elif size and size.group(1) in sizes.lower().split("/"):
                return impl
    return plain


# The network between nodes as a row's fabric notes give it: "1600 Gbps node-node interconnect (RoCE)", "3.2 Tbps
# RoCE", "800 Gbps inter-node", "400 Gb/s per GPU".
RATE = r"(\d[\d,]*(?:\.\d+)?)\s*(tbps|tb/s|gbps|gb/s)"
PER_GPU = re.compile(RATE + r"[^.;\d]{0,40}?(?:per|/|each|for every)\s*gpu")
PER_NODE = re.compile(RATE + r"(?:[^.;\d]*?(?:inter-node|internode|node-node|node-to-node|interconnect)"
                             r"|\s*(?:total\s*)?(?:per|/|each)\s*node)")


# "8x 200 Gb/s HDR InfiniBand", "8 x 400G": that many ports of that rate on each node.
PORTS = re.compile(r"(\d+)\s*[x×]\s*(?:[a-z-]+\s+){0,2}?(\d[\d,]*(?:\.\d+)?)\s*(tbps|tb/s|gbps|gb/s|g)\b")
# A count of adapters with their rate: "4 ConnectX-7 400G NICs", "eight 400 Gb/s HCAs" (per node).
COUNTED_ADAPTERS = re.compile(r"\b(\d{1,2}|one|two|four|eight|sixteen)\s+(?:[\w.-]+\s+){0,3}?(\d[\d,]*(?:\.\d+)?)\s*"
                              r"(tbps|tb/s|gbps|gb/s|g)\b[^.;\d]{0,30}?\b(?:nics?|hcas?|ports?|adapters?)\b")
COUNT_WORDS = {"one": 1, "two": 2, "four": 4, "eight": 8, "sixteen": 16}
# A rate named for one adapter: "400 Gbps HDR InfiniBand HCAs", "200 Gb/s ports", "NIC 400 Gb/s" (one per GPU, as
# every catalog node but AWS's carries them).
PER_PORT = re.compile(RATE + r"[^.;\d]{0,40}?(?:infiniband|\bib\b|\bhcas?\b|\bnics?\b|\bports?\b|adapters?)")
# InfiniBand named only by its generation: the port rate of that generation (InfiniBand Trade Association).
IB_PORT_GBITS = {"edr": 100.0, "hdr": 200.0, "ndr": 400.0, "xdr": 800.0}


def network(row: dict[str, Any], gpus_per_node: int) -> tuple[float | None, str | None]:
    """(Gb/s of scale-out bandwidth per GPU, fabric kind) from the fabric notes; None where they say nothing.
    Read in this order: a rate per GPU, a rate per node ("1600 Gbps node-node"), ports x rate ("8x 200 Gb/s", per
    node), a count of adapters with their rate ("4 ConnectX-7 400G NICs", per node), a rate per adapter (one
    adapter per GPU), an InfiniBand generation alone ("HDR": 200 Gb/s a GPU)."""
    text = (row.get("fabric_notes") or "").lower()
    kind = ("slingshot" if "slingshot" in text else "roce" if "roce" in text else
            "efa" if re.search(r"\befa\b", text) else
            "infiniband" if re.search(r"infiniband|\b(hdr|ndr|xdr|edr)\b", text) else
            "ethernet" if re.search(r"ethernet|\btcp\b", text) else None)
    per_gpu = PER_GPU.search(text)
    if per_gpu:
        return _gbits(*per_gpu.group(1, 2)), kind
    per_node = PER_NODE.search(text)
    if per_node:
        # "8x 400 Gb/s per node": eight ports of the stated rate.
        ports = re.search(r"(\d+)\s*[x×]\s*$", text[:per_node.start()])
        return _gbits(*per_node.group(1, 2)) * (int(ports.group(1)) if ports else 1) / gpus_per_node, kind
    for pattern in (PORTS, COUNTED_ADAPTERS):  # (count, rate, unit) a node
        found = pattern.search(text)
        if found:
            count = COUNT_WORDS.get(found.group(1)) or int(found.group(1))
            return count * _gbits(*found.group(2, 3)) / gpus_per_node, kind
    per_port = PER_PORT.search(text)
    if per_port:
        return _gbits(*per_port.group(1, 2)), kind
    generations = set(re.findall(r"\b(edr|hdr|ndr|xdr)\b", text))
    if kind == "infiniband" and len(generations) == 1:
        return IB_PORT_GBITS[generations.pop()], kind
    return None, kind


def _gbits(value: str, unit: str) -> float:
    """Gb/s from a matched rate and its unit ("1,600" "gbps"; "3.2" "tbps")."""
    return float(value.replace(",", "")) * (1000.0 if unit.startswith("t") else 1.0)
