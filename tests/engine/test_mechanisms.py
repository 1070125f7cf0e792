"""The step-time mechanisms that published runs on newer stacks need, each with real values."""
from __future__ import annotations

import pytest

from planner import parse_spec
from planner.report import plan


def llama_8b_fsdp(catalog, gpus: int, **training) -> dict:
    return {"model": dict(catalog["model"]["Llama 3 8B"], seq_len=8192),
            "training": {"global_batch": gpus, "precision": "bf16", **training},
            "cluster": {"num_gpus": gpus, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                        "fabric": "NDR InfiniBand fat tree"},
            "layout": {"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "micro_batch": 1, "zero": 3, "recompute": "full"}}


def best(doc, catalog) -> dict:
    return plan(parse_spec(doc, catalog), top=1)["plans"][0]


def test_fsdp_gathers_every_layer_and_pays_each_ones_latency(catalog):
    p = best(llama_8b_fsdp(catalog, 64), catalog)
    gathers = [c for c in p["comm"] if c["group"] == "dp" and c["collective"] == "all_gather"]
    # 32 layers, gathered before the forward and again before the backward of the one micro-batch.
    assert sum(c["calls_per_step"] for c in gathers) == 64
    assert p["time_s"]["dp_comm"] > 0


def test_fsdp_exposure_grows_with_ranks_at_a_fixed_per_gpu_batch(catalog):
    small, large = (best(llama_8b_fsdp(catalog, n), catalog)["time_s"]["dp_comm"] for n in (16, 1024))
    assert large > small


def test_tp_comm_overlap_hides_most_tensor_parallel_traffic(catalog, gpt3_doc):
    gpt3_doc["layout"] = {"tp": 8, "pp": 16, "dp": 8, "micro_batch": 1, "vpp": 1, "sequence_parallel": True,
                          "recompute": "full", "zero": 1}
    sync = best(gpt3_doc, catalog)["time_s"]["tp_comm"]
    gpt3_doc["training"]["tp_comm_overlap"] = True
    overlapped = best(gpt3_doc, catalog)["time_s"]["tp_comm"]
    assert 0 < overlapped < 0.5 * sync


def test_fp8_gains_far_less_than_twice_end_to_end(catalog):
    bf16 = best(llama_8b_fsdp(catalog, 8), catalog)["step_time_s"]
    fp8 = best(llama_8b_fsdp(catalog, 8, precision="fp8"), catalog)["step_time_s"]
    assert 1.1 < bf16 / fp8 < 1.6


def test_hidden_communication_still_costs_its_interference():
    import numpy as np

    from planner import constants as C
    from planner.steptime import _exposed
    assert float(_exposed(np.array(1.0), np.array(10.0))) == pytest.approx(C.COMM_INTERFERENCE)
    assert float(_exposed(np.array(3.0), np.array(1.0))) == pytest.approx(2.0 + C.COMM_INTERFERENCE)


def test_gpu_constants_come_from_the_catalog_and_a_custom_gpu_may_set_them(catalog, gpt3_doc):
    spec = parse_spec(gpt3_doc, catalog)  # inline A100 80GB: the catalog row fills what it leaves out
    assert spec.cluster.gpu.gemm_efficiency == pytest.approx(0.869)
    gpt3_doc["cluster"]["gpu"] = {"name": "my accelerator", "peak_tflops": 500, "memory_gib": 96,
                                  "memory_gbytes_per_s": 3000, "gemm_efficiency": 0.6, "sustained_clock": 0.9}
    gpu = parse_spec(gpt3_doc, catalog).cluster.gpu
    assert (gpu.gemm_efficiency, gpu.sustained_clock, gpu.hbm_efficiency) == (0.6, 0.9, 0.85)
    gpt3_doc["cluster"]["gpu"]["gemm_efficiency"] = 1.5
    with pytest.raises(Exception, match="cluster.gpu.gemm_efficiency"):
        parse_spec(gpt3_doc, catalog)


def test_deduplicating_dispatch_sends_a_token_once_per_remote_domain():
    from planner.steptime import dedup_ratio
    # Top-8 over 2 domains: ~1 remote copy instead of 4 (DeepSeek-V3 report, sec. 3.2.2); one expert: no gain.
    assert dedup_ratio(2, 8) == pytest.approx((1 - 0.5 ** 8) * 2 / 8)
    assert dedup_ratio(4, 1) == pytest.approx(1.0)


def test_eager_elementwise_streams_more_bytes_than_fused(catalog):
    import numpy as np

    from planner.compute import Shard, elementwise_bytes
    spec = parse_spec(llama_8b_fsdp(catalog, 8), catalog)
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    fused = elementwise_bytes(spec.model, spec.training, shard)[0]
    eager = elementwise_bytes(spec.model, parse_spec(llama_8b_fsdp(catalog, 8, elementwise="eager"),
                                                     catalog).training, shard)[0]
    h, kvd, f = 4096, 1024, 14336
    # RMSNorm 36 bytes instead of 4 (twice), rotary 20 instead of 4, SwiGLU 10 instead of 6 per element.
    assert eager - fused == pytest.approx(2 * 32 * h + 16 * (h + kvd) + 4 * f)


def test_fp8_parameter_gathers_move_half_the_bytes(catalog):
    def gathered(**training):
        p = best(llama_8b_fsdp(catalog, 64, precision="fp8", **training), catalog)
        return sum(c["bytes_per_step"] for c in p["comm"] if c["collective"] == "all_gather")
    assert gathered(fp8_param_gather=True) == pytest.approx(gathered() / 2)


def test_every_fsdp_unit_costs_host_time_per_pass(catalog):
    from planner import constants as C
    p = best(llama_8b_fsdp(catalog, 8), catalog)
    # 32 layers, forward and backward pass, one micro-batch: 64 units' host time at least, on top of the gathers.
    assert p["time_s"]["dp_comm"] >= 64 * C.ZERO3_UNIT_OVERHEAD_S


def test_rowwise_fp8_casts_every_input_again_along_the_other_axis(catalog):
    import numpy as np

    from planner import constants as C
    from planner.compute import Shard, elementwise_bytes
    shard = Shard(*(np.array([v]) for v in (1, 1, 1, 1, False)))
    spec = lambda **t: parse_spec(llama_8b_fsdp(catalog, 8, precision="fp8", **t), catalog)  # noqa: E731
    tensorwise, rowwise = (elementwise_bytes(s.model, s.training, shard)[0]
                           for s in (spec(), spec(fp8_recipe="rowwise")))
    h, f = 4096, 14336
    assert rowwise - tensorwise == pytest.approx(C.FP8_ROWWISE_EXTRA_BYTES * (3 * h + f))


def test_zero2_reduce_scatters_every_micro_batch_and_zero1_once_a_step(catalog):
    def reductions(zero: int) -> float:
        doc = llama_8b_fsdp(catalog, 64)
        doc["training"]["global_batch"] = 4 * 64  # four micro-batches of one sequence per rank
        doc["layout"].update(zero=zero)
        comm = best(doc, catalog)["comm"]
        return sum(c["calls_per_step"] for c in comm if c["group"] == "dp" and c["collective"] == "reduce_scatter")
    assert reductions(1) == 1
    assert reductions(2) == 4
