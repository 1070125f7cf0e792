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


def assert_names_fields(response) -> dict[str, list[str]]:
    """A 4xx answer is {"errors": {field: [message, ...]}}: every entry names a field and says something."""
    errors = response.json()["errors"]
    assert errors and isinstance(errors, dict), errors
    for field, messages in errors.items():
        assert isinstance(field, str) and field.strip(), errors
        assert messages and all(isinstance(m, str) and m.strip() for m in messages), errors
    return errors


def post_json_errors(client, url: str, body) -> dict[str, list[str]]:
    """POST `body` as JSON: a 201 (no errors, {}) or a 400 whose every error names a field; anything else fails."""
    response = client.post(url, json.dumps(body), content_type="application/json")
    assert response.status_code in (201, 400), response.content
    return assert_names_fields(response) if response.status_code == 400 else {}


@FUZZ
@given(body=json_values)
def test_any_json_body_is_a_201_or_a_400_with_field_errors(client, seeded, body):
    post_json_errors(client, "/api/plans", body)


@FUZZ
@given(body=st.binary(max_size=200),
       content_type=st.sampled_from(["application/json", "application/json; charset=latin-1", "text/plain",
                                     "application/x-www-form-urlencoded", ""]))
def test_any_bytes_with_any_content_type_get_an_answer_naming_the_field(client, seeded, body, content_type):
    response = client.generic("POST", "/api/plans", body, content_type=content_type)  # the bytes as they are
    assert response.status_code in (201, 400, 415), response.content
    if response.status_code != 201:
        assert_names_fields(response)


@FUZZ
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_one_bad_field_in_a_good_spec_is_named(client, seeded, path, value):
    doc = copy.deepcopy(SMALL_SPEC)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = post_json_errors(client, "/api/plans", doc)
    if errors:
        # The field that was changed is named, or the section it sits in when the section's rules say more.
        dotted = ".".join(path)
        assert any(dotted.startswith(f) or f.startswith(dotted) or f.split(".")[0] == path[0] for f in errors), errors


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["num_gpus", "model_preset", "gpu", "model__layers", "layout__tp",
                                               "training__tokens", "fabric", "fabric__latency_us", "layout__zero"]),
                              st.text(max_size=12), max_size=6))
def test_any_form_post_is_answered_with_the_form_or_a_plan(client, seeded, fields):
    from .test_forms import post_data
    from webui import services

    response = client.post("/", post_data(services.catalog_as_dict(), **fields))
    assert response.status_code in (200, 302)
    if response.status_code == 200:  # the form again: each message beside the field it is about
        form = response.context["form"]
        assert form.errors and all(form.errors.values())
        page = response.content.decode()
        for name in form.errors:
            assert name == "__all__" or f'data-field="{name}"' in page, name
