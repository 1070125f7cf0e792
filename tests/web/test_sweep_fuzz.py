"""Bad sweeps and compare requests get an answer naming the problem, never a 500."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from planner.whatif.sweep import axis_paths

from .test_fuzz import FUZZ, json_values, post_json_errors

pytestmark = pytest.mark.django_db

BASE = {"model": "Llama 3 8B", "training": {"global_batch": 256},
        "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
paths = st.sampled_from(axis_paths()) | st.text(max_size=20)
axis_values = st.lists(json_values | st.sampled_from([8, 64, 128, "bf16", "fp8", "B200", "Llama 3 8B"]),
                       max_size=3)


@FUZZ
@given(body=json_values)
def test_any_json_body_to_the_sweep_api_is_a_201_or_a_400_with_field_errors(client, seeded, body):
    post_json_errors(client, "/api/sweeps", body)


@FUZZ
@given(vary=st.dictionaries(paths, axis_values, max_size=3), goal=st.none() | json_values)
def test_any_axes_and_goal_over_a_good_base_are_a_201_or_name_the_axis(client, seeded, vary, goal):
    body = {"base": BASE, "vary": vary, **({"goal": goal} if goal is not None else {})}
    errors = post_json_errors(client, "/api/sweeps", body)
    assert all(f == "vary" or f.startswith(("vary.", "goal", "base.")) for f in errors), errors


@FUZZ
@given(query=st.text(max_size=120))
def test_any_compare_query_is_a_page_not_a_500(client, seeded, query):
    response = client.get("/compare/", {"plans": query})
    assert response.status_code in (400, 404), response.content[:300]
    assert b"plans: " in response.content
