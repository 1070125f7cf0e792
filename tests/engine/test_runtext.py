"""What a published row's free text says about its run (planner/runtext.py), on the phrasings the sources use."""
from __future__ import annotations

import pytest

from planner import runtext as rt

FOUNDRY_2023 = "submit_benchmarks.py default attn_impl='triton' (sweep.sh does not override it)"
FOUNDRY_2024 = "fsdp limit_all_gathers=true; attn_impl 'flash' for 1b/3b/7b/70b and 'triton' for 13b/30b; image"


@pytest.mark.parametrize("row, gpu, kernel", [
    ({"notes": FOUNDRY_2023, "model": "MPT-7b"}, "H100 SXM5 80GB", "triton"),
    ({"notes": FOUNDRY_2024, "model": "MPT-7b (llm-foundry mpt-7b.yaml)"}, "H100 SXM5 80GB", "flash"),
    ({"notes": FOUNDRY_2024, "model": "MPT-13b (llm-foundry mpt-13b.yaml)"}, "H100 SXM5 80GB", "triton"),
    ({"notes": "blog: PyTorch nightlies post-2.2, SDPA FlashAttention-2"}, "A100 SXM4 80GB", "flash"),
    ({"group": "A_sc21", "notes": "End-to-end throughput"}, "A100 SXM4 80GB", "unfused"),
    ({"group": "A_sc21", "notes": "End-to-end throughput"}, "H100 SXM5 80GB", "flash"),
    ({"group": "F_x", "notes": ""}, "A100 SXM4 80GB", "flash"),
    # Transformer Engine picks its own backend (te): cuDNN FusedAttention on Hopper and later, FlashAttention before.
    ({"notes": "Megatron-LM examples/moe_recipes README row"}, "H100 SXM5 80GB", "te"),
    ({"notes": "Megatron-Core with Transformer Engine"}, "GB200", "te"),
    ({"notes": "Megatron-Core with Transformer Engine"}, "A100 SXM4 80GB", "te"),
    ({"notes": "NeMo 2.0 recipe, attention_backend flash"}, "H100 SXM5 80GB", "flash"),
    ({"notes": "SDPA with the cuDNN backend"}, "H100 SXM5 80GB", "cudnn"),
    # cuDNN named for another op is not the attention kernel.
    ({"notes": "torchtitan, SDPA flash; NVTE_NORM_FWD_USE_CUDNN=1 (cuDNN LayerNorm)"}, "H100 SXM5 80GB", "flash"),
    ({"model": "Nemotron-4 15B", "notes": "Table 2 batch-size ramp stage"}, "H100 SXM5 80GB", "flash"),
    # A kernel the row says it did not run is not its kernel.
    ({"group": "F_x", "notes": "Megatron-DeepSpeed, fused softmax (no flash attention)"}, "A100 SXM4 80GB",
     "unfused"),
    ({"group": "F_x", "notes": "trained without FlashAttention"}, "H100 SXM5 80GB", "unfused"),
    ({"group": "F_x", "notes": "no FlashAttention-3; SDPA flash backend"}, "H100 SXM5 80GB", "flash"),
    # Transformer Engine without FlashAttention still runs its cuDNN FusedAttention on Hopper+.
    ({"notes": "Megatron-Core with Transformer Engine, no flash attention"}, "H100 SXM5 80GB", "te"),
    # A stack that postdates FlashAttention runs a flash kernel on an A100, whatever the row's group is called.
    ({"group": "X", "notes": "torchtitan FSDP2"}, "A100 SXM4 80GB", "flash"),
    ({"group": "X", "notes": "fms-fsdp, SDPA"}, "A100 SXM4 80GB", "flash"),
    ({"group": "X", "notes": "Megatron-LM, 2021"}, "A100 SXM4 80GB", "unfused"),
])
def test_the_attention_kernel_is_the_one_the_row_names(row, gpu, kernel):
    assert rt.attention_kernel(row, gpu) == kernel


@pytest.mark.parametrize("row, mode", [
    ({"group": "F_fms", "notes": "torch.compile: off (README Mar 2024)"}, "eager"),
    ({"group": "F_tt", "notes": "torch.compile=false in the train_configs of that time"}, "eager"),
    ({"group": "F_tt", "notes": "That toml also sets compile=true and enable_async_tensor_parallel=true"}, "fused"),
    ({"group": "F_ao", "notes": "sequence length 8192, 100 steps, torch.compile, FSDP2, per-op SAC"}, "fused"),
    ({"group": "F_fms", "notes": "torch.compile: on (README \"Compile Y\")"}, "fused"),
    ({"group": "F_foundry", "notes": "Composer FSDP; no compile flag"}, "eager"),
    ({"group": "X", "notes": "trained with PyTorch FSDP full shard"}, "eager"),
    ({"group": "X", "notes": "Megatron-LM with Transformer Engine"}, "fused"),
    ({"group": "X", "notes": "Hugging Face model with DeepSpeed ZeRO-3"}, "eager"),
    ({"group": "X", "notes": "Megatron-DeepSpeed 3D parallelism"}, "fused"),
])
def test_pytorch_stacks_run_eagerly_unless_compiled(row, mode):
    assert rt.elementwise(row) == mode


@pytest.mark.parametrize("notes, gpus, expected", [
    ("README table heading: 'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'.", 8, (200.0, "roce")),
    ("H100 cluster, 96 GPUs, 800 Gbps inter-node interconnect (README/blog)", 8, (100.0, None)),
    ("IBM Cloud cluster with 3.2 Tbps RoCE interconnect for GPU-to-GPU communication (blog).", 8, (400.0, "roce")),
    ("Grand Teton: backend RDMA network 400 Gb/s per GPU; default 500W power limit", 8, (400.0, None)),
    ("8 NVIDIA Mellanox '400 Gbps HDR InfiniBand' HCAs per node", 8, (400.0, "infiniband")),  # the rate wins
    ("Single node 8xH100 (README); NVLink details not stated.", 8, (None, None)),
    ("3.2 Tbps total per node (400 Gbps InfiniBand per GPU)", 8, (400.0, "infiniband")),
    ("RoCE fabric, 1,600 Gbps node-to-node", 8, (200.0, "roce")),
    ("3.2 Tbps per node (RoCE)", 8, (400.0, "roce")), ("8x 400 Gb/s per node, NDR InfiniBand", 8,
                                                        (400.0, "infiniband")),
    ("GB200 NVL72: 4 GPUs per tray, 1.6 Tbps/node", 4, (400.0, None)),
    # Ports x rate, a rate per adapter, a generation alone.
    ("8x 200 Gb/s HDR InfiniBand", 8, (200.0, "infiniband")), ("RoCE, 4 x 400G", 8, (200.0, "roce")),
    ("Selene: 8x A100 80GB per node; 8x Mellanox 200Gbps HDR IB HCAs for application traffic", 8,
     (200.0, "infiniband")),
    ("one 200 Gb/s HDR adapter per GPU", 8, (200.0, "infiniband")), ("HDR InfiniBand fat tree", 8,
                                                                     (200.0, "infiniband")),
    ("EDR and HDR islands, InfiniBand", 8, (None, "infiniband")),  # two generations: neither
    ("100 Gbps Ethernet", 8, (None, "ethernet")),  # per node or per GPU? not said
    ("each node has 4 NVIDIA ConnectX-7 400G NICs", 8, (200.0, None)),
    ("eight 400 Gb/s HCAs, InfiniBand NDR", 8, (400.0, "infiniband")),
    ("8 H100 GPUs and 8 400G NICs (RoCE)", 8, (400.0, "roce")), ("in 2024 we used 400G NICs", 8, (None, None)),
])
def test_the_fabric_notes_give_bandwidth_per_gpu_and_kind(notes, gpus, expected):
    assert rt.network({"fabric_notes": notes}, gpus) == expected


@pytest.mark.parametrize("row, states", [
    ({"precision": "BF16", "notes": "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"},
     "bf16_remainder"),
    ({"precision": "BF16", "notes": "precision-aware optimizer, exp_avg_dtype=bf16, --no-store-param-remainders"},
     "bf16"),
    ({"precision": "FP8", "notes": "BF16 optimizer states (first and second moments in BF16), FP32 master weights"},
     "bf16"),
    ({"precision": "BF16", "notes": "--use-precision-aware-optimizer with fp32 moments"}, "fp32"),
    ({"precision": "BF16", "notes": "optimizer states in fp32, not bf16 optimizer states"}, "fp32"),
    ({"precision": "BF16", "optimizer_sharding": "distributed optimizer"}, "fp32"),
    ({"precision": "BF16", "notes": "optim: distributed_fused_adam, grad_sync_dtype: bf16, dtype: bf16"},
     "bf16_remainder"),
    ({"precision": "BF16", "notes": "NeMo distributed_fused_adam, optim grad_sync_dtype bf16"}, "fp32"),
    ({"precision": "BF16", "notes": "optim.dtype=bf16"}, "bf16_remainder"),
])
def test_optimizer_states_are_fp32_unless_the_row_says_bf16(row, states):
    assert rt.optimizer_states(row) == states


@pytest.mark.parametrize("row, dtype", [
    ({"precision": "FP8", "notes": "DeepSeek-V3 pretraining setting: FP8 dispatching and BF16 combining"}, "fp8"),
    ({"precision": "MXFP8", "notes": "moe_dispatch_fwd_dtype: mxfp8, moe_combine_bwd_dtype: mxfp8"}, "fp8"),
    ({"precision": "FP8", "notes": "tokens dispatched in FP8 over DeepEP"}, "fp8"),
    ({"precision": "MXFP8 (fp8_recipe mxfp8)", "notes": "dispatcher flex/hybridep"}, "bf16"),
    ({"precision": "FP8", "notes": "no fp8 dispatch"}, "bf16"),
    ({"precision": "BF16"}, "bf16"),
])
def test_moe_tokens_are_read_as_16_bit_unless_the_row_says_they_travel_in_fp8(row, dtype):
    assert rt.ep_dispatch_dtype(row) == dtype


@pytest.mark.parametrize("row, dtype", [
    ({"precision": "BF16 (FSDP MixedPrecision bfSixteen: param/reduce/buffer bf16; fms-fsdp policies)"}, "bf16"),
    ({"precision": "BF16 (torchtitan defaults: FSDP2 param bf16 / reduce fp32)"}, "fp32"),
    ({"precision": "BF16", "notes": "--grad-reduce-in-bf16"}, "bf16"),
    ({"precision": "BF16 (Composer precision amp_bf16; FSDP mixed_precision DEFAULT)"}, "fp32"),
    ({"precision": "BF16 (table precision 'bf16'; FSDP mixed_precision PURE)"}, "bf16"),
    ({"precision": "BF16 (FSDP mixed_precision DEFAULT)",
      "notes": "sweep.py passes --fsdp_config_mixed_precision pure but run_config does not forward it"}, "fp32"),
    ({"precision": "BF16", "notes": "recipe: grad_reduce_in_fp32 False"}, "bf16"),
    ({"precision": "BF16", "notes": "Megatron default grad_reduce_in_fp32 True"}, "fp32"),
    ({"precision": "FP8", "notes": "NeMo distributed_fused_adam, optim grad_sync_dtype bf16"}, "bf16"),
    ({"precision": "FP8", "notes": "optim grad_sync_dtype: fp32"}, "fp32"),
])
def test_gradients_are_reduced_in_fp32_unless_the_row_says_bf16(row, dtype):
    assert rt.grad_reduce_dtype(row) == dtype


@pytest.mark.parametrize("sharding, granularity", [
    ("FSDP SHARD_GRAD_OP (ZeRO-2-like: grads + optimizer state + flat params sharded)", "layer"),
    # A PyTorch FSDP run of another stage would run its ZeRO-2 as FSDP does (the search's ZeRO-2 layouts for it).
    ("FSDP FULL_SHARD (ZeRO-3)", "layer"), ("FSDP2 (fully_shard) over 8 ranks", "layer"),
    ("ZeRO-2 (DeepSpeed)", "bucket"), (None, "bucket"), ("distributed optimizer (FSDP 0)", "bucket"),
    ("Megatron-FSDP (use_megatron_fsdp True, optim_grads_params)", "bucket"),
])
def test_fsdp_zero2_works_layer_by_layer(sharding, granularity):
    assert rt.zero_granularity({"optimizer_sharding": sharding}) == granularity


def test_block_level_checkpointing_recomputes_the_share_its_flops_show():
    row = {"recompute": "selective (fms-fsdp block-level selective AC: checkpoint a subset/every k-th block)",
           "hfu_percent": 40.0, "mfu_percent": 35.0}
    assert rt.recompute_mode(row) is None  # the mode alone does not say how much
    # HFU / MFU = 1 + f L / (3 F): with the layers 95% of the forward FLOPs, f = (40/35 - 1) x 3 / 0.95.
    assert rt.recompute_fraction(row, 3.0, 0.95) == pytest.approx((40 / 35 - 1) * 3 / 0.95)
    assert rt.recompute_fraction({"recompute": "selective, per-layer (checkpoint every 2nd block)"}, 3, 1) == 0.5
    assert rt.recompute_fraction({"recompute": "selective, per-layer (every k-th block; k not stated)"}, 3, 1) is None
    assert rt.recompute_fraction({"recompute": "full"}, 3, 1) is None


@pytest.mark.parametrize("recompute, share", [
    # Megatron's block method recomputes --recompute-num-layers layers of each model chunk: 80 layers over PP 4 x
    # VP 2 are chunks of 10.
    ("full (recompute_granularity full, recompute_method block, recompute_num_layers 5)", 0.5),
    ("full recompute of 5 layers per pipeline stage (block method)", 0.5),
    ("full, 40 layers (block)", 1.0),
    ("activation checkpointing of 20 of 80 layers", 0.25),
])
def test_partial_full_recomputation_is_the_share_of_layers_the_row_states(recompute, share):
    row = {"recompute": recompute, "layers": 80, "pp": 4, "vp": 2}
    assert rt.block_level(row) and rt.recompute_mode(row) is None
    assert rt.recompute_fraction(row, 3, 1) == pytest.approx(share)


def test_uniform_recomputation_is_all_of_the_layers():
    row = {"recompute": "full (recompute_method uniform, recompute_num_layers 1)", "layers": 80, "pp": 4}
    assert not rt.block_level(row) and rt.recompute_mode(row) == "full"


def test_torchtitans_per_layer_checkpointing_defaults_to_every_other_layer():
    """torchtitan's selective_ac_option defaults to "2" (checkpoint every other layer); its 2024 performance doc
    names only "selective layer". Another stack's unstated k stays unknown."""
    row = {"recompute": "selective, per-layer (checkpoint every k-th block; k not stated in doc)",
           "source": {"title": "pytorch/torchtitan docs/performance.md"}, "mfu_percent": 56.8}
    assert rt.recompute_fraction(row, 3, 1) == 0.5
    assert rt.recompute_fraction({**row, "recompute": "selective, per-layer (checkpoint every 4th block)"}, 3, 1) \
        == 0.25
    assert rt.recompute_fraction({**row, "source": {"title": "fms-fsdp"}}, 3, 1) is None


@pytest.mark.parametrize("notes, overlap", [
    ("features 'DeepEP; EP overlap'. Recipe YAML: overlap_moe_expert_parallel_comm True", True),
    ("features 'BF16 baseline'. Recipe YAML: overlap_moe_expert_parallel_comm False, delay_wgrad_compute False", False),
    ("launched with --overlap-moe-expert-parallel-comm", True), ("no MoE flags", False),
    ("no EP overlap", False), ("without EP A2A overlap", False),
])
def test_moe_all_to_all_overlap_as_the_row_states_it(notes, overlap):
    assert rt.ep_overlap({"notes": notes}) is overlap


@pytest.mark.parametrize("row, overlapped", [
    ({"notes": "Megatron-LM examples/moe_recipes README row; VPP4"}, True),
    ({"notes": "NeMo container 26.04 (Megatron-Bridge v0.4.0)"}, True),
    ({"notes": "NeMo container 26.04; --no-overlap-p2p-communication"}, False),
    ({"notes": "Megatron-Core; overlap_p2p_comm: false"}, False),
    ({"pipeline_schedule": "interleaved 1F1B (Megatron-LM), maximum chunks", "notes": "Zero Bubble"}, False),
    ({"notes": "End-to-end throughput", "source": {"title": "Narayanan et al. 2021"}}, False),
    ({"notes": "torchtitan, Interleaved1F1B"}, False),
    ({"notes": "Pipeline stages exchange activations and gradients by asynchronous point-to-point communication"},
     True),  # Llama 3's own stack (Llama 3 paper, sec. 3.3.2)
    ({"notes": "async p2p between stages"}, True),
])
def test_pipeline_hand_offs_overlap_on_megatron_core_stacks(row, overlapped):
    assert rt.pp_overlap(row) is overlapped


TT_2024 = "torch 1963fc8 (2024-12-23), torchao eab345c (2024-12-23), torchtitan 9dec370 (2024-12-26) per the doc."


@pytest.mark.parametrize("row, expected", [
    # before torchtitan #1073: as many micro-batches as PP ranks; two stages per rank for multi-stage schedules
    ({"pp": 8, "notes": TT_2024, "pipeline_schedule": "Interleaved 1F1B (doc)"}, (8, None, 2)),
    ({"pp": 8, "notes": TT_2024, "pipeline_schedule": "1F1B (doc)"}, (8, None, 1)),
    # since: micro-batches of one sequence
    ({"pp": 4, "notes": "torchtitan 5e2033c (2025-06-01)", "pipeline_schedule": "ZBVZeroBubble"}, (None, 1, 2)),
    # undated: the stages per rank only; another stack: nothing
    ({"pp": 4, "notes": "torchtitan, Interleaved1F1B", "pipeline_schedule": "Interleaved 1F1B"}, (None, None, 2)),
    ({"pp": 4, "notes": "Megatron-Core (2024-12-26)", "pipeline_schedule": "Interleaved 1F1B"}, None),
])
def test_torchtitan_pipeline_defaults_by_version(row, expected):
    assert rt.torchtitan_pipeline(row) == expected


@pytest.mark.parametrize("row, layers", [
    ({"notes": "NeMo perf recipe: cpu_offloading_num_layers: 20, Megatron FSDP"}, 20),
    ({"notes": "EXTRA_ARGS --cpu-offloading-num-layers 39"}, 39),
    ({"recompute": "none; offloads the activations of 30 layers to the Grace CPU"}, 30),
    ({"notes": "40 layers' activations offloaded to host memory"}, 40),
    ({"notes": "Activation offload: 12 layers"}, 12),
    ({"notes": "Activation CPU offload: False."}, 0),  # llm-foundry rows say it was off
    ({"recompute": "selective recompute, modules ['mla_up_proj']; fine-grained activation offloading of "
                   "['expert_fc1']"}, 0),  # named modules, not layers: no engine option
    ({"notes": ""}, 0),
])
def test_offloaded_layers_are_the_ones_the_row_states(row, layers):
    assert rt.offload_layers(row) == layers


@pytest.mark.parametrize("row, on", [
    ({"notes": "env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, NCCL_NVLS_ENABLE=0"}, True),
    ({"notes": "PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments: True'"}, True),
    ({"notes": "expandable_segments:False"}, False),
    ({"notes": ""}, False),
])
def test_expandable_segments_are_on_only_where_the_row_says_so(row, on):
    assert rt.expandable_segments(row) is on


@pytest.mark.parametrize("gpu_type, name", [
    ("AMD Instinct MI300X", "AMD MI300X"), ("MI355X (OAM)", "AMD MI355X"), ("A800 80GB", "A100 SXM4 80GB"),
    ("H100-80GB (table: h100_80gb)", "H100 SXM5 80GB"), ("A100-40GB (table: a100_40gb)", "A100 SXM4 40GB"),
])
def test_a_rows_gpu_is_the_catalog_gpu_it_names(gpu_type, name):
    from planner.published import gpu_name
    assert gpu_name({"gpu_type": gpu_type}) == name


def test_a_row_on_a_gpu_the_catalog_lacks_is_reported_not_costed_as_an_a100(catalog):
    """An L40S row had been costed as an A100 40GB, the fallback for rows that name no GPU generation."""
    from planner.published import compare, load_rows
    from pathlib import Path
    runs = Path(__file__).resolve().parents[2] / "planner" / "data" / "published_runs.json"
    row = dict(load_rows(runs)[0], id="l40s", gpu_type="L40S 48GB")
    [c] = compare([row], catalog)
    assert c.predicted_s is None and c.why == "no spec: gpu_type: 'L40S 48GB' names no GPU of the catalog"
    [c] = compare([dict(row, gpu_type=None)], catalog)
    assert c.why == "no spec: gpu_type: is not stated"


def test_a_four_bit_row_is_reported_not_costed_at_sixteen_bits():
    from planner.errors import SpecError
    assert rt.precision({"precision": "MXFP8"}, "GB200") == "fp8"
    with pytest.raises(SpecError) as err:
        rt.precision({"precision": "NVFP4"}, "GB300")
    assert err.value.as_dict() == {"precision": ["'NVFP4': the engine has no 4-bit precision (one of bf16, fp16, fp8)"]}
    with pytest.raises(SpecError):
        rt.precision({"precision": "TF32"}, "A100 SXM4 80GB")
    assert rt.precision({"precision": "bf16 with fp32 master weights"}, "H100 SXM5 80GB") == "bf16"
    assert rt.precision({"precision": "mixed fp16/fp32"}, "V100 SXM3 32GB") == "fp16"


@pytest.mark.parametrize("sharding, stage", [
    (None, 0), ("none", 0), ("DDP", 0), ("FSDP NO_SHARD", 0), ("plain data parallel", 0),
    ("DDP with the distributed optimizer", 1), ("ZeRO-1", 1), ("distributed optimizer", 1),
    ("ZeRO stage 2", 2), ("FSDP SHARD_GRAD_OP", 2), ("Megatron-FSDP data-parallel sharding strategy optim_grads", 2),
    ("Megatron-FSDP data-parallel sharding strategy optim_grads_params", 3), ("FSDP2 fully_shard", 3),
    ("HSDP (hybrid shard over 8 GPUs)", 3), ("ZeRO++", 3), ("DeepSpeed ZeRO stage 3", 3), ("fully sharded", 3),
    ("DeepSpeed zero stage: 3", 3), ('"zero_optimization": {"stage": 3}', 3), ("zero_stage=2", 2), ("ZeRO 2", 2),
    ("ZeRO-1 over 32 pipeline stages", 1), ("DDP with zero_stage=1", 1), ("DDP, DeepSpeed zero stage: 1", 1),
    # A table that lists every parallelism with its size says "FSDP 0" for a run without it.
    ("distributed optimizer (FSDP 0)", 1), ("distributed optimizer; FSDP=0", 1), ("no FSDP, distributed optimizer", 1),
    ("Megatron-FSDP off; distributed optimizer", 1), ("FSDP: n/a", 1), ("fms-fsdp FSDP full shard", 3),
    # Said to be unknown: the search picks, as for an unstated recompute.
    ("not stated in the paper", None), ("unknown", None), ("n/a", None),
])
def test_the_zero_stage_is_the_sharding_the_row_names(sharding, stage):
    assert rt.zero_stage(sharding) == stage


@pytest.mark.parametrize("notes, gather", [
    ("fp8_param_gather True", True), ("Recipe YAML: fp8_param_gather False, overlap_grad_reduce True", False),
    ("enable_fsdp_float8_all_gather=true", True), ("enable_fsdp_float8_all_gather=false", False),
    ("torchao float8, bf16 FSDP all-gather", False), ("", False),
    ("--fp8-param-gather", True), ("no fp8 param gather", False), ("float8 all-gather disabled", False),
])
def test_an_fp8_parameter_gather_is_read_on_or_off_as_stated(notes, gather):
    assert rt.fp8_gather({"notes": notes, "precision": "FP8"}) is gather


def test_a_stack_the_row_says_it_did_not_use_is_not_its_stack():
    """Megatron-Bridge's tables list FSDP with its size (0 when off) and its notes say "no FSDP/offloading": the
    run is Megatron's, with its fused kernels, own recomputation and Transformer Engine's FP8 inputs."""
    bridge = {"group": "X_megatron_bridge_perf", "notes": "Table row: DGX-H100 | FSDP 0 | TP 4. no FSDP/offloading; "
              "recipe llama3_70b_pretrain_config + perf overrides: transformer_engine, apply_rope_fusion True",
              "optimizer_sharding": "distributed optimizer"}
    assert not rt.native_stack(bridge) and rt.elementwise(bridge) == "fused"
    assert not rt.native_stack({**bridge, "notes": "FSDP=0; Megatron-Core"})
    assert rt.native_stack({"group": "X", "notes": "PyTorch FSDP2, torch.compile off"})
    assert rt.native_stack({"group": "X", "notes": "Hugging Face model under FSDP"})
    assert rt.elementwise({"group": "X", "notes": "DeepSpeed ZeRO-3, no torch.compile"}) == "eager"
    assert rt.affirmed("fsdp", "fsdp2 fully_shard") and not rt.affirmed("fsdp", "non-fsdp run, fsdp: off")
    # A source that only compares with Megatron does not make a PyTorch run Megatron's.
    assert rt.native_stack({"group": "X", "notes": "torchtitan FSDP2", "source": {"title": "vs Megatron-LM"}})


@pytest.mark.parametrize("recompute, mode", [
    ("full (uniform, 1 layer)", "full"), ("none configured", "none"), ("no activation checkpointing", "none"),
    ("off", "none"), ("disabled", "none"), ("without recomputation", "none"),
    ("activation checkpointing: full", "full"), ("recompute_granularity=full", "full"),
    ("per-op selective AC", "selective"), ("AC: selective op", "selective"),
    ("not stated", None), ("n/a", None),
    ("activation checkpointing", "full"), ("gradient checkpointing (Hugging Face)", "full"),
    ("checkpoint_activations: true", "full"), ("activation_checkpointing: false", "none"),
    ("gradient_checkpointing=False", "none"), ("--recompute-activations", "selective"),
    ("recompute_granularity: null", "none"), ("activations_checkpoint_granularity None", "none"),
    # A table's yes/no column.
    ("No", "none"), ("no", "none"), ("Yes", "full"), ("true", "full"), ("enabled", "full"), ("nothing", None),
])
def test_the_recompute_mode_is_the_one_the_row_names(recompute, mode):
    assert rt.recompute_mode({"recompute": recompute, "source": {}}) == mode


@pytest.mark.parametrize("notes, overlap", [
    ("--tp-comm-overlap", True), ("ub_tp_comm_overlap: True", True), ("TP communication overlap enabled", True),
    ("torchtitan async TP", True), ("tp_comm_overlap: False", False), ("tp-comm-overlap off", False),
    ("ub_tp_comm_overlap false (launcher yaml)", False), ("vanilla TP baseline", False), ("", False),
    ("TP overlap on (userbuffers)", True), ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", True),
    ("TP overlap: off", False),
    # Negated mentions: the overlap was not used.
    ("without async TP", False), ("async TP disabled", False), ("no --tp-comm-overlap", False),
    ("tp-comm-overlap not used", False), ("async-TP: False", False), ("userbuffers off", False),
    ("async TP on", True),
])
def test_tp_overlap_is_on_only_where_the_row_says_so(notes, overlap):
    assert rt.tp_overlap({"notes": notes}) is overlap


@pytest.mark.parametrize("row, gpu, overlap", [
    ({"group": "M_nemotron4_15b", "notes": "Megatron-Core"}, "H100 SXM5 80GB", True),
    ({"group": "A_sc21_table1_weak_scaling", "notes": "Megatron-LM"}, "A100 SXM4 80GB", False),
    ({"group": "A3_megatron_readme_2020"}, "V100 SXM3 32GB", False),
    ({"group": "F_torchtitan_asynctp_h100_202506", "notes": "vanilla TP"}, "H100 SXM5 80GB", False),
    ({"group": "X", "notes": "NeMo 2.0, Transformer Engine"}, "A100 SXM4 80GB", True),
])
def test_the_backward_tp_reductions_overlap_in_megatron_stacks_since_2021(row, gpu, overlap):
    assert rt.tp_wgrad_overlap(row, gpu) is overlap


@pytest.mark.parametrize("row, deepspeed", [
    ({"notes": "Megatron-DeepSpeed, DeepSpeed pipeline engine"}, True),
    ({"optimizer_sharding": "DeepSpeed ZeRO stage 1"}, True),
    ({"notes": "Megatron-LM; no DeepSpeed"}, False),
    ({"model": "MPT-7b", "notes": "GPT-NeoX-20B tokenizer"}, False),
])
def test_a_deepspeed_run_is_one_that_names_deepspeed_as_used(row, deepspeed):
    assert rt.deepspeed_stack(row) is deepspeed


@pytest.mark.parametrize("text, streams", [
    ("multi_latent_attention; mhc (use_fused_mhc true); mtp layers 1", 4),
    ("hyper-connections with expansion rate 2", 2),
    ("manifold-constrained hyper-connections, n = 4", 4),
])
def test_hyper_connections_keep_the_streams_the_row_states(text, streams):
    assert rt.hyper_connection_streams(text) == streams


@pytest.mark.parametrize("text, precision", [
    ("MXFP8 (fp8_recipe mxfp8)", "fp8"), ("BF16 (no FP8)", "bf16"), ("bf16, without float8", "bf16"),
    ("FP8 current scaling; not NVFP4", "fp8"), ("Float8 linears via torchao", "fp8"),
])
def test_a_precision_the_row_says_it_did_not_use_is_not_its_precision(text, precision):
    assert rt.precision({"precision": text}, "H100 SXM5 80GB") == precision


@pytest.mark.parametrize("row, partitioned", [
    ({"notes": "Megatron-DeepSpeed --checkpoint-activations --partition-activations"}, True),
    ({"recompute": "full, distribute_checkpointed_activations"}, True),
    ({"notes": "partition_activations: false"}, False),
    ({"notes": "Megatron-LM full recomputation"}, False),
])
def test_partitioned_saved_inputs_as_the_row_states_them(row, partitioned):
    assert rt.partition_activations(row) is partitioned


@pytest.mark.parametrize("schedule, layers, pp, stages", [
    ("interleaved 1F1B, 2 virtual stages", 80, 4, 2), ("interleaved (virtual pipeline size 5)", 80, 4, 5),
    ("interleaved, vpp=4", 80, 4, 4), ("interleaved 1F1B, 2 model chunks per pipeline rank", 80, 4, 2),
    ("interleaved 1F1B; num_layers_per_virtual_pipeline_stage=5", 80, 4, 4),
    ("interleaved 1F1B; num_layers_per_virtual_pipeline_stage=3", 80, 4, None),  # 80 / (4 x 3) is no whole count
    ("interleaved 1F1B", 80, 4, None), ("Interleaved 1F1B (doc); virtual stages not stated", 80, 4, None),
    ("non-interleaved 1F1B, 4 chunks per rank", 80, 4, None), ("1F1B", 80, 4, None),
])
def test_the_virtual_stages_a_schedule_states_in_words(schedule, layers, pp, stages):
    assert rt.virtual_stages({"pipeline_schedule": schedule, "layers": layers, "pp": pp}) == stages


@pytest.mark.parametrize("notes, megatron, native", [
    ("PyTorch FSDP, not Megatron", False, True),
    ("torchtitan FSDP2; 1.2x faster than Megatron-LM on the same cluster", False, True),
    ("FSDP2 run, compared with Megatron-Core at the same batch", False, True),
    ("not using Transformer Engine; PyTorch FSDP", False, True),
    ("Megatron-Core with Transformer Engine", True, False), ("Megatron-DeepSpeed", True, False),
])
def test_a_stack_named_only_as_the_comparison_or_negated_is_not_the_runs(notes, megatron, native):
    row = {"group": "X", "notes": notes}
    assert rt.megatron_stack(row) is megatron and rt.native_stack(row) is native


def test_a_precision_named_as_the_comparison_is_not_the_runs():
    assert rt.precision({"precision": "BF16 (1.3x slower than FP8)"}, "H100 SXM5 80GB") == "bf16"
    assert rt.precision({"precision": "FP8 (vs. BF16 baseline)"}, "H100 SXM5 80GB") == "fp8"


@pytest.mark.parametrize("recompute, share", [
    ("activation checkpointing every 2 layers", 0.5), ("full AC on every 4th block", 0.25),
    ("checkpoint every other layer", 0.5), ("selective (every 2nd layer)", 0.5),
    ("full (FSDP activation checkpointing of every MPT block)", None),
    ("full activation checkpointing (every transformer block)", None),
])
def test_checkpointing_every_nth_layer_is_that_share_and_every_block_is_all(recompute, share):
    row = {"recompute": recompute, "layers": 80, "pp": 1, "source": {}}
    assert rt.block_level(row) is (share is not None)
    assert rt.recompute_fraction(row, 1.0, 1.0) == share
    assert rt.recompute_mode(row) == (None if share is not None else "full")
