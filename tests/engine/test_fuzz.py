"""Property-based checks of the engine's boundary: any JSON gives a spec or a SpecError naming a field, and any
valid spec gives a finite, JSON-native answer (hypothesis)."""
from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import SpecError, parse_spec, plan
from planner.spec import SECTIONS

from .conftest import GPT3_1024

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12)

KNOWN_FIELDS = {f"{section}.{f.name}" for section, fields in SECTIONS.items() for f in fields}


@settings(max_examples=300, deadline=None)
@given(doc=json_values)
def test_any_json_is_a_spec_or_a_field_named_error(doc):
    try:
        parse_spec(doc)
    except SpecError as exc:
        assert exc.errors and all(e.field and e.message for e in exc.errors)


def mutate(base: dict, section: str, key: str, value) -> dict:
    doc = json.loads(json.dumps(base))
    target = doc
    for part in section.split("."):
        target = target.setdefault(part, {})
    target[key] = value
    return doc


field_edits = st.sampled_from(sorted(KNOWN_FIELDS)).flatmap(
    lambda path: st.tuples(st.just(path), json_values | st.integers(0, 5000)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(field_edits, max_size=3))
def test_any_field_edit_of_a_good_spec_is_handled(edits):
    doc = GPT3_1024
    for path, value in edits:
        section, key = path.rsplit(".", 1)
        doc = mutate(doc, section, key, value)
    try:
        spec = parse_spec(doc)
    except SpecError as exc:
        assert all(e.field.split(".")[0] in ("model", "training", "cluster", "layout", "spec") for e in exc.errors)
        return
    answer = plan(spec, top=2)
    assert json.loads(json.dumps(answer)) == answer
    for p in answer["plans"]:
        assert math.isfinite(p["step_time_s"]) and p["step_time_s"] > 0
        assert abs(sum(p["time_s"].values()) - p["step_time_s"]) <= 1e-3 * p["step_time_s"]


small_models = st.fixed_dictionaries({
    "layers": st.integers(1, 16), "hidden": st.sampled_from([1, 2, 8, 64, 256]), "heads": st.sampled_from([1, 2, 8]),
    "vocab": st.integers(1, 5000), "seq_len": st.integers(1, 4096), "gated_mlp": st.booleans(),
    "experts": st.sampled_from([1, 2, 4]),
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(model=small_models, gpus=st.sampled_from([1, 2, 4, 8, 16, 64]), batch=st.integers(1, 64),
       node=st.sampled_from(["DGX H100", "GB200 NVL72 compute tray", "DGX-2 (V100)",
                             "H200 NVL server (4-GPU NVLink bridges)", "8x GPU PCIe 5.0 server (no NVLink)"]),
       fabric=st.sampled_from(["NDR InfiniBand fat tree", "NDR InfiniBand rail-optimized (DGX SuperPOD)",
                               "Dragonfly 400 Gb/s (Slingshot-style)", "3D torus 400 Gb/s",
                               "RoCEv2 400 GbE (Llama 3 style)"]))
def test_odd_but_valid_specs_give_finite_answers(catalog, model, gpus, batch, node, fabric):
    doc = {"model": {**model, "top_k": 1}, "training": {"global_batch": batch},
           "cluster": {"num_gpus": gpus, "gpu": "H100 SXM5 80GB", "node": node, "fabric": fabric}}
    try:
        spec = parse_spec(doc, catalog)
    except SpecError:
        return
    answer = plan(spec, top=3)
    assert answer["searched"] >= answer["feasible"]
    for p in answer["plans"]:
        assert math.isfinite(p["step_time_s"]) and p["step_time_s"] > 0
        assert all(math.isfinite(v) and v >= 0 for v in p["time_s"].values())
        assert p["memory_gib"]["total"] <= p["memory_gib"]["capacity"]
