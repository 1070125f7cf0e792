"""Shared fixtures for engine tests: no database, no Django."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from planner.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"            # copies of the spec's examples (examples/README.md)
DATA = ROOT / "planner" / "data"        # reference data with its provenance (planner/data/README.md)

GPT3_1024 = {
    "model": {"name": "GPT-3 175B", "layers": 96, "hidden": 12288, "heads": 96, "vocab": 51200, "seq_len": 2048},
    "training": {"global_batch": 1536, "precision": "bf16"},
    "cluster": {
        "num_gpus": 1024,
        "gpu": {"name": "A100 SXM4 80GB", "peak_tflops": 312, "memory_gib": 80, "memory_gbytes_per_s": 2039},
        "node": {"name": "DGX A100", "gpus": 8, "nvlink_domain_gpus": 8, "nvlink_gbytes_per_s": 600,
                 "nics": 8, "nic_gbits_per_s": 200},
        "fabric": {"name": "HDR InfiniBand", "topology": "rail_optimized", "latency_us": 1.0, "oversubscription": 1.0},
    },
}


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture
def gpt3_doc():
    """A fresh, mutable copy of the GPT-3 175B on 1,024 A100s spec document."""
    return copy.deepcopy(GPT3_1024)


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text())
