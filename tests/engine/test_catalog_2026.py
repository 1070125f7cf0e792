"""The 2026 catalog rows (fixtures/*.json): each with its datasheet source, accepted by parse_spec, and a small
plan on each new GPU, node and fabric finds a layout."""
from __future__ import annotations

import json

import pytest

from planner import parse_spec, plan
from planner.catalog import FIXTURES_DIR

NEW_GPUS = {"B300": 160, "GB300": 160, "H200 NVL": 132, "AMD MI300X": 304, "AMD MI325X": 304, "AMD MI355X": 256}
NEW_NODES = ("HGX B300", "GB300 NVL72 compute tray", "H200 NVL server (4-GPU NVLink bridges)",
             "AMD MI300X platform (8 GPUs)", "AMD MI325X platform (8 GPUs)", "AMD MI355X platform (8 GPUs)")
NEW_FABRICS = ("XDR InfiniBand rail-optimized (Quantum-X800)", "Ethernet RoCE 800 GbE (Spectrum-X800)")
# (GPU, node, fabric, GPUs): every new GPU with its node, each new fabric at least twice.
CASES = [("B300", "HGX B300", NEW_FABRICS[0], 16),
         ("GB300", "GB300 NVL72 compute tray", NEW_FABRICS[0], 144),
         ("H200 NVL", "H200 NVL server (4-GPU NVLink bridges)", NEW_FABRICS[1], 16),
         ("AMD MI300X", "AMD MI300X platform (8 GPUs)", NEW_FABRICS[1], 16),
         ("AMD MI325X", "AMD MI325X platform (8 GPUs)", NEW_FABRICS[1], 16),
         ("AMD MI355X", "AMD MI355X platform (8 GPUs)", NEW_FABRICS[0], 16)]
SMALL = {"name": "Llama 3 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
         "gated_mlp": True, "vocab": 128256, "seq_len": 8192}


def test_the_new_rows_are_in_the_catalog_with_a_dated_datasheet_source(catalog):
    rows = {r["fields"]["name"]: r["fields"] for f in ("gpus", "nodes", "fabrics")
            for r in json.loads((FIXTURES_DIR / f"{f}.json").read_text())}
    for name in (*NEW_GPUS, *NEW_NODES, *NEW_FABRICS):
        assert name in rows, name
        assert any(kind in rows[name]["source"] for kind in ("datasheet", "data sheet", "product brief")), name
        assert any(year in rows[name]["source"] for year in ("2023", "2024", "2025")), name
    for name, sms in NEW_GPUS.items():
        gpu = catalog["gpu"][name]
        assert gpu["sm_count"] == sms and gpu["fp8_tflops"] == pytest.approx(2 * gpu["peak_tflops"], abs=1)
    assert catalog["node"]["GB300 NVL72 compute tray"]["nvlink_domain_gpus"] == 72
    assert {catalog["fabric"][f]["link_gbits_per_s"] for f in NEW_FABRICS} == {800}


@pytest.mark.parametrize("gpu,node,fabric,gpus", CASES)
def test_a_small_plan_on_each_new_gpu_node_and_fabric_finds_a_layout(catalog, gpu, node, fabric, gpus):
    spec = parse_spec({"model": SMALL, "training": {"global_batch": 144}, "layout": {"pp": 1} if gpus < 100 else {},
                       "cluster": {"num_gpus": gpus, "gpu": gpu, "node": node, "fabric": fabric}}, catalog)
    assert spec.cluster.gpu.name == gpu and spec.cluster.node.name == node
    answer = plan(spec, top=1)
    best = answer["plans"][0]
    assert 0.05 < best["mfu"] < 0.9, best
    assert best["memory_gib"]["total"] <= spec.cluster.gpu.memory_gib
    assert best["placement"]["tp_groups_inside_nvlink_domain"]
