"""A real Celery worker process over a real broker (filesystem by default, Redis when CELERY_BROKER_URL says
so) takes a plan from queued to done. No eager mode."""
from __future__ import annotations

import time

import pytest
from django.utils import timezone

from webui import services
from webui.models import Plan

from .conftest import wait_for_status

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_takes_a_plan_from_queued_to_done(worker, seeded, small_spec):
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    assert plan.status == "queued"
    seen = wait_for_status(plan, ("done", "failed"))
    assert plan.status == "done", f"{plan.error}\n{worker.output()}"
    assert seen[0] == "queued" and seen[-1] == "done"
    assert plan.result["plans"][0]["step_time_s"] > 0
    assert plan.attempts == 1


def test_a_real_worker_records_a_failure_with_its_message(worker, db):
    plan = Plan.objects.create(spec={"model": {}}, spec_hash="x", dispatched_at=timezone.now())  # sent below
    from webui.tasks import plan_run_task

    plan_run_task.delay(plan.pk)
    wait_for_status(plan, ("done", "failed"))
    assert plan.status == "failed", worker.output()
    assert "model.layers: is required" in plan.error


def test_a_duplicate_spec_reuses_the_finished_result_without_a_second_search(worker, seeded, small_spec, client):
    small_spec["training"]["global_batch"] = 128  # a spec no other test in this module asks for
    first = client.post("/api/plans", small_spec, content_type="application/json").json()
    plan = Plan.objects.get(code=first["code"])
    wait_for_status(plan, ("done", "failed"))
    assert plan.status == "done", worker.output()
    received = worker.count("] received")  # not "succeeded", which Celery logs a moment after the plan is done

    second = client.post("/api/plans", small_spec, content_type="application/json")
    assert second.status_code == 201
    body = second.json()
    assert body["status"] == "done" and body["code"] != first["code"]
    assert body["reused_from"] == {"code": str(plan.code), "url": f"http://testserver/plans/{plan.code}/"}
    twin = Plan.objects.get(code=body["code"])
    assert twin.result == plan.result and twin.attempts == 0
    page = client.get(f"/plans/{twin.code}/").content.decode()
    assert 'id="reused-from"' in page and f'href="/plans/{plan.code}/"' in page
    assert client.get(f"/api/plans/{twin.code}").json()["reused_from"] == body["reused_from"]  # one shape
    time.sleep(1)
    assert worker.count("] received") == received  # no task was sent for the twin
