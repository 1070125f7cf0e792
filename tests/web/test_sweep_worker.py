"""Sweeps on real workers (tests/web/procs.py): gunicorn takes the sweep over HTTP, `celery worker` processes
search its scenarios over a filesystem broker folder and over a private redis-server, and a worker killed
mid-sweep loses nothing: each scenario is an ordinary plan, with its lease and the outbox behind it.
"""
from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from webui.models import Plan, Sweep

from .conftest import SMALL_SPEC, wait_for_status
from .procs import WebServer, WorkerProcess
from .test_faults import BIG_SPEC, broker_env, outputs, redis, spawn  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def sweep_plans(code: str) -> list[Plan]:
    return list(Plan.objects.filter(sweep_scenarios__sweep__code=code).order_by("sweep_scenarios__position"))


def wait_for_sweep(web: WebServer, code: str, timeout: float = 120, *workers: WorkerProcess) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = web.get_json(f"/api/sweeps/{code}")
        assert status == 200, body
        if body["status"] == "done":
            return body
        time.sleep(0.2)
    # Where each scenario's plan stands, and what the workers said: enough to tell a lost message from a stuck
    # search or a lease never recovered.
    states = "\n".join(f"  plan {p.pk}: {p.status}, attempts {p.attempts}, dispatched {p.dispatched_at}, lease until "
                       f"{p.lease_expires_at}, error {p.error!r}" for p in sweep_plans(code))
    raise AssertionError(f"the sweep did not finish in {timeout} s: {body['done']} of {body['total']}\n{states}\n"
                         f"{outputs(*workers)}")


def test_two_real_workers_share_a_sweep_and_finish_it(seeded, broker_env, spawn):
    web = spawn(WebServer(broker_env))
    workers = [spawn(WorkerProcess(broker_env, name=f"w{i}")) for i in (1, 2)]
    base = copy.deepcopy(SMALL_SPEC)
    sweep = {"base": base, "vary": {"cluster.num_gpus": [64, 128, 256],
                                    "cluster.fabric": ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"]},
             "goal": {"tokens": 1e12, "deadline_days": 30}}
    status, created = web.post_json("/api/sweeps", sweep)
    assert status == 201 and created["total"] == 6, created
    body = wait_for_sweep(web, created["code"], 120, *workers)
    assert (body["done"], body["total"]) == (6, 6), outputs(*workers)
    assert all(row["status"] == "done" and row["step_time_s"] > 0 and row["time_to_train_days"] > 0
               for row in body["scenarios"]), body["scenarios"]
    assert body["best"] is not None and body["best"]["meets_goal"] is True
    plans = sweep_plans(created["code"])
    assert len(plans) == 6 and all(p.attempts == 1 and p.reused_from is None for p in plans)
    # Six searches between them; the outbox may send a long-queued plan twice, and that delivery does nothing.
    searches = [w.count("succeeded in") - w.count("this delivery has nothing to do") for w in workers]
    assert sum(searches) == 6, outputs(*workers)


def test_a_worker_killed_mid_sweep_loses_nothing(seeded, broker_env, spawn):
    web = spawn(WebServer(broker_env))
    first = spawn(WorkerProcess(broker_env, name="first"))
    # The longest searches the spec allows (about 0.5-0.8 s each), so that the kill lands mid-search.
    sweep = {"base": BIG_SPEC, "vary": {"training.global_batch": [16_777_216, 8_388_608, 4_194_304]}}
    status, created = web.post_json("/api/sweeps", sweep)
    assert status == 201, created
    plans = sweep_plans(created["code"])
    wait_for_status(plans[0], ("running", "done", "failed"), timeout=60, every=0.01)
    first.kill()  # SIGKILL to the worker and its pool: nothing acknowledges, nothing cleans up
    for plan in plans:
        plan.refresh_from_db()
    killed = [p for p in plans if p.status == "running"]
    assert len(killed) == 1 and killed[0].result is None, f"the kill must land mid-search\n{outputs(first)}"

    second = spawn(WorkerProcess(broker_env, name="second"))
    body = wait_for_sweep(web, created["code"], 120, second)
    assert all(row["status"] == "done" and row["step_time_s"] > 0 for row in body["scenarios"]), outputs(second)
    killed[0].refresh_from_db()
    assert killed[0].attempts == 2  # the killed search, then exactly one more
    assert Plan.objects.count() == 3 and Sweep.objects.count() == 1
    assert all(p.attempts <= 2 for p in sweep_plans(created["code"]))


def test_a_plan_asked_for_after_a_big_sweep_does_not_wait_behind_all_its_scenarios(seeded, broker_env, spawn):
    # Scenarios wait in a queue of their own, which a worker takes from in turn with the queue of plans asked for
    # one by one (settings.CELERY_TASK_QUEUES): on one queue, the plan waited behind every scenario (a 1,024-
    # scenario sweep held one for four minutes).
    web = spawn(WebServer(broker_env))
    base = copy.deepcopy(SMALL_SPEC)
    status, created = web.post_json("/api/sweeps", {"base": base, "vary": {
        "cluster.num_gpus": [64, 128, 256, 512], "training.global_batch": [512, 1024, 2048, 4096]}})
    assert status == 201 and created["total"] == 16, created
    single = copy.deepcopy(SMALL_SPEC) | {"training": {**SMALL_SPEC["training"], "global_batch": 768}}
    status, body = web.post_json("/api/plans", single)
    assert status == 201, body
    assert web.get_json(f"/api/plans/{body['code']}")[1]["queue_position"] == 0  # no plan of its queue before it
    worker = spawn(WorkerProcess(broker_env))  # one search at a time, started with all 17 queued
    plan = Plan.objects.get(code=body["code"])
    wait_for_status(plan, ("done",), timeout=120)
    plan.refresh_from_db()
    scenarios_first = Plan.objects.filter(sweep_scenarios__sweep__code=created["code"], status="done",
                                          finished_at__lt=plan.finished_at).count()
    assert scenarios_first <= 2, outputs(worker)  # turns: at most the scenario in hand and one more
    assert wait_for_sweep(web, created["code"], 120, worker)["done"] == 16
