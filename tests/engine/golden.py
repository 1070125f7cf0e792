"""The golden answers: plan() on a fixed set of varied specs, at full precision, for tests/engine/test_golden.py.

They pin the engine's numbers so that refactors (vectorising, caching) cannot change them. Regenerate only when
a change of the numbers is intended, and say so in the commit:

    .venv/bin/python -m tests.engine.golden

which rewrites tests/engine/data/golden_plans.json.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from planner import parse_spec, report
from planner.catalog import load_catalog
from planner.search import search

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "engine" / "data" / "golden_plans.json"
HEADER = ("plan() answers at full precision (planner.report._r disabled) for the specs below, with a sample of the "
          "ranked step times. Regenerate only for an intended change of the numbers: "
          ".venv/bin/python -m tests.engine.golden")
TOP = 5            # ranked plans kept in full per case
CHART_POINTS = 40  # chart candidates kept per case
STEP_SAMPLES = 41  # evenly spaced ranks of the whole feasible set


def _catalog_spec(model: str, gpu: str, node: str, fabric: str, gpus: int, training: dict,
                  model_changes: dict | None = None, layout: dict | None = None) -> dict:
    cat = load_catalog()
    doc = {"model": {**cat["model"][model], **(model_changes or {})}, "training": training,
           "cluster": {"num_gpus": gpus, "gpu": gpu, "node": node, "fabric": fabric}}
    if layout:
        doc["layout"] = layout
    return doc


def cases() -> dict[str, dict]:
    """Spec documents by case name: the examples, dense and MoE at scale, other fabrics, CP and ZeRO-3."""
    docs = {f"example:{p.stem}": json.loads(p.read_text()) for p in sorted((ROOT / "examples").glob("*.json"))}
    docs["405b-h100-2048-rail"] = _catalog_spec(
        "Llama 3.1 405B", "H100 SXM5 80GB", "DGX H100", "NDR InfiniBand rail-optimized (DGX SuperPOD)", 2048,
        {"global_batch": 2048, "precision": "bf16"})
    docs["moe-671b-h800-1024-fp8"] = _catalog_spec(
        "DeepSeek-V3 671B (MLA approximated as MHA)", "H800 SXM5 80GB", "HGX H800",
        "NDR InfiniBand rail-optimized (DGX SuperPOD)", 1024, {"global_batch": 1920, "precision": "fp8"},
        layout={"micro_batch": 1})
    docs["70b-h100-1024-dragonfly"] = _catalog_spec(
        "Llama 3 70B", "H100 SXM5 80GB", "DGX H100", "Dragonfly 400 Gb/s (Slingshot-style)", 1024,
        {"global_batch": 1024, "precision": "bf16"})
    docs["70b-h100-512-torus"] = _catalog_spec(
        "Llama 3 70B", "H100 SXM5 80GB", "DGX H100", "3D torus 400 Gb/s", 512,
        {"global_batch": 512, "precision": "bf16"})
    docs["8b-h100-256-roce-cp"] = _catalog_spec(
        "Llama 3 8B", "H100 SXM5 80GB", "DGX H100", "RoCEv2 400 GbE (Llama 3 style)", 256,
        {"global_batch": 64, "precision": "bf16"}, model_changes={"seq_len": 131072})
    docs["70b-a100-256-zero3-unfused"] = _catalog_spec(
        "Llama 3 70B", "A100 SXM4 80GB", "DGX A100", "HDR InfiniBand fat tree", 256,
        {"global_batch": 256, "precision": "bf16", "attention": "unfused", "overlap_grad_reduce": False},
        layout={"zero": 3})
    docs["mixtral-h100-128-ethernet"] = _catalog_spec(
        "Mixtral 8x7B", "H100 SXM5 80GB", "DGX H100", "Ethernet 100 GbE TCP", 128,
        {"global_batch": 256, "precision": "bf16"})
    docs["70b-h100-1024-oversubscribed-cp-zero0"] = _catalog_spec(
        "Llama 3 70B", "H100 SXM5 80GB", "DGX H100", "NDR InfiniBand fat tree 2:1 oversubscribed", 1024,
        {"global_batch": 1024, "precision": "bf16"}, layout={"cp": 2, "zero": 0})
    pins = {"pins-breaking-inner-checks": {"vpp": 2, "micro_batch": 4, "ep": 2}, "pin-sp": {"sequence_parallel": True}}
    for name, layout in pins.items():
        docs[f"mixtral-h100-256-{name}"] = _catalog_spec(
            "Mixtral 8x7B", "H100 SXM5 80GB", "DGX H100", "NDR InfiniBand fat tree", 256,
            {"global_batch": 512, "precision": "bf16", "attention": "unfused"}, layout=layout)
    return docs


def answer(doc: dict) -> dict[str, Any]:
    """plan() at full precision, trimmed to what the cost model decides, plus a sample of all ranked steps."""
    spec = parse_spec(copy.deepcopy(doc), load_catalog())
    rounding = report._r
    report._r = float  # the numbers at full precision, not the 6 digits the page shows
    try:
        out = report.plan(spec, top=TOP)
    finally:
        report._r = rounding
    # Not the cost model's: the run's timing and provenance, and the accuracy statement read from the validation
    # snapshot (planner/data/validation.json, which moves whenever the engine's fingerprint does).
    for key in ("elapsed_s", "engine", "spec", "accuracy"):
        out.pop(key, None)
    out["candidates"] = out["candidates"][:CHART_POINTS]
    if out["placement_map"]:
        out["placement_map"]["cells"] = out["placement_map"]["cells"][:16]
    ev = search(spec)[0]
    ranks = np.unique(np.linspace(0, len(ev.step) - 1, STEP_SAMPLES).astype(int)) if len(ev.step) else []
    out["ranked_steps"] = {str(int(i)): float(ev.step[i]) for i in ranks}
    out["step_sum"] = float(ev.step.sum())
    return out


def main() -> None:
    data = {"header": HEADER, "cases": {name: {"spec": doc, "answer": answer(doc)} for name, doc in cases().items()}}
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1e3:.0f} kB, {len(data['cases'])} cases)")


if __name__ == "__main__":
    main()
