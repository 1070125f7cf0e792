"""Plan lifecycle services: create, run (with the real engine), fail cleanly, retry; settings from the env."""
from __future__ import annotations

import json
import math

import pytest

from webui import services
from webui.models import Plan

from .conftest import settings_in

pytestmark = pytest.mark.django_db


def test_the_spec_hash_is_the_same_for_a_catalog_name_and_its_values(seeded, small_spec):
    by_name = services.spec_parse(data=small_spec).to_dict()
    small_spec["cluster"]["gpu"] = services.catalog_as_dict()["gpu"]["H100 SXM5 80GB"]
    inline = services.spec_parse(data=small_spec).to_dict()
    assert services.spec_hash(by_name) == services.spec_hash(inline)
    small_spec["training"]["global_batch"] = 512
    assert services.spec_hash(services.spec_parse(data=small_spec).to_dict()) != services.spec_hash(by_name)


def test_a_created_plan_is_queued_with_the_canonical_spec(seeded, small_spec, django_capture_on_commit_callbacks):
    spec = services.spec_parse(data=small_spec)
    with django_capture_on_commit_callbacks() as callbacks:
        plan = services.plan_create(spec=spec, top=3)
    assert (plan.status, plan.top, plan.result) == ("queued", 3, None)
    assert plan.spec == json.loads(json.dumps(spec.to_dict()))
    assert services.spec_parse(data=plan.spec).to_dict() == plan.spec  # round-trips
    assert len(callbacks) == 1


def test_running_a_plan_records_the_engines_answer(seeded, small_spec):
    plan = services.plan_create(spec=services.spec_parse(data=small_spec), top=3)
    plan = services.plan_run(plan_id=plan.pk)
    assert plan.status == "done", plan.error
    assert plan.started_at <= plan.finished_at and plan.attempts == 1
    result = plan.result
    assert 1 <= len(result["plans"]) <= 3 and result["searched"] >= result["feasible"] >= 1
    best = result["plans"][0]
    assert best["step_time_s"] > 0 and 0 < best["mfu"] < 1
    assert math.isclose(sum(best["time_s"].values()), best["step_time_s"], rel_tol=1e-6)
    assert best["time_to_train_s"] == pytest.approx(1e12 / best["tokens_per_s"], rel=1e-3)


def test_a_finished_plan_never_changes(seeded, small_spec):
    plan = services.plan_run(plan_id=services.plan_create(spec=services.spec_parse(data=small_spec)).pk)
    before = (plan.status, plan.result, plan.finished_at, plan.attempts)
    again = services.plan_run(plan_id=plan.pk)  # a redelivered message, say
    assert (again.status, again.result, again.finished_at, again.attempts) == before


def test_a_spec_the_engine_no_longer_accepts_fails_with_a_message(db):
    plan = Plan.objects.create(spec={"model": {"layers": "many"}}, spec_hash="x")
    plan = services.plan_run(plan_id=plan.pk)
    assert plan.status == "failed"
    assert plan.error.startswith("The saved spec is not valid for this engine version")
    assert "model.layers: must be a number" in plan.error


def test_running_a_plan_that_does_not_exist_is_harmless(db):
    assert services.plan_run(plan_id=987654) is None


def test_answers_are_stored_as_plain_json():
    assert services._json_native({"a": float("nan"), "b": [1, float("inf")], 3: (True, None)}) == {
        "a": None, "b": [1, None], "3": [True, None]}
    with pytest.raises(TypeError):
        services._json_native({"a": object()})


def test_settings_default_to_sqlite_and_the_filesystem_broker_without_debug():
    assert settings_in({}, "s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, s.DEBUG") == \
        "('django.db.backends.sqlite3', 'filesystem://localhost//', False)"


def test_settings_switch_to_postgres_and_redis_from_the_environment():
    env = {"DATABASE_URL": "postgres://u:p@db:5432/plans", "CELERY_BROKER_URL": "redis://cache:6379/0",
           "DEBUG": "1"}
    assert settings_in(env, "s.DATABASES['default']['ENGINE'], s.DATABASES['default']['NAME'], "
                            "s.CELERY_BROKER_URL, s.DEBUG") == \
        "('django.db.backends.postgresql', 'plans', 'redis://cache:6379/0', True)"
