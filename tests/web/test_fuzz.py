"""Bad input anywhere gets an answer naming the problem, never a 500: random JSON to the API, random form posts."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from .conftest import SMALL_SPEC

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)


def leaf_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from leaf_paths(value, prefix + (key,))
    else:
        yield prefix


PATHS = list(leaf_paths(SMALL_SPEC))


@FUZZ
@given(body=json_values)
def test_any_json_body_is_a_201_or_a_400_with_field_errors(client, seeded, body):
    response = client.post("/api/plans", json.dumps(body), content_type="application/json")
    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert response.json()["errors"]


@FUZZ
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_one_bad_field_in_a_good_spec_is_named(client, seeded, path, value):
    doc = copy.deepcopy(SMALL_SPEC)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    response = client.post("/api/plans", json.dumps(doc), content_type="application/json")
    assert response.status_code in (201, 400), response.content


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["num_gpus", "model_preset", "gpu", "model__layers", "layout__tp",
                                               "training__tokens", "fabric", "fabric__latency_us", "layout__zero"]),
                              st.text(max_size=12), max_size=6))
def test_any_form_post_is_answered_with_the_form_or_a_plan(client, seeded, fields):
    from .test_forms import post_data
    from webui import services

    response = client.post("/", post_data(services.catalog_as_dict(), **fields))
    assert response.status_code in (200, 302)
