"""A torchtitan job config (TOML, as torchtitan v0.2.x reads it) for one plan; keys from torchtitan_keys.txt.

torchtitan builds its device mesh as pp, dp_replicate, dp_shard, cp, tp, outermost first
(torchtitan/distributed/parallel_dims.py), which is the planner's "tp-cp-dp-pp"."""
from __future__ import annotations

import json

from ..compute import attention_efficiency
from .common import Emitter, Job, heading

SCHEDULE = {False: "1F1B", True: "Interleaved1F1B"}
AC_MODE = {"none": "none", "selective": "selective", "full": "full"}


def torchtitan(job: Job) -> tuple[str, Emitter]:
    em = Emitter.of("torchtitan")
    tables: dict[str, list[tuple[str, object]]] = {}

    def key(section: str, name: str, value: object) -> None:
        if em.ok(f"{section}.{name}"):
            tables.setdefault(section, []).append((name, value))

    _training(job, key, em)
    _parallelism(job, key, em)
    _pipeline(job, key, em)
    partial = job.recompute == "full" and job.recompute_fraction < 1
    key("activation_checkpoint", "mode", "selective" if partial else AC_MODE[job.recompute])
    if partial:  # torchtitan checkpoints every k-th block
        every = max(1, round(1 / job.recompute_fraction))
        key("activation_checkpoint", "selective_ac_option", str(every))
        if abs(1 / every - job.recompute_fraction) > 0.01:
            em.note(f"recompute of {job.recompute_fraction:.0%} of the layers: torchtitan checkpoints every k-th "
                    f"block, here every {every}th ({1 / every:.0%})")
    if job.offload_layers:
        em.note(f"activation offloading of {job.offload_layers} layers: torchtitan has no option for it")
    if job.recompute == "selective":
        key("activation_checkpoint", "selective_ac_option", "op")
        em.note("torchtitan's selective recompute is per operator (it keeps matmul outputs), not Megatron's "
                "attention-only recompute the plan costs")
    lines = [f"# {x}" for x in heading(job, "torchtitan job config", em.lists[0]) if x]
    lines += [f"# not expressed: {n}" for n in em.notes]
    for section, items in tables.items():
        lines += ["", f"[{section}]"] + [f"{name} = {json.dumps(value)}" for name, value in items]
    return "\n".join(lines) + "\n", em


def _training(job: Job, key, em: Emitter) -> None:
    m, t = job.spec.model, job.spec.training
    em.note(f"the model: pick [model] name and flavor for {m.name} ({m.layers} layers, hidden {m.hidden}, "
            f"{m.heads} heads); torchtitan defines models in code")
    # With PP, local_batch_size is split into micro-batches of pipeline_parallel_microbatch_size; without
    # it, local_batch_size is the micro-batch and torchtitan accumulates global / (local x DP) of them.
    key("training", "local_batch_size", job.global_batch // job.dp if job.pp > 1 else job.micro_batch)
    key("training", "global_batch_size", job.global_batch)
    key("training", "seq_len", m.seq_len)
    if t.precision == "fp16":
        em.note("fp16: torchtitan trains in bf16 or fp32 only (training.mixed_precision_param)")
    else:
        key("training", "mixed_precision_param", "bfloat16")
    if t.precision == "fp8" and t.fp8_recipe == "blockwise":
        key("model", "converters", ["quantize.linear.mx"])
        em.note("blockwise fp8: torchtitan's MX converter (MXFP8, Blackwell); pick quantize.linear.mx.recipe_name")
    elif t.precision == "fp8":
        key("model", "converters", ["quantize.linear.float8"])
        key("quantize.linear.float8", "recipe_name", t.fp8_recipe)
        if t.fp8_param_gather:
            key("quantize.linear.float8", "enable_fsdp_float8_all_gather", True)
    if t.saves_fp8_inputs:
        em.note("fp8_saved_inputs fp8: torchao float8 keeps each linear's 16-bit input for the backward, so "
                "activations take more memory than the plan assumed")
    gpu = job.spec.cluster.gpu
    # torchtitan's SDPA runs FlashAttention-2, cuDNN attention on B200 and later only (torchtitan #1196): said
    # where the plan's kernel costs otherwise on this GPU (the catalog's figures), not where they cost the same.
    planned = attention_efficiency(gpu, t.attention) if t.attention in ("cudnn", "te") else None
    if planned is not None and planned > gpu.attention_efficiency:
        em.note(f"attention kernel {t.attention}: torchtitan's SDPA picks cuDNN attention on B200 and later only "
                "(torchtitan #1196); before, it runs FlashAttention-2, slower than the plan assumed")
    elif (planned is not None and planned < gpu.attention_efficiency) or t.attention not in ("flash", "cudnn", "te"):
        em.note(f"attention kernel {t.attention}: torchtitan runs PyTorch SDPA (FlashAttention-2), faster than the "
                "plan assumed")
    if t.precision != "fp16":
        key("training", "mixed_precision_reduce", "bfloat16" if t.grad_reduce_dtype == "bf16" else "float32")
    if t.optimizer_states != "fp32":
        em.note(f"optimizer_states {t.optimizer_states}: torchtitan's AdamW keeps fp32 state (12 bytes a "
                f"parameter), more memory than the plan assumed")
    if t.precision == "fp8" and t.ep_dispatch_dtype == "fp8" and job.ep > 1:
        em.note("ep_dispatch_dtype fp8: torchtitan sends MoE tokens in 16 bits, so its all-to-alls take longer than "
                "the plan assumed")
    # torch.compile is what fuses torchtitan's norms, activations and rotary embedding.
    key("compile", "enable", t.elementwise == "fused")
    # torchtitan compiles its loss (compile.components "loss") only when compile is on; uncompiled it is PyTorch's
    # cross_entropy on fp32 logits, the plan's cross_entropy eager.
    if t.elementwise == "fused":
        key("compile", "components", ["model", "loss"] if t.cross_entropy == "fused" else ["model"])
    elif t.cross_entropy == "fused":
        em.note("cross_entropy fused: without torch.compile torchtitan's loss is PyTorch's cross_entropy on fp32 "
                "logits, which holds 12 bytes a logit, more memory than the plan assumed")
    if t.cross_entropy == "chunked":
        em.note("cross_entropy chunked: set the job's loss to ChunkedLossWrapper (num_chunks 8, torchtitan's "
                "components/loss.py, in its Python config registry: this TOML has no key for it); torchtitan's "
                "whole-sequence loss holds all the logits, more memory than the plan assumed")
    if job.tp_wgrad_costed and t.tp_wgrad_overlap:
        em.note("tp_wgrad_overlap: PyTorch's tensor parallelism reduces each input gradient after both of its "
                "layer's GEMMs, not beside the weight-gradient GEMM, so the step runs slower than the plan assumed "
                "(async TP, tp_comm_overlap, overlaps more)")
    if t.tp_comm_overlap and job.tp > 1:
        key("parallelism", "enable_async_tensor_parallel", True)  # needs compile.enable
        if t.elementwise != "fused":
            em.note("async TP needs torch.compile, which also fuses the element-wise kernels the plan ran eager")
    if t.checkpoint_impl == "megatron" and job.recompute != "none":
        em.note("checkpoint_impl megatron: torchtitan checkpoints with torch.utils.checkpoint, which stops early "
                "(full recompute skips the MLP output projection), slightly faster than the plan assumed")
    if t.projections == "fused":
        em.note("projections fused: torchtitan's Llama runs wq, wk, wv and w1, w3 as separate GEMMs, slower than "
                "the plan assumed (narrow K and V GEMMs)")
    if job.zero == 2 and t.zero_granularity == "bucket":
        em.note("zero_granularity bucket: FSDP2 shards layer by layer, one collective per layer, not the "
                "large buckets the plan costed")
    if job.cp > 1 and t.cp_impl == "te":
        em.note("cp_impl te: torchtitan runs PyTorch's context_parallel, whose fp32 merges and per-step copies "
                "move several times the memory traffic of Transformer Engine's ring, slower than the plan assumed")


def _parallelism(job: Job, key, em: Emitter) -> None:
    # ZeRO by FSDP2: stage 3 reshards parameters after forward; stages 1-2 keep them (ZeRO-2). Plain DP is
    # replication (DDP).
    if job.zero == 0:
        key("parallelism", "data_parallel_replicate_degree", job.dp)
        key("parallelism", "data_parallel_shard_degree", 1)
        if job.cp > 1:
            em.note("with CP torchtitan shards parameters over the CP ranks (FSDP), which the plan does not")
    else:
        key("parallelism", "data_parallel_replicate_degree", 1)
        key("parallelism", "data_parallel_shard_degree", job.dp)
        key("parallelism", "fsdp_reshard_after_forward", "always" if job.zero == 3 else "never")
        if job.zero == 1:
            em.note("ZeRO-1: torchtitan has no optimizer-only sharding; FSDP without resharding (ZeRO-2) also "
                    "shards gradients, so it needs no more memory than the plan")
    key("parallelism", "tensor_parallel_degree", job.tp)
    if job.tp > 1 and not job.sequence_parallel:
        em.note("TP without sequence parallelism: torchtitan's tensor parallelism always shards the norms "
                "along the sequence")
    key("parallelism", "context_parallel_degree", job.cp)
    if job.ep > 1:  # the plan folds EP over TP·CP·DP with whole experts: expert TP 1
        key("parallelism", "expert_parallel_degree", job.ep)
        key("parallelism", "expert_tensor_parallel_degree", 1)
    elif job.spec.model.is_moe and job.tp > 1:
        em.note("MoE without EP: torchtitan shards the experts over the TP ranks, where the plan keeps them whole "
                "on every TP rank (expert TP 1)")
    if job.rank_order != "tp-cp-dp-pp":
        em.note(f"rank order {job.rank_order}: torchtitan's mesh is fixed at tp-cp-dp-pp (pipeline outermost), "
                "so DP and PP groups land on other nodes than planned; TP stays inside the NVLink domain")


def _pipeline(job: Job, key, em: Emitter) -> None:
    key("parallelism", "pipeline_parallel_degree", job.pp)
    if job.pp == 1:
        return
    key("parallelism", "pipeline_parallel_schedule", SCHEDULE[job.vpp > 1])
    if job.vpp > 1 and job.vp_group != job.pp:
        em.note(f"{job.micro_batches} micro-batches a step over PP {job.pp}: the plan interleaves them in groups of "
                f"{job.vp_group} (Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage); PyTorch's "
                f"interleaved schedules have no such setting: make the micro-batches a multiple of PP")
    if job.vpp > 1 and job.spec.training.pp_comm_overlap:
        em.note("pp_comm_overlap: torchtitan's pipeline schedules wait for each receive before the chunk that needs "
                "it, so stage hand-offs cost more than the plan assumed")
    key("parallelism", "pipeline_parallel_microbatch_size", job.micro_batch)
    chunks = job.virtual_stages
    if len(set(chunks)) == 1:
        # torchtitan makes ceil(layers / layers_per_stage) stages, the first ones a layer more where that does
        # not divide (the embedding and the output weighing the first/last_stage_less_layers): here it does.
        key("parallelism", "pipeline_parallel_layers_per_stage", chunks[0])
        key("parallelism", "pipeline_parallel_first_stage_less_layers", 0)
        key("parallelism", "pipeline_parallel_last_stage_less_layers", 0)
        return
    if min(chunks) == 0:
        # The plan's split leaves a virtual stage without a layer (3 layers over 4 virtual stages): torchtitan
        # builds an optimizer for each model part, and PyTorch refuses one of no parameters.
        em.note(f"{chunks.count(0)} of the plan's {len(chunks)} virtual stages hold no layer, which torchtitan "
                "cannot build (an optimizer of no parameters): set parallelism.module_fqns_per_model_part by hand "
                "with fewer virtual stages on the shorter pipeline stages, or plan with fewer virtual stages")
        return
    # The plan's uneven split (fewer layers on the last, then the first stage: memory.stage_split), module by
    # module, in Job.virtual_stages' order, which is torchtitan's "loop" stage assignment, with the module names
    # of torchtitan's Llama and DeepSeek-V3 models.
    parts, start = [], 0
    for n in chunks:
        parts.append([f"layers.{i}" for i in range(start, start + n)])
        start += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    key("parallelism", "module_fqns_per_model_part", parts)
