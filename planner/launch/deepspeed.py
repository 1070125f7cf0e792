"""A DeepSpeed config for one plan (ZeRO stage 0 for plain data parallelism); keys from deepspeed_keys.txt.
DeepSpeed reads its config with hjson (deepspeed/runtime/config.py), so the comment lines are part of a valid
file."""
from __future__ import annotations

import json

from .common import Emitter, Job, heading


def deepspeed(job: Job) -> tuple[str, Emitter]:
    em = Emitter.of("deepspeed")
    head = [f"// {x}" for x in heading(job, "DeepSpeed config", em.lists[0]) if x]
    config: dict[str, object] = {}

    def key(path: str, value: object) -> None:
        if em.ok(path):
            section, _, name = path.rpartition(".")
            (config.setdefault(section, {}) if section else config)[name or section] = value

    # DeepSpeed checks train_batch_size = micro-batch x accumulation steps x data-parallel ranks.
    key("train_batch_size", job.global_batch)
    key("train_micro_batch_size_per_gpu", job.micro_batch)
    key("gradient_accumulation_steps", job.micro_batches)
    precision = job.spec.training.precision
    key("fp16.enabled" if precision == "fp16" else "bf16.enabled", True)
    key("zero_optimization.stage", job.zero)
    if job.zero >= 1:
        key("zero_optimization.overlap_comm", bool(job.spec.training.overlap_grad_reduce))
        key("zero_optimization.contiguous_gradients", True)
    if job.zero >= 2:
        key("zero_optimization.reduce_scatter", True)
    degrees = ", ".join(f"{k.upper()} {v}" for k, v in (("tp", job.tp), ("pp", job.pp), ("cp", job.cp),
                                                         ("ep", job.ep)) if v > 1)
    if degrees:
        where = "Megatron-DeepSpeed flags" + (f", PipelineModule(num_stages={job.pp})" if job.pp > 1 else "")
        em.note(f"{degrees}: set in the model code ({where}), not in this file; DeepSpeed's data-parallel size "
                f"is then {job.dp}")
    if job.vpp > 1:
        em.note(f"{job.vpp} virtual stages per pipeline rank: DeepSpeed's pipeline engine runs one stage per rank "
                f"(no interleaved schedule), so its bubble is {job.vpp} times the plan's")
    if job.recompute == "full" and job.spec.training.partition_activations:
        key("activation_checkpointing.partition_activations", True)
    if job.recompute != "none":
        share = f" of {job.recompute_fraction:.0%} of the layers" if job.recompute_fraction < 1 else ""
        em.note(f"{job.recompute} recompute{share}: done by the model code (deepspeed.checkpointing around each "
                f"layer)")
    if job.offload_layers:
        em.note(f"activation offloading of {job.offload_layers} layers: DeepSpeed offloads only checkpointed "
                f"layer inputs (activation_checkpointing.cpu_checkpointing), not whole layers' activations")
    if job.spec.training.optimizer_states != "fp32":
        em.note(f"optimizer_states {job.spec.training.optimizer_states}: DeepSpeed's ZeRO optimizers keep fp32 "
                f"master weights and moments (12 bytes a parameter), more memory than the plan assumed")
    if precision == "fp8":
        em.note("fp8: Transformer Engine layers in the model code; this file covers the bf16 rest")
        if job.spec.training.ep_dispatch_dtype == "fp8" and job.ep > 1:
            em.note("ep_dispatch_dtype fp8: DeepSpeed's MoE all-to-alls send 16-bit tokens, so they take longer than "
                    "the plan assumed")
    body = json.dumps(config, indent=2)
    return "\n".join(head + [f"// not expressed: {n}" for n in em.notes] + [body]) + "\n", em
