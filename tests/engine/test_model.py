"""Model arithmetic against hand-computed values, an independent layer-by-layer count and published figures."""
from __future__ import annotations

import json
import math

import pytest

from planner import parse_spec
from planner.model import flops_per_token, hardware_flops_per_step, model_flops_per_step, param_count, param_tensors

from .conftest import DATA


def model_spec(catalog, preset: str | None = None, **fields):
    model = dict(catalog["model"][preset]) if preset else {}
    model.update(fields)
    doc = {"model": model, "training": {"global_batch": 8},
           "cluster": {"num_gpus": 8, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
    return parse_spec(doc, catalog).model


@pytest.mark.parametrize("name", ["GPT-3 175B", "Llama 3 8B", "Llama 3 70B", "Llama 3.1 405B", "Nemotron-4 340B",
                                  "Mixtral 8x7B", "Megatron GPT 1T (SC21)"])
def test_closed_form_matches_the_tensor_walk(catalog, name):
    m = model_spec(catalog, name)
    walked = sum(math.prod(shape) for _, shape in param_tensors(m))
    assert param_count(m).total == walked


def test_moe_tensor_walk_on_a_small_deepseek_like_model(catalog):
    m = model_spec(catalog, "DeepSeek-V3 671B (MLA approximated as MHA)", layers=5, dense_layers=2, experts=16)
    walked = sum(math.prod(shape) for _, shape in param_tensors(m))
    assert param_count(m).total == walked


@pytest.mark.parametrize("name, total_b, active_b", [
    ("GPT-3 175B", 174.6, 174.6),          # Brown et al. 2020: 175B
    ("Llama 3 8B", 8.03, 8.03),            # Llama 3 paper: 8B
    ("Llama 3 70B", 70.55, 70.55),         # 70B
    ("Llama 3.1 405B", 405.85, 405.85),    # 405B
    ("Mixtral 8x7B", 46.70, 12.88),        # Mixtral paper: 46.7B total, 12.9B active
    ("DeepSeek-V3 671B (MLA approximated as MHA)", 672.15, 38.68),  # report: 671B / 37B (MLA is a bit smaller)
])
def test_parameter_counts_match_published_sizes(catalog, name, total_b, active_b):
    pc = param_count(model_spec(catalog, name))
    assert pc.total / 1e9 == pytest.approx(total_b, abs=0.05)
    assert pc.active / 1e9 == pytest.approx(active_b, abs=0.05)


def test_gpt_closed_form_is_megatron_eq2(catalog):
    # Narayanan et al. 2021, Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), tied embeddings.
    m = model_spec(catalog, "GPT-3 175B")
    l, h, V, s = 96, 12288, 51200, 2048
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert param_count(m).total == pytest.approx(eq2, rel=1e-6)


def test_hardware_flops_match_eq3_for_every_sc21_row(catalog):
    runs = json.loads((DATA / "published_runs.json").read_text())["cases"]
    for run in (r for r in runs if r["group"].startswith("A_sc21")):
        m = model_spec(catalog, None, name=run["model"], layers=run["layers"], hidden=run["hidden"],
                       heads=run["heads"], vocab=run["vocab"], seq_len=run["seq_len"], tied_embeddings=True)
        f = hardware_flops_per_step(m, run["global_batch"], "full")
        assert f == pytest.approx(run["derived"]["derived_flops_per_iter_eq3"], rel=1e-9), run["id"]


def test_model_flops_are_three_quarters_of_full_recompute_flops(catalog):
    m = model_spec(catalog, "GPT-3 175B")
    fpt = flops_per_token(m)
    # 24 h^2 per token-layer of matmuls, 4 s h of attention, 2 h V of logits (Korthikanti et al. 2022, eq. 7).
    assert fpt.gemm_per_layer == 24 * 12288 ** 2
    assert fpt.attention_per_layer == 4 * 2048 * 12288
    assert fpt.logits == 2 * 12288 * 51200
    model = model_flops_per_step(m, 1536)
    full = hardware_flops_per_step(m, 1536, "full")
    logits = 3 * fpt.logits * 1536 * 2048
    assert (full - logits) / (model - logits) == pytest.approx(4 / 3)


def test_gqa_and_gated_mlp_flops(catalog):
    m = model_spec(catalog, "Llama 3 70B")
    h, kvd, f = 8192, 8 * 128, 28672
    assert flops_per_token(m).gemm_per_layer == 2 * (2 * h * h + 2 * h * kvd) + 2 * 3 * h * f


def test_moe_flops_count_only_the_active_experts(catalog):
    m = model_spec(catalog, "Mixtral 8x7B")
    h, f = 4096, 14336
    proj = 2 * (2 * h * h + 2 * h * 1024)
    assert flops_per_token(m).gemm_per_layer == proj + 2 * 3 * h * f * 2 + 2 * h * 8
