"""Exactly-once searches over at-least-once delivery (webui/delivery.py), without a worker: claims and leases,
stores by the lease holder only, time limits from the spec, the outbox and the lapsed-lease sweep. The same
paths with real processes, a SIGKILLed worker and a restarted Redis are in test_faults.py."""
from __future__ import annotations

import copy
import logging
import resource
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.core.management import call_command
from django.db import OperationalError, connection
from django.utils import timezone

import planner
from webui import delivery, services, tasks
from webui.celery import fork_guard
from webui.models import Plan

from .conftest import fresh_python

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch) -> list[dict]:
    """Messages handed to the broker, recorded instead of sent."""
    calls: list[dict] = []
    monkeypatch.setattr(delivery.app, "send_task",
                        lambda name, args, **options: calls.append({"plan_id": args[0], "task": name, **options}))
    return calls


@pytest.fixture
def broker_down(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise ConnectionRefusedError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(delivery.app, "send_task", refuse)


@pytest.fixture
def queued(seeded, small_spec, django_capture_on_commit_callbacks) -> Plan:
    """A plan saved and stamped as sent, its task not actually sent (no worker takes it here)."""
    with django_capture_on_commit_callbacks(execute=False):
        return services.plan_create(spec=services.spec_parse(data=small_spec))


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------------------------
# Time limits


def test_time_limits_grow_with_the_layouts_searched_and_are_capped(seeded, small_spec, settings):
    small = services.spec_parse(data=small_spec)
    small_spec["cluster"]["num_gpus"], small_spec["training"]["global_batch"] = 1_048_576, 16_777_216
    big = services.spec_parse(data=small_spec)
    layouts_small, layouts_big = planner.estimate_layouts(small), planner.estimate_layouts(big)
    assert layouts_big > layouts_small
    assert delivery.plan_time_limit(spec=small) == round(10 + layouts_small * 100e-6, 1)
    assert delivery.plan_time_limit(spec=big) == round(10 + layouts_big * 100e-6, 1)
    settings.PLAN_TIME_LIMIT_S = 12
    assert delivery.plan_time_limit(spec=big) == 12


def test_a_plan_is_sent_with_its_own_soft_and_hard_limits(seeded, small_spec, sent,
                                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    assert plan.time_limit_s == delivery.plan_time_limit(spec=services.spec_parse(data=small_spec))
    assert sent == [{"plan_id": plan.pk, "task": "webui.plan_run", "soft_time_limit": plan.time_limit_s,
                     "time_limit": plan.time_limit_s + 10, "queue": "celery"}]
    plan.refresh_from_db()
    assert plan.dispatched_at is not None and not plan.is_waiting_for_broker


def test_a_sweeps_scenarios_are_sent_to_the_sweep_queue(seeded, small_spec, sent, django_capture_on_commit_callbacks):
    from webui import sweeps

    with django_capture_on_commit_callbacks(execute=True):
        sweep = sweeps.sweep_create(data={"base": small_spec, "vary": {"cluster.num_gpus": [64, 128]}})
    assert [m["queue"] for m in sent] == ["sweeps", "sweeps"]
    assert {m["plan_id"] for m in sent} == {s.plan_id for s in sweep.scenarios.all()}


def test_a_search_past_its_soft_limit_fails_with_the_limit_named(queued, monkeypatch):
    def too_slow(spec, top):
        raise SoftTimeLimitExceeded()
    monkeypatch.setattr(planner, "plan", too_slow)
    plan = services.plan_run(plan_id=queued.pk)
    assert plan.status == "failed" and plan.lease_token is None
    assert plan.error.startswith(f"The search took longer than {queued.time_limit_s:g} s and was stopped.")


def test_a_search_out_of_memory_fails_with_the_cap_named(queued, monkeypatch, settings):
    def too_big(spec, top):
        raise MemoryError()
    monkeypatch.setattr(planner, "plan", too_big)
    plan = services.plan_run(plan_id=queued.pk)
    assert plan.status == "failed"
    assert f"more than the {settings.PLAN_MEMORY_LIMIT_MB} MiB a worker allows" in plan.error


def test_each_search_process_caps_its_address_space():
    code = ("import django, resource; django.setup(); from webui.celery import limit_search_memory; "
            "limit_search_memory(); print(resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = fresh_python(["-c", code], {"DJANGO_SETTINGS_MODULE": "webui.settings", "PLAN_MEMORY_LIMIT_MB": "1536"})
    assert int(out.stdout) == 1536 * 2**20, out.stderr
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # only in that process


# ---------------------------------------------------------------------------------------------------------
# Claims and leases


def test_only_the_first_delivery_claims_a_plan(queued, settings):
    plan, token = delivery.plan_claim(plan_id=queued.pk)
    assert token is not None and plan.status == "running" and plan.attempts == 1 and plan.lease_token == token
    lease = (plan.lease_expires_at - plan.started_at).total_seconds()
    assert lease == pytest.approx(plan.time_limit_s + 2 * settings.PLAN_TIME_GRACE_S)  # outlives the hard limit
    again, second = delivery.plan_claim(plan_id=queued.pk)
    assert second is None and again.attempts == 1 and again.lease_token == token


def test_a_workers_search_holds_a_short_lease_that_its_worker_renews_up_to_the_hard_limit(queued, settings):
    # A worker killed whole kept its plan "Searching" until the hard time limit and its grace had passed (up to
    # 2.5 minutes): a worker's search now holds PLAN_LEASE_S at a time, renewed by its main process at each sweep.
    settings.PLAN_LEASE_S = 30
    Plan.objects.filter(pk=queued.pk).update(time_limit_s=100)
    holder = delivery.lease_holder(hostname="w@h", pid=123, task_id="t")
    plan, token = delivery.plan_claim(plan_id=queued.pk, token=delivery.lease_token(holder))
    assert (plan.lease_expires_at - plan.started_at).total_seconds() == pytest.approx(30)
    Plan.objects.filter(pk=plan.pk).update(lease_expires_at=ago(-5))  # 5 s left
    assert delivery.leases_renew(holders=["w@h/124/t", "w@h/123/other"]) == 0  # other holders renew nothing
    assert delivery.leases_renew(holders=[holder]) == 1
    plan.refresh_from_db()
    assert (plan.lease_expires_at - timezone.now()).total_seconds() == pytest.approx(30, abs=1)
    # Never past the hard limit and its grace from the claim: a search past its limit is the worker's to kill.
    Plan.objects.filter(pk=plan.pk).update(started_at=ago(115), lease_expires_at=ago(-2))
    assert delivery.leases_renew(holders=[holder]) == 1
    plan.refresh_from_db()
    end = plan.started_at + timedelta(seconds=100 + 2 * settings.PLAN_TIME_GRACE_S)
    assert plan.lease_expires_at == end
    assert delivery.leases_renew(holders=[holder]) == 0  # nothing left to extend
    # Not renewed, it lapses, and the sweep gives the plan back.
    Plan.objects.filter(pk=plan.pk).update(lease_expires_at=ago(1))
    assert delivery.plans_recover()["requeued"] == 1


def test_a_duplicate_delivery_does_not_search(queued, monkeypatch):
    delivery.plan_claim(plan_id=queued.pk)  # another worker is searching
    monkeypatch.setattr(planner, "plan", lambda spec, top: pytest.fail("searched twice"))
    plan = services.plan_run(plan_id=queued.pk)
    assert plan.status == "running" and plan.attempts == 1


def test_a_plan_deleted_during_its_search_drops_its_answer_quietly(queued, caplog):
    # Deleted in the admin mid-search: the store raised DoesNotExist (an ERROR and a traceback in the worker's log)
    # after a warning that blamed a lapsed lease.
    plan, token = delivery.plan_claim(plan_id=queued.pk)
    Plan.objects.filter(pk=plan.pk).delete()
    with caplog.at_level(logging.INFO, logger="webui.delivery"):
        kept = delivery.plan_store(plan=plan, token=token, status="done", result={"plans": []})
    assert kept is plan and not Plan.objects.exists()
    assert [r.getMessage() for r in caplog.records] == [f"plan {plan.pk} was deleted during its search; its answer "
                                                        "is dropped"]


def test_a_worker_that_lost_its_lease_cannot_store_its_answer(queued):
    plan, stale = delivery.plan_claim(plan_id=queued.pk)
    Plan.objects.filter(pk=plan.pk).update(lease_expires_at=ago(1))
    delivery.plans_recover()  # requeued; the next claim is someone else's
    plan, token = delivery.plan_claim(plan_id=plan.pk)
    late = delivery.plan_store(plan=plan, token=stale, status="done", result={"plans": ["stale"]})
    assert late.status == "running" and late.result is None and late.lease_token == token
    done = delivery.plan_store(plan=plan, token=token, status="done", result={"plans": []})
    assert done.status == "done" and done.result == {"plans": []} and done.attempts == 2


def test_a_transient_database_error_gives_the_plan_back_for_the_retry(queued, monkeypatch):
    def database_blinks(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")
    monkeypatch.setattr(services, "plan_original", database_blinks)
    with pytest.raises(OperationalError):
        services.plan_run(plan_id=queued.pk)
    queued.refresh_from_db()
    assert (queued.status, queued.lease_token, queued.attempts) == ("queued", None, 1)
    monkeypatch.undo()
    assert services.plan_run(plan_id=queued.pk).status == "done"  # what Celery's retry then does


@pytest.mark.parametrize("stop", [SystemExit(-241), KeyboardInterrupt()])
def test_a_search_stopped_mid_way_gives_its_plan_back_before_the_process_exits(queued, sent, monkeypatch, stop):
    def stopped(*args, **kwargs):  # billiard raises SystemExit inside the search when the worker stops it
        raise stop
    monkeypatch.setattr(planner, "plan", stopped)
    with pytest.raises(type(stop)):
        services.plan_run(plan_id=queued.pk, holder="w1@host/4242/t-1")
    queued.refresh_from_db()
    assert (queued.status, queued.lease_token, queued.lease_expires_at, queued.attempts) == ("queued", None, None, 1)
    # Not sent again: the stopping worker keeps the message, as when its main process gives the plan back.
    assert queued.dispatched_at is not None and sent == []
    monkeypatch.undo()
    assert services.plan_run(plan_id=queued.pk).status == "done"  # what the next worker to start does


def test_a_search_stopped_during_its_claim_gives_the_plan_back_too(queued, sent, monkeypatch):
    claim = delivery.plan_claim

    def claimed_then_stopped(**kwargs):  # the stop lands after the claim's UPDATE, before it returns
        claim(**kwargs)
        raise SystemExit(-241)
    monkeypatch.setattr(delivery, "plan_claim", claimed_then_stopped)
    with pytest.raises(SystemExit):
        services.plan_run(plan_id=queued.pk, holder="w1@host/4242/t-1")
    queued.refresh_from_db()
    assert (queued.status, queued.lease_token, queued.attempts) == ("queued", None, 1) and sent == []


def _mid_query() -> None:
    """What a stop landing inside a query leaves: psycopg sent a command and waits for its answer in Python,
    where billiard's SystemExit is raised; the connection is still busy with it."""
    if connection.vendor != "postgresql":
        pytest.skip("only psycopg waits for the server in Python code, where a signal handler can run")
    connection.connection.pgconn.send_query(b"SELECT pg_sleep(0.2)")


def _closed_under_it() -> None:
    connection.connection.close()  # the DB-API connection gone, Django's wrapper not told


@pytest.mark.django_db(transaction=True)  # the give-back opens a new connection: not inside the test's transaction
@pytest.mark.parametrize("broken", [_mid_query, _closed_under_it])
def test_a_search_stopped_mid_query_gives_its_plan_back_on_a_new_connection(seeded, small_spec, sent, monkeypatch,
                                                                           broken, caplog):
    caplog.set_level(logging.INFO, logger="webui")
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))

    def stopped(*args, **kwargs):
        broken()
        raise SystemExit(-241)
    monkeypatch.setattr(planner, "plan", stopped)
    with pytest.raises(SystemExit):
        services.plan_run(plan_id=plan.pk, holder="w1@host/4242/t-1")
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)
    assert f"plan {plan.pk}: the database connection failed under the give-back (" in caplog.text
    assert f"plan {plan.pk}: stopped mid-search: requeued" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("broken", [_mid_query, _closed_under_it])
def test_a_lost_process_is_given_back_on_a_new_connection_too(seeded, small_spec, sent, broken):
    # The worker's main process gives back from inside Celery's shutdown, itself run by a signal handler.
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    holder = "w1@host/4242/t-1"
    assert delivery.plan_claim(plan_id=plan.pk, token=delivery.lease_token(holder))[1] is not None
    broken()
    assert delivery.plan_lost(plan_id=plan.pk, holder=holder, send=False) == "requeued"
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)


@pytest.mark.django_db(transaction=True)
def test_a_lost_process_is_given_back_from_a_signal_handler_that_struck_mid_query(seeded, small_spec, sent):
    # A cold shutdown runs Celery's pool stop, and so the give-back, inside the SIGQUIT handler, on top of whatever
    # the main thread was doing. In a query of the recovery sweep, psycopg holds that connection's lock until the
    # answer is in; a give-back on the same connection would wait for it forever, and the worker never exit.
    if connection.vendor != "postgresql":
        pytest.skip("only psycopg holds a connection lock across a query (the PostgreSQL pass runs this)")
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    holder = "w1@host/4242/t-1"
    assert delivery.plan_claim(plan_id=plan.pk, token=delivery.lease_token(holder))[1] is not None
    returned: list[bool] = []

    def handler_on_top_of_a_query() -> None:
        connection.ensure_connection()
        try:
            with connection.connection.lock:  # as the interrupted query holds it
                tasks.plan_give_back(plan_id=plan.pk, holder=holder, send=False, reason="SIGQUIT")
                returned.append(True)
        finally:
            connection.close()

    main = threading.Thread(target=handler_on_top_of_a_query, daemon=True)
    main.start()
    main.join(tasks.GIVE_BACK_WAIT_S + 5)  # on a deadlock, this thread would be left waiting, and the test fail
    assert returned == [True]
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)


@pytest.mark.django_db(transaction=True)
def test_a_give_back_from_a_signal_handler_that_struck_mid_sweep_goes_on_at_once(seeded, small_spec, sent):
    # With Redis the recovery sweep runs on the main thread, holding the fork guard; a cold shutdown striking in
    # the middle of it gives back from inside the handler, on the same thread: the guard is already its own.
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    holder = "w1@host/4242/t-1"
    assert delivery.plan_claim(plan_id=plan.pk, token=delivery.lease_token(holder))[1] is not None
    started = time.monotonic()
    with fork_guard:  # the sweep the signal interrupted
        tasks.plan_give_back(plan_id=plan.pk, holder=holder, send=False, reason="SIGQUIT")
    assert time.monotonic() - started < tasks.GIVE_BACK_WAIT_S / 2
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)


def test_a_stopped_search_gives_back_only_its_own_running_lease(queued, settings):
    plan, token = delivery.plan_claim(plan_id=queued.pk)
    assert delivery.plan_stopped(plan_id=plan.pk, token=delivery.lease_token("someone else")) == ""
    done = delivery.plan_store(plan=plan, token=token, status="done", result={"plans": []})
    assert delivery.plan_stopped(plan_id=done.pk, token=token) == ""  # finished just before the stop: stays finished
    done.refresh_from_db()
    assert done.status == "done" and done.result == {"plans": []}


def test_a_search_stopped_too_often_fails_with_a_message(queued, settings):
    Plan.objects.filter(pk=queued.pk).update(attempts=settings.PLAN_MAX_ATTEMPTS - 1)
    plan, token = delivery.plan_claim(plan_id=queued.pk)
    assert delivery.plan_stopped(plan_id=plan.pk, token=token) == "failed"
    plan.refresh_from_db()
    assert plan.status == "failed" and plan.lease_token is None


# ---------------------------------------------------------------------------------------------------------
# The sweep: lapsed leases and the outbox


def test_the_sweep_requeues_and_resends_a_search_whose_worker_died(queued, sent):
    plan, _ = delivery.plan_claim(plan_id=queued.pk)
    assert delivery.plans_recover() == {"requeued": 0, "failed": 0, "sent": 0, "unsent": 0}  # lease still live
    Plan.objects.filter(pk=plan.pk).update(lease_expires_at=ago(1))
    assert delivery.plans_recover() == {"requeued": 1, "failed": 0, "sent": 1, "unsent": 0}
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)
    assert [m["plan_id"] for m in sent] == [plan.pk]
    assert services.plan_run(plan_id=plan.pk).attempts == 2


def test_a_lost_search_process_gives_its_plan_back_at_once_and_it_is_sent_again(queued, sent):
    holder = delivery.lease_holder(hostname="w1@host", pid=4242, task_id="t-1")
    plan, token = delivery.plan_claim(plan_id=queued.pk, token=delivery.lease_token(holder))
    assert token == delivery.lease_token(holder) and plan.status == "running"
    assert delivery.plan_lost(plan_id=plan.pk, holder=holder) == "requeued"  # no lease had to lapse
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)
    assert [m["plan_id"] for m in sent] == [plan.pk] and plan.dispatched_at is not None
    assert services.plan_run(plan_id=plan.pk).attempts == 2  # the next delivery searches it


def test_a_lost_process_gives_back_only_its_own_lease(queued, sent):
    mine = delivery.lease_holder(hostname="w1@host", pid=4242, task_id="t-1")
    plan, _ = delivery.plan_claim(plan_id=queued.pk, token=delivery.lease_token(mine))
    # A duplicate delivery of the same message in another process found the plan taken and died: not its lease.
    other = delivery.lease_holder(hostname="w2@host", pid=4242, task_id="t-1")
    assert delivery.plan_lost(plan_id=plan.pk, holder=other) == ""
    assert delivery.plan_lost(plan_id=plan.pk, holder=None) == ""
    plan.refresh_from_db()
    assert plan.status == "running" and plan.lease_token == delivery.lease_token(mine) and sent == []


def test_a_search_cut_off_by_a_shutdown_goes_back_to_the_queue_with_its_message_kept(queued, sent):
    holder = "w1@host/4242/t-1"
    plan, _ = delivery.plan_claim(plan_id=queued.pk, token=delivery.lease_token(holder))
    assert delivery.plan_lost(plan_id=plan.pk, holder=holder, send=False) == "requeued"
    plan.refresh_from_db()
    assert (plan.status, plan.lease_token, plan.attempts) == ("queued", None, 1)
    # Not sent now (the stopping worker would take it), and not by the sweep either: the broker keeps the message.
    assert plan.dispatched_at is not None and delivery.plans_recover()["sent"] == 0 and sent == []


def test_a_process_lost_before_it_claimed_the_plan_sends_it_again(queued, sent):
    assert delivery.plan_lost(plan_id=queued.pk, holder="w1@host/4242/t-1") == "sent"
    assert [m["plan_id"] for m in sent] == [queued.pk]


def test_a_plan_whose_search_process_dies_too_often_fails_with_a_message(queued, sent, settings):
    holder = "w1@host/4242/t-1"
    Plan.objects.filter(pk=queued.pk).update(attempts=settings.PLAN_MAX_ATTEMPTS - 1)
    plan, _ = delivery.plan_claim(plan_id=queued.pk, token=delivery.lease_token(holder))
    assert delivery.plan_lost(plan_id=plan.pk, holder=holder) == "failed"
    plan.refresh_from_db()
    assert plan.status == "failed" and plan.lease_token is None and sent == []
    assert plan.error.startswith(f"Its search process stopped {settings.PLAN_MAX_ATTEMPTS} times before finishing")


def test_a_search_cut_off_too_often_fails_with_a_message(queued, sent, settings):
    Plan.objects.filter(pk=queued.pk).update(status="running", attempts=settings.PLAN_MAX_ATTEMPTS,
                                              lease_expires_at=ago(1))
    assert delivery.plans_recover()["failed"] == 1
    queued.refresh_from_db()
    assert queued.status == "failed" and queued.finished_at is not None
    assert queued.error.startswith(f"The search was cut off {settings.PLAN_MAX_ATTEMPTS} times")
    assert sent == []


def test_the_outbox_sends_plans_the_broker_refused_once_it_is_back(seeded, small_spec, broker_down, monkeypatch,
                                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    plan.refresh_from_db()
    assert plan.status == "queued" and plan.is_waiting_for_broker  # saved, not lost, and says so
    assert delivery.plans_recover() == {"requeued": 0, "failed": 0, "sent": 0, "unsent": 1}
    monkeypatch.undo()
    assert delivery.plans_recover()["sent"] == 0  # within BROKER_BACKOFF_S of the refusal: not even tried
    monkeypatch.setattr(delivery._Broker, "down_until", 0.0)  # ... which has passed
    calls: list[int] = []
    monkeypatch.setattr(delivery.app, "send_task", lambda name, args, **options: calls.append(args[0]))
    assert delivery.plans_recover()["sent"] == 1 and calls == [plan.pk]
    assert delivery.plans_recover()["sent"] == 0  # sent once, not on every sweep
    plan.refresh_from_db()
    assert not plan.is_waiting_for_broker


def test_after_a_refused_send_the_rest_go_to_the_outbox_without_trying(client, seeded, small_spec, monkeypatch,
                                                                          django_capture_on_commit_callbacks):
    # A 256-scenario sweep posted while the broker was down waited on the publish retries of each, past gunicorn's
    # timeout: an HTML 500 after 30 s, the sweep saved all the same, and its code never given.
    tries: list[int] = []

    def refuse(name, args, **options):
        tries.append(args[0])
        raise ConnectionRefusedError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(delivery.app, "send_task", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        plans = [services.plan_create(spec=services.spec_parse(data={**small_spec, "training": {
            **small_spec["training"], "global_batch": batch}})) for batch in (8, 16, 32, 64)]
    assert len(tries) == 1  # one refusal, then the backoff
    assert all(Plan.objects.get(pk=p.pk).is_waiting_for_broker for p in plans)  # each in the outbox, and says so
    # The next request tries again: a broker back a moment ago takes its plan at once.
    assert client.get("/api/stacks").status_code == 200  # any request
    with django_capture_on_commit_callbacks(execute=True):
        services.plan_create(spec=services.spec_parse(data={**small_spec, "training": {
            **small_spec["training"], "global_batch": 128}}))
    assert len(tries) == 2


def test_a_plan_sent_long_ago_and_never_started_is_sent_again(queued, sent, settings, monkeypatch):
    monkeypatch.setattr(delivery, "broker_backlog", lambda queue: 0)  # the broker holds no message for it
    Plan.objects.filter(pk=queued.pk).update(dispatched_at=ago(settings.PLAN_RESEND_AFTER_S - 5))
    assert delivery.plans_recover()["sent"] == 0  # maybe just a long queue
    Plan.objects.filter(pk=queued.pk).update(dispatched_at=ago(settings.PLAN_RESEND_AFTER_S + 1))
    assert delivery.plans_recover()["sent"] == 1  # the broker lost it (a restart without persistence)
    # Where the broker cannot be asked, a plan that may have been lost is sent again all the same.
    monkeypatch.setattr(delivery, "broker_backlog", lambda queue: None)
    Plan.objects.filter(pk=queued.pk).update(dispatched_at=ago(settings.PLAN_RESEND_AFTER_S + 1))
    assert delivery.plans_recover()["sent"] == 1


def test_plans_waiting_behind_a_long_queue_are_not_sent_again_but_lost_ones_are(seeded, small_spec, settings):
    # Real messages in the configured broker (the filesystem's files, or Redis's list), no worker to take them.
    # Two 1,024-scenario sweeps waited longer than PLAN_RESEND_AFTER_S, and every one of their plans was sent
    # again every 2 minutes: 8,462 messages for 2,258 plans, and workers busy with copies of plans already done.
    from webui.celery import app

    with app.connection_for_write() as conn:
        for queue in (settings.CELERY_TASK_DEFAULT_QUEUE, settings.SWEEP_QUEUE):
            conn.default_channel.queue_purge(queue)
    plans = []
    for batch in (64, 128, 256):
        small_spec["training"]["global_batch"] = batch
        plans.append(services.plan_create(spec=services.spec_parse(data=small_spec)))
        delivery.plan_send(plan=plans[-1])  # what the commit hook does
    assert delivery.broker_backlog(settings.CELERY_TASK_DEFAULT_QUEUE) == 3
    Plan.objects.filter(pk__in=[p.pk for p in plans]).update(dispatched_at=ago(settings.PLAN_RESEND_AFTER_S + 1))
    assert delivery.plans_recover()["sent"] == 0  # all three are in the queue, waiting their turn
    assert delivery.broker_backlog(settings.CELERY_TASK_DEFAULT_QUEUE) == 3
    with app.connection_for_write() as conn:  # the broker loses them (a restart without its data)
        conn.default_channel.queue_purge(settings.CELERY_TASK_DEFAULT_QUEUE)
    assert delivery.plans_recover()["sent"] == 3
    assert delivery.broker_backlog(settings.CELERY_TASK_DEFAULT_QUEUE) == 3
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(settings.CELERY_TASK_DEFAULT_QUEUE)


def test_two_sweeps_at_once_send_a_plan_once(queued, sent):
    Plan.objects.filter(pk=queued.pk).update(dispatched_at=None)  # the broker refused it
    stale = Plan.objects.get(pk=queued.pk).dispatched_at
    assert delivery.plan_dispatch(plan=Plan.objects.get(pk=queued.pk)) is True
    # The other sweep read the plan before the stamp: its conditional UPDATE finds nothing to take.
    assert Plan.objects.filter(pk=queued.pk, dispatched_at=stale).update(dispatched_at=timezone.now()) == 0
    assert len(sent) == 1


def test_the_recovery_command_prints_what_it_did(queued, sent, capsys):
    Plan.objects.filter(pk=queued.pk).update(dispatched_at=None)
    call_command("plans_recover")
    assert capsys.readouterr().out.strip() == "requeued 0, failed 0, sent 1, unsent 0"


# ---------------------------------------------------------------------------------------------------------
# Identical requests


def test_an_identical_request_reuses_the_finished_answer_under_its_own_code(
        seeded, small_spec, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        original = services.plan_create(spec=services.spec_parse(data=small_spec))
    original = services.plan_run(plan_id=original.pk)
    reordered = {key: small_spec[key] for key in reversed(list(small_spec))}  # same spec, other key order
    reordered["cluster"]["gpu"] = services.catalog_as_dict()["gpu"]["H100 SXM5 80GB"]  # by value, not name
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        twin = services.plan_create(spec=services.spec_parse(data=reordered))
    assert twin.code != original.code
    assert (twin.status, twin.reused_from, twin.attempts) == ("done", original, 0)
    assert twin.result == original.result
    assert twin.created_at == twin.started_at == twin.finished_at  # never started before it was asked for
    assert callbacks == [] and len(sent) == 1  # the original's task only
    third = services.plan_create(spec=services.spec_parse(data=small_spec))
    assert third.reused_from == original  # always the plan that searched, never a copy


def test_a_different_top_or_engine_version_searches_again(seeded, small_spec, sent, monkeypatch):
    spec = services.spec_parse(data=small_spec)
    services.plan_run(plan_id=services.plan_create(spec=spec).pk)
    assert services.plan_create(spec=spec, top=3).reused_from is None
    monkeypatch.setattr(services, "ENGINE_VERSION", "999")
    assert services.plan_create(spec=spec).reused_from is None


def test_a_failed_plan_is_not_reused(seeded, small_spec, sent):
    spec = services.spec_parse(data=small_spec)
    failed = services.plan_create(spec=spec)
    Plan.objects.filter(pk=failed.pk).update(status="failed", error="boom")
    assert services.plan_create(spec=spec).status == "queued"


def test_a_twin_that_finished_while_this_one_waited_lends_its_answer(seeded, small_spec, sent, monkeypatch):
    spec = services.spec_parse(data=small_spec)
    first, second = services.plan_create(spec=spec), services.plan_create(spec=spec)  # both queued
    assert second.status == "queued" and second.reused_from is None
    services.plan_run(plan_id=first.pk)
    monkeypatch.setattr(planner, "plan", lambda spec, top: pytest.fail("searched again"))
    second = services.plan_run(plan_id=second.pk)
    assert (second.status, second.reused_from_id, second.attempts) == ("done", first.pk, 1)
    assert second.result == Plan.objects.get(pk=first.pk).result


def test_the_spec_hash_covers_the_engine_version(seeded, small_spec, monkeypatch):
    spec = services.spec_parse(data=small_spec).to_dict()
    before = services.spec_hash(spec)
    monkeypatch.setattr(services, "ENGINE_VERSION", "999")
    assert services.spec_hash(copy.deepcopy(spec)) != before


def test_an_answer_is_reused_only_by_the_engine_build_that_wrote_it(seeded, small_spec, sent, monkeypatch):
    """A change of the engine's code or data that kept its version (a chart's data, a message) must not serve an
    answer written by the build before it: the hash covers accuracy.fingerprint() too."""
    spec = services.spec_parse(data=small_spec)
    original = services.plan_create(spec=spec)
    services.plan_run(plan_id=original.pk)
    assert services.plan_create(spec=spec).reused_from == original
    monkeypatch.setattr(services.accuracy, "fingerprint", lambda: "0123456789abcdef")
    again = services.plan_create(spec=spec)
    assert again.reused_from is None and again.status == "queued" and again.spec_hash != original.spec_hash


def test_delivery_imports_neither_the_tasks_nor_the_services():
    # services -> delivery is the one direction: delivery sends the task by name (PLAN_RUN_TASK).
    import ast

    tree = ast.parse(Path(delivery.__file__).read_text())
    nodes = list(ast.walk(tree))  # function-level imports too
    imported = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    for node in (n for n in nodes if isinstance(n, ast.ImportFrom)):
        module = "." * node.level + (node.module or "")
        imported |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    assert not {name for name in imported if name.endswith(("tasks", "services"))}, imported
    from webui.tasks import plan_run_task

    assert plan_run_task.name == delivery.PLAN_RUN_TASK


def test_a_redis_that_takes_the_connection_and_never_answers_fails_a_send_within_seconds(tmp_path):
    # Redis stalled, or a half-open connection after a partition: the send waited on the socket until gunicorn
    # killed the request (30 s, an HTML 500, the plan saved all the same).
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    code = ("import time, django; django.setup()\n"
            "from webui.celery import app\n"
            "t = time.monotonic()\n"
            "try:\n"
            "    app.send_task('webui.plan_run', args=(1,))\n"
            "    print('sent')\n"
            "except Exception as err:\n"
            "    print(type(err).__name__, round(time.monotonic() - t, 1))\n")
    try:
        out = fresh_python(["-c", code], {"DJANGO_SETTINGS_MODULE": "webui.settings", "VAR_DIR": str(tmp_path),
                                          "CELERY_BROKER_URL": f"redis://127.0.0.1:{listener.getsockname()[1]}/0"},
                           timeout=60)  # without the socket timeout it waits for good: fail, do not hang
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    assert out.returncode == 0, out.stderr
    name, seconds = out.stdout.split()
    # the socket timeout (2 s) on each of the publish's two tries, not a wait without end
    assert name != "sent" and float(seconds) < 10, out.stdout
