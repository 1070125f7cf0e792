"""Launch configurations: each export carries the plan's layout, batch and schedule; every flag and key is one the
framework's kept list holds; the SLURM/torchrun ranks put every TP group inside one NVLink domain."""
from __future__ import annotations

from dataclasses import replace

import json
import re
import shlex
import tomllib
from functools import lru_cache

import numpy as np
import pytest

from planner import parse_spec, plan
from planner.catalog import load_catalog
from planner.launch import FRAMEWORKS, launch_config, launch_configs
from planner.launch import common as launch_common
from planner.launch.names import LISTS, KeptList, kept
from planner.launch.slurm import rank_map
from planner.memory import end_stage_layers, stage_split
from planner.placement import place, rank_strides
from planner.topology import domain_gpus

from .conftest import EXAMPLES, example

EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.json"))
SMALL = {"name": "small", "layers": 30, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn_hidden": 5632,
         "gated_mlp": True, "vocab": 32000, "seq_len": 4096}


@lru_cache(maxsize=None)
def answer(name: str, top: int = 3) -> tuple:
    spec = parse_spec(example(name), load_catalog())
    return spec, plan(spec, top=top)


def small_plan(cluster: dict, layout: dict | None = None, training: dict | None = None,
               model: dict | None = None) -> tuple:
    doc = {"model": {**SMALL, **(model or {})}, "training": {"global_batch": 64, **(training or {})},
           "cluster": cluster, "layout": layout or {}}
    spec = parse_spec(doc, load_catalog())
    result = plan(spec, top=1)
    assert result["plans"], result["rejected"]
    return spec, result["plans"][0]


H100_32 = {"num_gpus": 32, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}


# --------------------------------------------------------------------------------------------------------
# Reading the exports back (independently of the code that wrote them)


def megatron_args(text: str) -> dict[str, str | None]:
    body = text[text.index("MEGATRON_ARGS=(") + len("MEGATRON_ARGS=("):text.index("\n)")]
    args: dict[str, str | None] = {}
    for line in body.strip().splitlines():
        name, _, value = line.strip().partition(" ")
        args[name] = shlex.split(value)[0] if value else None
    return args


def deepspeed_json(text: str) -> dict:
    return json.loads("\n".join(line for line in text.splitlines() if not line.startswith("//")))


def flat_keys(table: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in table.items():
        if isinstance(value, dict):
            out += flat_keys(value, f"{prefix}{key}.")
        else:
            out.append(prefix + key)
    return out


def slurm_names(text: str) -> list[str]:
    names = [f"sbatch {m}" for m in re.findall(r"^#SBATCH (--[a-z-]+)", text, re.M)]
    srun = re.search(r"^srun (.*?) bash -c", text, re.M).group(1)
    names += [f"srun {m}" for m in re.findall(r"(--[a-z-]+)", srun)]
    inner = re.search(r"exec torchrun (.*?) \"\$@\"", text).group(1)
    return names + re.findall(r"(--[a-z-]+)=", inner)


def names_in(framework: str, text: str) -> list[str]:
    if framework == "megatron":
        return list(megatron_args(text))
    if framework == "torchtitan":
        return flat_keys(tomllib.loads(text))
    if framework == "deepspeed":
        return flat_keys(deepspeed_json(text))
    return slurm_names(text)


# --------------------------------------------------------------------------------------------------------
# The plan's layout, batch and schedule


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_export_of_the_examples_carries_the_layout_batch_and_schedule(name):
    spec, result = answer(name)
    best = result["plans"][0]
    lay = best["layout"]
    exports = {fw: launch_config(spec, best, fw) for fw in FRAMEWORKS}

    m = megatron_args(exports["megatron"].text)
    assert m["--tensor-model-parallel-size"] == str(lay["tp"])
    assert m["--pipeline-model-parallel-size"] == str(lay["pp"])
    assert m.get("--context-parallel-size", "1") == str(lay["cp"])
    assert m["--micro-batch-size"] == str(lay["micro_batch"])
    assert m["--global-batch-size"] == str(spec.training.global_batch)
    assert m.get("--num-virtual-stages-per-pipeline-rank", "1") == str(lay["vpp"])
    assert ("--sequence-parallel" in m) == lay["sequence_parallel"]
    assert m.get("--recompute-granularity") == {"none": None, "selective": "selective", "full": "full"}[
        lay["recompute"]]
    assert ("--use-tp-pp-dp-mapping" in m) == (lay["rank_order"] == "tp-cp-pp-dp")
    assert m["--num-layers"] == str(spec.model.layers) and m["--seq-length"] == str(spec.model.seq_len)

    t = tomllib.loads(exports["torchtitan"].text)
    par = t["parallelism"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (
        lay["tp"], lay["pp"], lay["cp"])
    assert par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"] == lay["dp"]
    assert t["training"]["global_batch_size"] == spec.training.global_batch
    if lay["pp"] > 1:
        assert par["pipeline_parallel_microbatch_size"] == lay["micro_batch"]
        assert par["pipeline_parallel_schedule"] == ("Interleaved1F1B" if lay["vpp"] > 1 else "1F1B")
        assert t["training"]["local_batch_size"] * lay["dp"] == spec.training.global_batch
    else:
        assert t["training"]["local_batch_size"] == lay["micro_batch"]

    ds = deepspeed_json(exports["deepspeed"].text)
    assert ds["zero_optimization"]["stage"] == lay["zero"]
    assert ds["train_batch_size"] == spec.training.global_batch
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] \
        * lay["dp"]

    s = exports["slurm"].text
    nodes = int(re.search(r"#SBATCH --nodes=(\d+)", s).group(1))
    per_node = int(re.search(r"#SBATCH --gpus-per-node=(\d+)", s).group(1))
    assert nodes * per_node == spec.cluster.num_gpus
    assert best["label"] in s and best["label"] in exports["megatron"].text


def test_the_llama3_example_exports_interleaving_and_its_batch():
    """The pinned Llama 3 70B example (TP 8, PP 4, micro-batch 1): the best plan interleaves."""
    spec, result = answer("llama3-70b-h100-512-pinned")
    best = result["plans"][0]
    assert best["layout"]["vpp"] > 1
    m = megatron_args(launch_config(spec, best, "megatron").text)
    assert m["--num-virtual-stages-per-pipeline-rank"] == str(best["layout"]["vpp"])
    t = tomllib.loads(launch_config(spec, best, "torchtitan").text)["parallelism"]
    assert t["pipeline_parallel_layers_per_stage"] * t["pipeline_parallel_degree"] * best["layout"]["vpp"] == 80


def test_the_nvl72_example_interleaves_micro_batches_in_groups_megatron_core_accepts():
    """4,608 GB200 in NVL72 racks leave PP 9 (72 = 8 x 9; the global batch is a power of two), so the 32
    micro-batches a step are no multiple of PP: Megatron-Core runs them in groups of 11 (memory.vp_group), which
    the export sets; torchtitan has no such setting and says so."""
    spec, result = answer("gb200-nvl72-405b")
    best = result["plans"][0]
    assert (best["layout"]["pp"], best["layout"]["vpp"]) == (9, 14)
    m = megatron_args(launch_config(spec, best, "megatron").text)
    assert m["--microbatch-group-size-per-virtual-pipeline-stage"] == "11"
    assert "groups of 11" in launch_config(spec, best, "torchtitan").text
    # A step whose micro-batches are a multiple of PP keeps Megatron-Core's default groups: no flag.
    spec, result = answer("llama3-70b-h100-512-pinned")
    assert "--microbatch-group-size-per-virtual-pipeline-stage" not in launch_config(
        spec, result["plans"][0], "megatron").text


# --------------------------------------------------------------------------------------------------------
# Names checked against the kept lists


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_emitted_name_is_in_the_frameworks_kept_list(name):
    spec, result = answer(name)
    for entry in result["plans"]:
        for fw, export in launch_configs(spec, entry).items():
            emitted = names_in(fw, export["text"])
            lists = ("slurm", "torchrun") if fw == "slurm" else (fw,)
            unknown = [n for n in emitted if not any(n in kept(k) for k in lists)]
            assert unknown == [], (fw, unknown)
            assert sorted(emitted) == sorted(export["names"]), fw  # the export's own record is complete
            assert not any("is not an option" in n for n in export["notes"]), export["notes"]


def test_a_flag_missing_from_the_kept_list_is_left_out_and_said(monkeypatch):
    spec, entry = small_plan(H100_32, {"tp": 4, "sequence_parallel": True, "pp": 1})
    real = kept("megatron")
    renamed = KeptList(real.name, real.names - {"--sequence-parallel"}, real.repository, real.commit,
                       real.version, real.path)
    monkeypatch.setattr(launch_common, "kept", lambda name: renamed if name == "megatron" else kept(name))
    export = launch_config(spec, entry, "megatron")
    assert "--sequence-parallel" not in megatron_args(export.text)
    assert any("--sequence-parallel is not an option of NVIDIA/Megatron-LM" in n for n in export.notes)
    assert "# not expressed: --sequence-parallel is not an option" in export.text


def test_the_kept_lists_name_repository_commit_and_version():
    for name in LISTS:
        kl = kept(name)
        assert re.fullmatch(r"https://github.com/[\w.-]+/[\w.-]+", kl.repository), name
        assert re.fullmatch(r"[0-9a-f]{40}", kl.commit), name
        assert kl.version != "?" and len(kl.names) > 20, name
    megatron = kept("megatron")
    # Megatron's interleaving and recompute flags as the kept version spells them
    assert {"--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
            "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--sequence-parallel",
            "--use-distributed-optimizer", "--overlap-grad-reduce", "--fp8-format"} <= megatron.names
    assert "--virtual-pipeline-model-parallel-size" not in megatron.names  # the old name is gone
    assert "parallelism.tensor_parallel_degree" in kept("torchtitan")
    assert "zero_optimization.stage" in kept("deepspeed") and "sbatch --segment" in kept("slurm")


# --------------------------------------------------------------------------------------------------------
# Ranks: every TP group inside one NVLink domain


def tp_groups_by_domain(spec, entry) -> list[set[int]]:
    """For each TP group, the NVLink domains of the physical GPUs its ranks run on under the sbatch script."""
    lay = entry["layout"]
    text = launch_config(spec, entry, "slurm").text
    where = {rank: node * spec.cluster.node.gpus + local for (node, local), rank in rank_map(text).items()}
    assert sorted(where) == list(range(spec.cluster.num_gpus))  # every rank placed once
    stride, size = rank_strides(lay["tp"], lay["cp"], lay["dp"], lay["pp"], lay["ep"], lay["rank_order"])["tp"]
    dom = domain_gpus(spec.cluster)
    firsts = [r for r in range(spec.cluster.num_gpus) if (r // stride) % size == 0]
    return [{where[f + k * stride] // dom for k in range(size)} for f in firsts]


@pytest.mark.parametrize("cluster,layout", [
    (H100_32, {"tp": 8, "pp": 2, "rank_order": "tp-cp-pp-dp"}),
    (H100_32, {"tp": 4, "pp": 2, "rank_order": "tp-cp-dp-pp"}),
    (H100_32, {"tp": 2, "cp": 2, "pp": 2}),
    ({"num_gpus": 144, "gpu": "GB300", "node": "GB300 NVL72 compute tray",
      "fabric": "XDR InfiniBand rail-optimized (Quantum-X800)"}, {"tp": 8, "pp": 9}),
    ({"num_gpus": 16, "gpu": "H200 NVL", "node": "H200 NVL server (4-GPU NVLink bridges)",
      "fabric": "NDR InfiniBand fat tree"}, {"tp": 4}),
])
def test_slurm_ranks_put_each_tp_group_inside_one_nvlink_domain(cluster, layout):
    spec, entry = small_plan(cluster, layout)
    groups = tp_groups_by_domain(spec, entry)
    assert groups and all(len(domains) == 1 for domains in groups)
    lay = entry["layout"]
    placed = place(spec.cluster, lay["tp"], lay["cp"], lay["dp"], lay["pp"], lay["ep"], lay["rank_order"])
    assert placed.tp_inside_nvlink_domain and placed.groups["tp"].domains == 1


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_the_examples_tp_groups_stay_inside_their_nvlink_domains(name):
    spec, result = answer(name)
    assert all(len(d) == 1 for d in tp_groups_by_domain(spec, result["plans"][0]))


def test_an_nvl72_job_asks_slurm_for_whole_racks():
    spec, entry = small_plan({"num_gpus": 144, "gpu": "GB300", "node": "GB300 NVL72 compute tray",
                              "fabric": "XDR InfiniBand rail-optimized (Quantum-X800)"}, {"tp": 4})
    text = launch_config(spec, entry, "slurm").text
    assert "#SBATCH --segment=18" in text and "#SBATCH --nodes=36" in text
    assert "--nproc-per-node=4" in text and '--node-rank="$SLURM_NODEID"' in text
    # 20 trays are not whole racks: no --segment, and no note that says one keeps them together.
    spec, entry = small_plan({"num_gpus": 80, "gpu": "GB300", "node": "GB300 NVL72 compute tray",
                              "fabric": "XDR InfiniBand rail-optimized (Quantum-X800)"}, {"tp": 4})
    text = launch_config(spec, entry, "slurm").text
    assert "--segment" not in text and "not whole NVLink domains of 18 nodes" in text


def test_slurm_asks_for_whole_nodes_only_when_the_job_is_whole_nodes():
    text = launch_config(*small_plan(H100_32, {"tp": 8}), "slurm").text
    assert "#SBATCH --exclusive" in text and "#SBATCH --gpus-per-node=8" in text
    text = launch_config(*small_plan(dict(H100_32, num_gpus=4), {"tp": 4}), "slurm").text
    assert "#SBATCH --exclusive" not in text and "#SBATCH --gpus-per-node=4" in text and "#SBATCH --nodes=1" in text
    assert "# 4 of a node's 8 GPUs, not --exclusive" in text


def test_slurm_sets_expandable_segments_only_when_the_plan_assumed_them():
    """A plan that kept no memory for fragmentation must run with the allocator that needs none."""
    line = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert line not in launch_config(*small_plan(H100_32, {"tp": 8}), "slurm").text
    text = launch_config(*small_plan(H100_32, {"tp": 8}, {"expandable_segments": True}), "slurm").text
    assert text.count(line) == 1 and text.index(line) < text.index("srun ")


# --------------------------------------------------------------------------------------------------------
# What a framework cannot express is said, not guessed


def test_deepspeed_gives_a_plan_without_zero_its_batch_and_stage_0():
    """ZeRO 0 is still a DeepSpeed run: the engine (and its pipeline engine) needs the batch, the micro-batch and
    the accumulation steps; an interleaved schedule, which DeepSpeed's pipeline cannot run, is said."""
    spec, entry = small_plan(H100_32, {"zero": 0, "tp": 4, "pp": 2, "vpp": 3, "micro_batch": 1})
    export = launch_config(spec, entry, "deepspeed")
    ds = deepspeed_json(export.text)
    assert ds["zero_optimization"] == {"stage": 0}
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
        64, 1, 64 // 4)
    assert any("3 virtual stages per pipeline rank" in n and "no interleaved schedule" in n for n in export.notes)


MOE = {**SMALL, "experts": 16, "top_k": 2}


def moe_plan(layout: dict) -> tuple:
    doc = {"model": MOE, "training": {"global_batch": 64}, "cluster": H100_32, "layout": layout}
    spec = parse_spec(doc, load_catalog())
    result = plan(spec, top=1)
    assert result["plans"], result["rejected"]
    return spec, result["plans"][0]


def test_moe_exports_keep_the_experts_whole_as_the_plan_costs_them():
    """The engine costs routed experts unsplit by TP (expert TP 1), with EP folded over TP·CP·DP. Megatron's
    expert TP defaults to the TP size and torchtitan's was written as TP: both must say 1."""
    spec, entry = moe_plan({"tp": 2, "pp": 1, "ep": 8})
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert (m["--expert-model-parallel-size"], m["--expert-tensor-parallel-size"]) == ("8", "1")
    par = tomllib.loads(launch_config(spec, entry, "torchtitan").text)["parallelism"]
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (8, 1)

    spec, entry = moe_plan({"tp": 2, "pp": 1, "ep": 1})
    assert megatron_args(launch_config(spec, entry, "megatron").text)["--expert-tensor-parallel-size"] == "1"
    export = launch_config(spec, entry, "torchtitan")
    assert "expert_tensor_parallel_degree" not in tomllib.loads(export.text)["parallelism"]
    assert any("shards the experts over the TP ranks" in n for n in export.notes)

    spec, entry = small_plan(H100_32, {"tp": 2, "pp": 1})  # dense: no expert flags at all
    assert "--expert-tensor-parallel-size" not in megatron_args(launch_config(spec, entry, "megatron").text)
    assert "--moe-grouped-gemm" not in megatron_args(launch_config(spec, entry, "megatron").text)


def test_group_limited_routing_reaches_megatron():
    doc = {"model": {**MOE, "router_groups": 4, "router_group_top_k": 2}, "training": {"global_batch": 64},
           "cluster": H100_32, "layout": {"tp": 1, "pp": 1, "ep": 8}}
    spec = parse_spec(doc, load_catalog())
    m = megatron_args(launch_config(spec, plan(spec, top=1)["plans"][0], "megatron").text)
    assert (m["--moe-router-num-groups"], m["--moe-router-group-topk"]) == ("4", "2")
    spec, entry = moe_plan({"tp": 1, "pp": 1, "ep": 8})  # ungrouped: Megatron's default, no flags
    assert "--moe-router-num-groups" not in megatron_args(launch_config(spec, entry, "megatron").text)


def test_partitioned_saved_inputs_reach_megatron_and_deepspeed():
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "recompute": "full", "sequence_parallel": False},
                             {"partition_activations": True})
    assert "--distribute-saved-activations" in megatron_args(launch_config(spec, entry, "megatron").text)
    ds = deepspeed_json(launch_config(spec, entry, "deepspeed").text)
    assert ds["activation_checkpointing"]["partition_activations"] is True
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "recompute": "full", "sequence_parallel": False})
    assert "--distribute-saved-activations" not in megatron_args(launch_config(spec, entry, "megatron").text)


def test_megatron_runs_the_experts_gemms_as_the_plan_costs_them():
    """training.expert_gemm: streams is Transformer Engine's GroupedLinear (--moe-grouped-gemm), Megatron-Core's
    only grouped path; a plan costed with one grouped kernel says that Megatron runs the streams."""
    spec, entry = moe_plan({"tp": 1, "pp": 1, "ep": 8})
    export = launch_config(spec, entry, "megatron")
    assert "--moe-grouped-gemm" in megatron_args(export.text)
    assert not any("expert_gemm" in n for n in export.notes)
    spec = replace(spec, training=replace(spec.training, expert_gemm="grouped"))
    export = launch_config(spec, entry, "megatron")
    assert "--moe-grouped-gemm" in megatron_args(export.text)
    assert any("expert_gemm streams" in n for n in export.notes)


def test_deepspeed_carries_the_zero_stage_and_says_where_tp_and_pp_go():
    spec, entry = small_plan(H100_32, {"zero": 1, "tp": 4, "pp": 2, "micro_batch": 2})
    ds = deepspeed_json(launch_config(spec, entry, "deepspeed").text)
    assert ds["zero_optimization"]["stage"] == 1 and ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 64 // (4 * 2)
    assert "PipelineModule(num_stages=2)" in launch_config(spec, entry, "deepspeed").text


def test_torchtitan_says_what_its_mesh_and_precisions_cannot_hold():
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 2, "rank_order": "tp-cp-pp-dp", "zero": 1},
                             {"precision": "fp16"})
    export = launch_config(spec, entry, "torchtitan")
    toml = tomllib.loads(export.text)
    assert "mixed_precision_param" not in toml["training"]
    notes = " ".join(export.notes)
    assert "fp16" in notes and "rank order tp-cp-pp-dp" in notes and "ZeRO-1" in notes


def test_megatron_maps_zero_stages_and_fp8():
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 1, "zero": 3}, {"precision": "fp8"})
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert m["--use-megatron-fsdp"] is None and m["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert m["--fp8-format"] == "hybrid" and "--bf16" in m
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 1, "zero": 1, "recompute": "full"})
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert "--use-distributed-optimizer" in m and "--use-megatron-fsdp" not in m
    assert (m["--recompute-granularity"], m["--recompute-method"], m["--recompute-num-layers"]) == (
        "full", "uniform", "1")


def test_a_plan_entry_that_does_not_match_the_spec_is_refused():
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 1})
    wrong = {**entry, "layout": {**entry["layout"], "dp": entry["layout"]["dp"] * 2}}
    with pytest.raises(ValueError, match="does not match the spec's GPU count"):
        launch_config(spec, wrong, "megatron")
    with pytest.raises(ValueError, match="unknown framework"):
        launch_config(spec, entry, "jax")


def test_the_costed_stack_behaviours_reach_megatron_and_torchtitan():
    """training.* mechanisms the plan was costed with become the frameworks' flags, or a note where a framework
    has none."""
    training = {"tp_comm_overlap": True, "grad_reduce_dtype": "bf16", "checkpoint_impl": "pytorch",
                "elementwise": "eager", "projections": "separate"}
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1, "sequence_parallel": True,
                                       "recompute": "full"}, training)
    megatron = launch_config(spec, entry, "megatron")
    m = megatron_args(megatron.text)
    assert "--tp-comm-overlap" in m and "--grad-reduce-in-bf16" in m
    notes = " ".join(megatron.notes)
    assert "checkpoint_impl pytorch" in notes and "elementwise eager" in notes and "projections separate" in notes
    titan = launch_config(spec, entry, "torchtitan")
    toml = tomllib.loads(titan.text)
    assert toml["parallelism"]["enable_async_tensor_parallel"] is True
    assert toml["training"]["mixed_precision_reduce"] == "bfloat16" and toml["compile"]["enable"] is False
    assert "async TP needs torch.compile" in " ".join(titan.notes)
    assert "projections" not in " ".join(titan.notes)  # torchtitan's own, separate
    # The defaults: no overlap, fp32 reduction, Megatron-style recompute, fused kernels.
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1, "sequence_parallel": True,
                                       "recompute": "full"})
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert "--tp-comm-overlap" not in m and "--grad-reduce-in-bf16" not in m
    titan = launch_config(spec, entry, "torchtitan")
    toml = tomllib.loads(titan.text)
    assert toml["training"]["mixed_precision_reduce"] == "float32" and toml["compile"]["enable"] is True
    assert "enable_async_tensor_parallel" not in toml["parallelism"]
    assert "checkpoint_impl megatron" in " ".join(titan.notes)
    assert "projections fused" in " ".join(titan.notes)
    # Megatron reduces the backward's QKV and MLP-up input gradients beside their weight gradients, always;
    # PyTorch's tensor parallelism never: each export says where the plan assumed otherwise.
    assert "tp_wgrad_overlap:" in " ".join(titan.notes)
    assert "tp_wgrad_overlap" not in " ".join(launch_config(spec, entry, "megatron").notes)
    off, off_entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1, "sequence_parallel": True,
                                          "recompute": "full"}, {"tp_wgrad_overlap": False})
    assert "tp_wgrad_overlap off" in " ".join(launch_config(off, off_entry, "megatron").notes)
    assert "tp_wgrad_overlap" not in " ".join(launch_config(off, off_entry, "torchtitan").notes)
    # Without sequence parallelism tp_comm_overlap reaches no collective, so the option still costs the
    # all-reduces, and the export still says where Megatron differs.
    off, off_entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1, "sequence_parallel": False},
                                {"tp_wgrad_overlap": False, "tp_comm_overlap": True})
    assert "tp_wgrad_overlap off" in " ".join(launch_config(off, off_entry, "megatron").notes)
    on, on_entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1, "sequence_parallel": True},
                              {"tp_wgrad_overlap": False, "tp_comm_overlap": True})
    assert "tp_wgrad_overlap" not in " ".join(launch_config(on, on_entry, "megatron").notes)
    assert m["--attention-backend"] == "flash" and "attention kernel" not in " ".join(titan.notes)
    # cuDNN attention is Megatron's "fused" backend (Transformer Engine's FusedAttention); torchtitan says where
    # its SDPA runs cuDNN.
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1}, {"attention": "cudnn"})
    assert megatron_args(launch_config(spec, entry, "megatron").text)["--attention-backend"] == "fused"
    assert "cuDNN attention on B200 and later only" in " ".join(launch_config(spec, entry, "torchtitan").notes)
    # Transformer Engine's own pick (te, the megatron_core stack's) is Megatron's "auto"; on an H100 it is cuDNN,
    # which torchtitan's SDPA does not run there.
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1}, {"framework": "megatron_core"})
    assert spec.training.attention == "te"
    assert megatron_args(launch_config(spec, entry, "megatron").text)["--attention-backend"] == "auto"
    assert "attention kernel te" in " ".join(launch_config(spec, entry, "torchtitan").notes)
    # The loss: torchtitan compiles it with the model or not at all; Megatron's is always the fused one.
    for elementwise, loss, components, titan_note, megatron_note in (
            ("fused", "fused", ["model", "loss"], False, False), ("fused", "eager", ["model"], False, True),
            ("eager", "fused", None, True, False), ("eager", "eager", None, False, True)):
        spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1}, {"elementwise": elementwise, "cross_entropy": loss})
        titan = launch_config(spec, entry, "torchtitan")
        assert tomllib.loads(titan.text)["compile"].get("components") == components
        assert ("cross_entropy fused" in " ".join(titan.notes)) == titan_note
        assert ("cross_entropy eager" in " ".join(launch_config(spec, entry, "megatron").notes)) == megatron_note
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1}, {"cross_entropy": "chunked"})
    assert "ChunkedLossWrapper" in " ".join(launch_config(spec, entry, "torchtitan").notes)
    assert "cross_entropy chunked" in " ".join(launch_config(spec, entry, "megatron").notes)
    # What FP8 linears keep for the backward is the stack's own: Transformer Engine 1-byte inputs, torchao 16-bit.
    for kept, megatron_note, titan_note in (("fp8", False, True), ("bf16", True, False)):
        spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1}, {"precision": "fp8", "fp8_saved_inputs": kept})
        assert ("fp8_saved_inputs bf16" in " ".join(launch_config(spec, entry, "megatron").notes)) == megatron_note
        assert ("fp8_saved_inputs fp8" in " ".join(launch_config(spec, entry, "torchtitan").notes)) == titan_note
    # Whose ring attention runs under CP is the stack's own: Transformer Engine's in Megatron, PyTorch's in torchtitan.
    for impl, megatron_note, titan_note in (("te", False, True), ("pytorch", True, False)):
        spec, entry = small_plan(H100_32, {"tp": 2, "pp": 1, "cp": 2}, {"cp_impl": impl})
        assert ("cp_impl pytorch" in " ".join(launch_config(spec, entry, "megatron").notes)) == megatron_note
        assert ("cp_impl te" in " ".join(launch_config(spec, entry, "torchtitan").notes)) == titan_note


def test_pipeline_overlap_reaches_megatron_and_torchtitan():
    """Megatron-Core overlaps interleaved stage hand-offs by default; off, the export says so with its flag, and
    torchtitan, whose schedules wait for each receive, gets a note when the plan assumed the overlap."""
    for overlap in (True, False):
        spec, entry = small_plan(H100_32, {"tp": 1, "pp": 4, "vpp": 2}, {"pp_comm_overlap": overlap})
        m = megatron_args(launch_config(spec, entry, "megatron").text)
        assert ("--no-overlap-p2p-communication" in m) == (not overlap)
        assert ("pp_comm_overlap" in " ".join(launch_config(spec, entry, "torchtitan").notes)) == overlap


def test_activation_offloading_reaches_megatron_and_the_others_say_they_cannot():
    """Megatron-Core's --cpu-offloading-num-layers with the stage's offloaded layers (at most all but one); its
    TransformerConfig refuses offloading with pipeline parallelism or recomputation, which the export says."""
    layers = SMALL["layers"]
    spec, entry = small_plan(H100_32, {"tp": 1, "pp": 1, "recompute": "none"},
                             {"activation_offload_layers": layers - 1})
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert m["--cpu-offloading-num-layers"] == str(layers - 1)
    assert not any("offloading" in n for n in launch_config(spec, entry, "megatron").notes)
    assert any("activation offloading" in n for n in launch_config(spec, entry, "torchtitan").notes)
    assert any("activation offloading" in n for n in launch_config(spec, entry, "deepspeed").notes)
    spec, entry = small_plan(H100_32, {"tp": 1, "pp": 2, "recompute": "full"}, {"activation_offload_layers": 20})
    notes = " ".join(launch_config(spec, entry, "megatron").notes)
    assert "PP 2, full recompute" in notes
    # 20 of the model's 30 layers asked for; a stage of 15 offloads at most 14
    assert megatron_args(launch_config(spec, entry, "megatron").text)["--cpu-offloading-num-layers"] == "14"
    spec, entry = small_plan(H100_32, {"tp": 1, "pp": 1})
    assert "--cpu-offloading-num-layers" not in megatron_args(launch_config(spec, entry, "megatron").text)


@pytest.mark.parametrize("states, remainders", [("bf16", False), ("bf16_remainder", True)])
def test_bf16_optimizer_states_become_megatrons_precision_aware_optimizer(states, remainders):
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1}, {"optimizer_states": states})
    megatron = launch_config(spec, entry, "megatron")
    m = megatron_args(megatron.text)
    assert "--use-precision-aware-optimizer" in m
    assert m["--exp-avg-dtype"] == "bf16" and m["--exp-avg-sq-dtype"] == "bf16"
    # Remainders are Megatron-Core's default; turning them off has no flag in the pinned Megatron-LM: said so.
    assert "--no-store-param-remainders" not in m
    assert ("--no-store-param-remainders" not in " ".join(megatron.notes)) == remainders
    for framework in ("torchtitan", "deepspeed"):
        assert f"optimizer_states {states}" in " ".join(launch_config(spec, entry, framework).notes)
    # Without the distributed optimizer Megatron has no precision-aware optimizer to turn on: said, not emitted.
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 0}, {"optimizer_states": states})
    megatron = launch_config(spec, entry, "megatron")
    assert "--use-precision-aware-optimizer" not in megatron_args(megatron.text)
    assert f"optimizer_states {states}" in " ".join(megatron.notes)
    spec, entry = small_plan(H100_32, {"tp": 4, "pp": 1, "zero": 1})
    assert "--use-precision-aware-optimizer" not in megatron_args(launch_config(spec, entry, "megatron").text)


def test_fp8_moe_dispatch_becomes_megatrons_ncclep_mxfp8_wire():
    """training.ep_dispatch_dtype fp8: only Megatron-Core's ncclep flex backend quantises MoE tokens before the
    all-to-all (the dispatch and the combine's gradient in MXFP8); torchtitan and DeepSpeed send 16 bits and say
    so. Without it, or in BF16 training, no dispatcher flag changes."""
    doc = {"model": MOE, "training": {"global_batch": 64, "precision": "fp8", "ep_dispatch_dtype": "fp8"},
           "cluster": H100_32, "layout": {"tp": 1, "pp": 1, "ep": 8}}
    spec = parse_spec(doc, load_catalog())
    entry = plan(spec, top=1)["plans"][0]
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert (m["--moe-token-dispatcher-type"], m["--moe-flex-dispatcher-backend"]) == ("flex", "ncclep")
    assert (m["--moe-dispatch-fwd-dtype"], m["--moe-combine-bwd-dtype"]) == ("mxfp8", "mxfp8")
    assert "--use-transformer-engine-op-fuser" in m
    for framework in ("torchtitan", "deepspeed"):
        assert "ep_dispatch_dtype fp8" in " ".join(launch_config(spec, entry, framework).notes)
    for training in ({"precision": "fp8"}, {"precision": "bf16", "ep_dispatch_dtype": "fp8"}):
        doc["training"] = {"global_batch": 64, **training}
        spec = parse_spec(doc, load_catalog())
        entry = plan(spec, top=1)["plans"][0]
        assert "--moe-dispatch-fwd-dtype" not in megatron_args(launch_config(spec, entry, "megatron").text)
        assert not any("ep_dispatch_dtype" in n for n in launch_config(spec, entry, "torchtitan").notes)


@pytest.mark.parametrize("stack, first", [("generic", "megatron"), ("megatron_core", "megatron"),
                                          ("torchtitan", "torchtitan"), ("fsdp", "megatron")])
def test_the_requests_own_stack_leads_the_exports(stack, first):
    spec, entry = small_plan(H100_32, training={"framework": stack})
    configs = launch_configs(spec, entry)
    assert list(configs)[0] == first
    assert sorted(configs) == sorted(FRAMEWORKS)


def megatron_stages(text: str, pp: int, vpp: int, layers: int) -> list[int]:
    """The layers of every virtual stage, in Megatron's order (each rank's first virtual stage, then each rank's
    second), as the Megatron export's arguments give them."""
    m = megatron_args(text)
    if "--pipeline-model-parallel-layout" in m:
        assert "--num-virtual-stages-per-pipeline-rank" not in m and "--decoder-first-pipeline-num-layers" not in m
        stages = m["--pipeline-model-parallel-layout"].split("|")
        assert len(stages) == pp * vpp and stages[0].startswith("E") and stages[-1].endswith("L")
        assert "E" not in "".join(stages[1:]) and "L" not in "".join(stages[:-1])
        return [stage.count("t") for stage in stages]
    assert int(m.get("--num-virtual-stages-per-pipeline-rank") or 1) == vpp
    first = int(m.get("--decoder-first-pipeline-num-layers") or 0)
    last = int(m.get("--decoder-last-pipeline-num-layers") or 0)
    middle = (layers - first - last) // (pp - 2) if first else layers // pp
    per_rank = [first or middle] + [middle] * (pp - 2) + [last or middle]
    assert sum(per_rank) == layers and all(n % vpp == 0 for n in per_rank)  # what Megatron-Core checks
    return [n // vpp for _ in range(vpp) for n in per_rank]


def torchtitan_stages(text: str, pp: int, vpp: int, layers: int) -> list[int]:
    """The same from the torchtitan export: its model parts, or the even split its layers_per_stage makes."""
    p = tomllib.loads(text)["parallelism"]
    if "module_fqns_per_model_part" in p:
        parts = p["module_fqns_per_model_part"]
        names = [name for part in parts for name in part]
        assert names == ["tok_embeddings"] + [f"layers.{i}" for i in range(layers)] + ["norm", "output"]
        return [sum(name.startswith("layers.") for name in part) for part in parts]
    per = p["pipeline_parallel_layers_per_stage"]
    assert p["pipeline_parallel_first_stage_less_layers"] == p["pipeline_parallel_last_stage_less_layers"] == 0
    assert per * pp * vpp == layers
    return [per] * (pp * vpp)


@pytest.mark.parametrize("layers, tp, pp, vpp, how", [
    (30, 8, 4, 1, "ends"),     # 7, 8, 8, 7: a layer fewer on the first and the last stage
    (31, 8, 4, 1, "ends"),     # 8, 8, 8, 7: the last stage alone
    (29, 4, 8, 1, "layout"),   # 3, 4, 4, 4, 4, 4, 3, 3: a middle stage too, which the end flags cannot say
    (9, 8, 2, 1, "layout"),    # 5, 4: two stages, no middle ones for the end flags
    (30, 8, 2, 2, "layout"),   # 15 a stage does not split into 2 virtual stages evenly: 8 + 7
    (30, 8, 4, 7, "layout"),   # 7 and 8 layers over 7 virtual stages: the middle stages do not divide
    (32, 8, 4, 2, "even"),     # 8 a stage, 4 a virtual stage: Megatron's and torchtitan's own split
    (29, 4, 8, 4, "layout"),   # 3-layer stages over 4 virtual stages: one empty each (Megatron allows it)
])
def test_the_exports_split_the_layers_over_the_stages_as_the_plan_costs_them(layers, tp, pp, vpp, how):
    """Megatron's and torchtitan's stages hold the layers the engine costs on each (memory.stage_split, whose first
    and last stages are end_stage_layers'); a split Megatron's end flags cannot say is a pipeline layout. The
    exports had given DeepSeek-V3's 61 layers over 16 stages 2 + 14 x 4 + 3 (Megatron) and 13 x 4 + 3 x 3
    (torchtitan), where the plan costs 3 + 13 x 4 + 3 + 3."""
    spec, entry = small_plan(H100_32, {"tp": tp, "pp": pp, "vpp": vpp}, model={"layers": layers})
    split = stage_split(layers, pp)
    assert (split[0], split[-1]) == tuple(int(x[0]) for x in end_stage_layers(layers, np.array([pp])))
    assert sum(split) == layers and max(split) == -(-layers // pp)
    costed = [n // vpp + (1 if i < n % vpp else 0) for i in range(vpp) for n in split]
    megatron = launch_config(spec, entry, "megatron").text
    assert megatron_stages(megatron, pp, vpp, layers) == costed
    torchtitan = launch_config(spec, entry, "torchtitan")
    if 0 in costed:  # torchtitan cannot build a model part of no layers (an optimizer of no parameters): said
        assert "module_fqns_per_model_part" not in tomllib.loads(torchtitan.text)["parallelism"]
        assert any(f"{costed.count(0)} of the plan's {len(costed)} virtual stages hold no layer" in n
                   for n in torchtitan.notes)
    else:
        assert torchtitan_stages(torchtitan.text, pp, vpp, layers) == costed
    m = megatron_args(megatron)
    assert ("--pipeline-model-parallel-layout" in m) == (how == "layout")
    assert ("--decoder-first-pipeline-num-layers" in m) == (how == "ends")


def test_megatron_runs_without_dropout_where_the_plan_costs_none():
    """A Llama-style model keeps no dropout masks in the plan; Megatron's default is 0.1 for both, which would keep
    them and need more memory than the plan assumed."""
    m = megatron_args(launch_config(*small_plan(H100_32, {"tp": 8, "pp": 1}), "megatron").text)
    assert (m["--attention-dropout"], m["--hidden-dropout"]) == ("0.0", "0.0")
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 1}, model={"gated_mlp": False, "ffn_hidden": 8192})
    assert spec.model.dropout
    m = megatron_args(launch_config(spec, entry, "megatron").text)
    assert "--attention-dropout" not in m and "--hidden-dropout" not in m


@pytest.mark.parametrize("dispatch, flags", [("all_to_all", ("alltoall", None)), ("dedup", ("flex", "deepep"))])
def test_megatron_dispatches_moe_tokens_as_the_plan_costs_them(dispatch, flags):
    """Megatron's token dispatcher defaults to allgather; the plan costs all-to-alls over the EP ranks (or DeepEP's
    deduplicated dispatch)."""
    doc = {"model": MOE, "training": {"global_batch": 64, "ep_dispatch": dispatch}, "cluster": H100_32,
           "layout": {"tp": 1, "pp": 1, "ep": 8}}
    spec = parse_spec(doc, load_catalog())
    m = megatron_args(launch_config(spec, plan(spec, top=1)["plans"][0], "megatron").text)
    assert (m["--moe-token-dispatcher-type"], m.get("--moe-flex-dispatcher-backend")) == flags
    spec, entry = moe_plan({"tp": 8, "pp": 1, "ep": 1})
    assert "--moe-token-dispatcher-type" not in megatron_args(launch_config(spec, entry, "megatron").text)


def test_megatron_selective_recompute_names_its_modules_and_says_what_it_keeps():
    spec, entry = small_plan(H100_32, {"tp": 8, "pp": 1, "recompute": "selective"})
    export = launch_config(spec, entry, "megatron")
    assert "  --recompute-modules core_attn layernorm\n" in export.text
    assert any("keeps more activation memory than the plan assumed" in n for n in export.notes)
    spec, entry = moe_plan({"tp": 1, "pp": 1, "ep": 8, "recompute": "selective"})
    export = launch_config(spec, entry, "megatron")
    assert "  --recompute-modules core_attn layernorm moe_act\n" in export.text


@pytest.mark.parametrize("gpu, attention, says", [
    ("H100 SXM5 80GB", "te", "slower"),     # the plan costs cuDNN attention (0.54); SDPA runs FlashAttention-2 (0.32)
    ("GB200", "te", None),                  # both 0.5 in the catalog: nothing to say
    ("A100 SXM4 80GB", "cudnn", "faster"),  # cuDNN 0.45 against FlashAttention-2's 0.55
    ("H100 SXM5 80GB", "flash", None),
    ("H100 SXM5 80GB", "triton", "faster"),
])
def test_torchtitan_speaks_of_its_attention_kernel_only_where_it_costs_otherwise(gpu, attention, says):
    cluster = {**H100_32, "gpu": gpu, "node": "GB200 NVL72 compute tray" if gpu == "GB200" else H100_32["node"]}
    if gpu.startswith("A100"):
        cluster["node"] = "DGX A100"
    notes = [n for n in launch_config(*small_plan(cluster, {"tp": 8, "pp": 1}, {"attention": attention}),
                                      "torchtitan").notes if n.startswith("attention kernel")]
    assert [n.split(", ")[-1].split(" ")[0] for n in notes] == ([says] if says else [])
