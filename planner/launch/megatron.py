"""Megatron-LM arguments (pretrain_gpt.py) for one plan, as a bash array; names from megatron_args.txt."""
from __future__ import annotations

from .common import Emitter, Job, heading

# Megatron's rank orders (megatron/training/initialize.py): tp-cp-ep-dp-pp by default, tp-cp-ep-pp-dp with
# --use-tp-pp-dp-mapping. EP is the innermost part of DP in both, as in the planner's "tp-cp-dp-pp".
PP_INSIDE_DP_FLAG = "--use-tp-pp-dp-mapping"
# Megatron-FSDP sharding strategies (--data-parallel-sharding-strategy choices) for ZeRO-2 and ZeRO-3.
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def megatron(job: Job) -> tuple[str, Emitter]:
    em = Emitter.of("megatron")
    args: list[tuple[str, object]] = []

    def arg(name: str, value: object = None) -> None:
        if em.ok(name):
            args.append((name, value))

    _model(job, arg, em)
    _parallel(job, arg, em)
    _batch_and_memory(job, arg, em)
    _precision(job, arg, em)
    _mechanisms(job, arg, em)
    lines = [f"# {x}" for x in heading(job, "Megatron-LM arguments", em.lists[0]) if x]
    lines += [f"# not expressed: {n}" for n in em.notes]
    lines += ["MEGATRON_ARGS=("]
    lines += [f"  {name}" + ("" if value is None else f" {value}") for name, value in args]
    lines += [")", '# run pretrain_gpt.py "${MEGATRON_ARGS[@]}" with data, tokenizer, optimizer and checkpoint '
              "arguments added, under the torchrun line of the slurm export"]
    return "\n".join(lines) + "\n", em


def _model(job: Job, arg, em: Emitter) -> None:
    m = job.spec.model
    arg("--num-layers", m.layers)
    arg("--hidden-size", m.hidden)
    arg("--ffn-hidden-size", m.ffn_hidden)
    arg("--num-attention-heads", m.heads)
    if m.kv_heads < m.heads:
        arg("--group-query-attention")
        arg("--num-query-groups", m.kv_heads)
    arg("--seq-length", m.seq_len)
    arg("--max-position-embeddings", m.seq_len)
    if m.gated_mlp:
        arg("--swiglu")
    if not m.dropout:  # the plan keeps no dropout masks; Megatron's default is 0.1 for both
        arg("--attention-dropout", 0.0)
        arg("--hidden-dropout", 0.0)
    if not m.tied_embeddings:  # Megatron ties them unless told otherwise
        arg("--untie-embeddings-and-output-weights")
    if m.is_moe:
        arg("--num-experts", m.experts)
        arg("--moe-router-topk", m.top_k)
        if m.router_group_top_k < m.router_groups:  # group-limited routing (DeepSeek-V3: 8 groups, 4 a token)
            arg("--moe-router-num-groups", m.router_groups)
            arg("--moe-router-group-topk", m.router_group_top_k)
        arg("--moe-ffn-hidden-size", m.expert_ffn_hidden)
        if m.shared_experts:
            arg("--moe-shared-expert-intermediate-size", m.shared_experts * m.expert_ffn_hidden)
        if m.dense_layers:  # a Python list expression Megatron evaluates: 0 = dense layer, 1 = MoE layer
            arg("--moe-layer-freq", f"'([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})'")
        # The local experts' GEMMs through Transformer Engine's GroupedLinear (training.expert_gemm "streams"),
        # Megatron-Core's only grouped path since its legacy GroupedMLP went.
        arg("--moe-grouped-gemm")
        if job.spec.training.expert_gemm == "grouped":
            em.note("the plan costs the local experts' GEMMs as one grouped-GEMM kernel (training.expert_gemm "
                    "grouped); Megatron-Core's --moe-grouped-gemm runs Transformer Engine's GroupedLinear, one GEMM "
                    "per expert over 4 CUDA streams (expert_gemm streams), slower where experts are many and small")
    em.note(f"vocabulary {m.vocab}: comes from the tokenizer (--tokenizer-type and its model file)")


def _parallel(job: Job, arg, em: Emitter) -> None:
    arg("--tensor-model-parallel-size", job.tp)
    arg("--pipeline-model-parallel-size", job.pp)
    layout = job.pp > 1 and _stage_split(job, arg)
    if job.vpp > 1:  # interleaved 1F1B
        if not layout:  # a layout names the virtual stages itself (Megatron derives their count from it)
            arg("--num-virtual-stages-per-pipeline-rank", job.vpp)
        if job.vp_group != job.pp:  # micro-batches not a multiple of PP: groups of N, as the plan's memory counts
            arg("--microbatch-group-size-per-virtual-pipeline-stage", job.vp_group)
        if not job.spec.training.pp_comm_overlap:
            arg("--no-overlap-p2p-communication")
    if job.cp > 1:
        arg("--context-parallel-size", job.cp)
    if job.ep > 1:
        arg("--expert-model-parallel-size", job.ep)
    if job.spec.model.is_moe and job.tp > 1:
        # The plan keeps routed experts whole (expert TP 1); Megatron's expert TP defaults to the TP size.
        arg("--expert-tensor-parallel-size", 1)
    if job.sequence_parallel:
        arg("--sequence-parallel")
    if job.rank_order == "tp-cp-pp-dp":
        arg(PP_INSIDE_DP_FLAG)
        if job.ep > 1:
            em.note("with --use-tp-pp-dp-mapping Megatron puts EP inside PP (tp-cp-ep-pp-dp); the plan keeps EP "
                    "inside DP, so expert all-to-alls may cross more nodes than planned")


def _stage_split(job: Job, arg) -> bool:
    """The plan's split of the layers over the pipeline stages (Job.stages, Job.virtual_stages), which Megatron
    otherwise makes even. Fewer layers on the first and the last stage only, each dividing by the virtual stages,
    are --decoder-first/last-pipeline-num-layers (TransformerConfig checks that the middle stages split evenly and
    that every stage divides by the virtual stages); any other split is written out as
    --pipeline-model-parallel-layout: E the embedding, t a layer, L the loss, "|" between stages, every pipeline
    rank's first virtual stage, then every rank's second (Megatron-Core, "Custom Pipeline Model Parallel Layout").
    True when a layout was written."""
    split, v = job.stages, job.vpp
    if len(set(split)) == 1 and split[0] % v == 0:
        return False
    if job.pp >= 3 and len(set(split[1:-1])) == 1 and all(n % v == 0 for n in split):
        arg("--decoder-first-pipeline-num-layers", split[0])
        arg("--decoder-last-pipeline-num-layers", split[-1])
        return False
    stages = ["t" * n for n in job.virtual_stages]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
    arg("--pipeline-model-parallel-layout", "'" + "|".join(stages) + "'")
    return True


def _batch_and_memory(job: Job, arg, em: Emitter) -> None:
    arg("--micro-batch-size", job.micro_batch)
    arg("--global-batch-size", job.global_batch)
    if job.recompute == "selective":
        arg("--recompute-granularity", "selective")
        # The fewest modules of Megatron-Core's selective recomputation, as its MoE recipes name them; the plan's
        # per-operator policy (memory._selective_flash) also recomputes the MLP's activation.
        arg("--recompute-modules", "core_attn layernorm" + (" moe_act" if job.spec.model.is_moe else ""))
        if not job.spec.model.is_moe:
            em.note("selective recompute: the plan costs a per-operator policy that recomputes the MLP's activation; "
                    "Megatron's --recompute-modules keep it unless they name mlp, which recomputes the whole MLP "
                    "(slower), so this keeps more activation memory than the plan assumed")
    elif job.recompute == "full" and job.recompute_fraction < 1:  # the first k layers of each (virtual) stage
        arg("--recompute-granularity", "full")
        arg("--recompute-method", "block")
        arg("--recompute-num-layers", job.recompute_layers)
    elif job.recompute == "full":  # every layer recomputed from its input, one layer per checkpoint
        arg("--recompute-granularity", "full")
        arg("--recompute-method", "uniform")
        arg("--recompute-num-layers", 1)
    if job.recompute == "full" and job.spec.training.partition_activations and not job.sequence_parallel:
        arg("--distribute-saved-activations")  # the saved layer inputs split over the TP ranks
    if job.offload_layers:
        arg("--cpu-offloading-num-layers", job.offload_layers)
        if job.pp > 1 or job.recompute != "none":
            em.note("activation offloading: Megatron-Core offloads only without pipeline parallelism and without "
                    "recomputation (its TransformerConfig checks); this plan has "
                    + ", ".join(x for x in (f"PP {job.pp}" if job.pp > 1 else "",
                                            f"{job.recompute} recompute" if job.recompute != "none" else "") if x))
    if job.zero == 1:
        arg("--use-distributed-optimizer")
    elif job.zero in FSDP_STRATEGY:
        arg("--use-megatron-fsdp")
        arg("--data-parallel-sharding-strategy", FSDP_STRATEGY[job.zero])
    if job.spec.training.overlap_grad_reduce and job.dp > 1:
        arg("--overlap-grad-reduce")
        if job.zero >= 1:
            arg("--overlap-param-gather")


def _precision(job: Job, arg, em: Emitter) -> None:
    precision = job.spec.training.precision
    arg("--fp16" if precision == "fp16" else "--bf16")
    if precision == "fp8":  # Transformer Engine: E4M3 forward, E5M2 gradients; bf16 elsewhere
        recipe = job.spec.training.fp8_recipe
        arg("--fp8-format", "e4m3" if recipe == "blockwise" else "hybrid")
        if recipe == "blockwise":
            arg("--fp8-recipe", "mxfp8")  # Blackwell; Hopper runs 1x128 blocks: --fp8-recipe blockwise
        elif recipe == "rowwise":
            em.note("rowwise fp8 is torchao's recipe: Transformer Engine scales per tensor or per block")
    attention = job.spec.training.attention
    if attention == "triton":
        em.note("attention kernel triton (FlashAttention in Triton): Megatron has no such backend; "
                "--attention-backend flash runs a faster kernel than the plan assumed")
    else:
        # Megatron's AttnBackend names Transformer Engine's cuDNN FusedAttention "fused", and Transformer Engine's
        # own pick "auto".
        arg("--attention-backend", {"cudnn": "fused", "te": "auto"}.get(attention, attention))


def _mechanisms(job: Job, arg, em: Emitter) -> None:
    """The stack behaviours the plan was costed with (training.*), as Megatron's flags, or a note where Megatron
    has none."""
    t = job.spec.training
    if t.tp_comm_overlap and job.tp > 1 and job.sequence_parallel:
        arg("--tp-comm-overlap")  # Transformer Engine userbuffers: needs sequence parallelism
    elif t.tp_comm_overlap and job.tp > 1:
        em.note("TP communication overlap: Megatron's --tp-comm-overlap needs sequence parallelism, which this "
                "plan does not use")
    if job.tp_wgrad_costed and not t.tp_wgrad_overlap:
        em.note("tp_wgrad_overlap off: Megatron always reduces the QKV and MLP-up input gradients beside their "
                "weight-gradient GEMMs (no flag turns it off), so the step runs a little faster than the plan "
                "assumed")
    if t.grad_reduce_dtype == "bf16" and job.dp * job.cp > 1:
        arg("--grad-reduce-in-bf16")
    if t.optimizer_states != "fp32" and job.zero >= 1:
        # bf16 Adam moments; the master's high 16 bits are the bf16 weight unless remainders are off
        arg("--use-precision-aware-optimizer")
        arg("--exp-avg-dtype", "bf16")
        arg("--exp-avg-sq-dtype", "bf16")
        if t.optimizer_states == "bf16":
            em.note("optimizer_states bf16 (an fp32 master beside bf16 moments): Megatron-Core keeps only the "
                    "master's low 16 bits beside the bf16 weight (store_param_remainders, on by default; the pinned "
                    "Megatron-LM has no --no-store-param-remainders), 2 bytes a parameter less than the plan assumed")
    elif t.optimizer_states != "fp32":
        em.note(f"optimizer_states {t.optimizer_states}: Megatron-Core's precision-aware optimizer works with its "
                f"distributed optimizer, and this plan does not shard the optimizer (ZeRO 0); fp32 state needs "
                f"more memory than the plan assumed")
    if t.precision == "fp8" and t.fp8_param_gather and job.zero >= 1 and job.dp > 1:
        arg("--fp8-param-gather")
    if t.ep_comm_overlap and job.ep > 1:
        arg("--overlap-moe-expert-parallel-comm")
    if job.ep > 1 and not (t.precision == "fp8" and t.ep_dispatch_dtype == "fp8"):
        if t.ep_dispatch == "dedup":  # DeepEP: one copy a remote node, fanned out over NVLink
            arg("--moe-token-dispatcher-type", "flex")
            arg("--moe-flex-dispatcher-backend", "deepep")
        else:  # Megatron's default dispatcher is allgather; the plan costs all-to-alls over the EP ranks
            arg("--moe-token-dispatcher-type", "alltoall")
    if t.precision == "fp8" and t.ep_dispatch_dtype == "fp8" and job.ep > 1:
        # Megatron-Core's dispatchers send MoE tokens in 16 bits; only its ncclep flex backend quantises them before
        # the all-to-all (MXFP8 on the wire: the dispatch and the gradient the backward sends back that way).
        arg("--moe-token-dispatcher-type", "flex")
        arg("--moe-flex-dispatcher-backend", "ncclep")
        arg("--moe-dispatch-fwd-dtype", "mxfp8")
        arg("--moe-combine-bwd-dtype", "mxfp8")
        arg("--use-transformer-engine-op-fuser")
    if t.precision == "fp8" and t.fp8_saved_inputs == "bf16":
        em.note("fp8_saved_inputs bf16: Transformer Engine keeps each FP8 linear's 1-byte input for the backward, "
                "so activations take less memory than the plan assumed")
    if t.checkpoint_impl == "pytorch" and job.recompute != "none":
        em.note("checkpoint_impl pytorch (PyTorch's checkpointing stops early; its selective policy gathers the "
                "sequence-parallel inputs again): Megatron reruns the whole layer, so full recompute costs "
                "a little more than the plan assumed")
    if t.elementwise == "eager":
        em.note("elementwise eager: Megatron fuses norms, activations and rotary embedding, so it runs faster "
                "than the plan assumed")
    if t.cross_entropy == "eager":
        em.note("cross_entropy eager: Megatron's vocab-parallel cross-entropy works in place, so the loss takes "
                "less memory than the plan assumed")
    elif t.cross_entropy == "chunked":
        em.note("cross_entropy chunked: Megatron's vocab-parallel cross-entropy holds the whole micro-batch's "
                "logits (4 bytes each, in place), more memory than the plan assumed")
    if t.projections == "separate":
        em.note("projections separate: Megatron-Core runs Q, K, V as one GEMM and gate+up as one, so the "
                "projections run faster than the plan assumed")
    if job.zero == 2 and t.zero_granularity == "layer":
        em.note("zero_granularity layer (FSDP's per-layer ZeRO-2): Megatron-FSDP optim_grads is the nearest")
    if job.cp > 1 and not t.cp_load_balance:
        em.note("cp_load_balance off: Megatron always balances the causal mask over the CP ranks")
    if job.cp > 1 and t.cp_impl == "pytorch":
        em.note("cp_impl pytorch: Megatron-Core runs Transformer Engine's ring attention, whose fused merges move "
                "less memory than PyTorch's context_parallel, so faster than the plan assumed")
