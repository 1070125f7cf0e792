"""Getting each plan's search done exactly once, whatever happens to the broker or the workers.

The Plan row is the source of truth, the broker only a doorbell:

- `plan_send` hands a queued plan's task to the broker; the plan carries a `dispatched_at` stamp from then on.
  When the broker is down the stamp is cleared: the plan is in the outbox, and its page says it is waiting.
- `plan_claim` takes a queued plan with a conditional UPDATE (queued -> running, a fresh lease token, a lease).
  A second delivery of the same message finds nothing to claim. A worker's search holds a lease of
  PLAN_LEASE_S, which its worker's main process renews at every sweep while the search runs (`leases_renew`),
  never past the task's hard time limit and its grace; any other caller's lease outlasts the hard time limit.
- `plan_store` writes the outcome only while the plan is running under the caller's token, so a worker that
  lost its lease can never overwrite the answer, and a finished plan never changes.
- `plan_lost` is called by the worker's main process the moment a pool process dies under a plan's task (the
  kernel's OOM killer, a kill -9, a cold shutdown): the plan goes back to the queue and is sent again at once,
  or fails after PLAN_MAX_ATTEMPTS. Each lease names its holder (worker, pool process, task id) so that the
  main process, which never saw the token, gives back only the lease of the process it lost.
- `plan_stopped` is the same give-back done by the pool process itself when its worker stops it mid-search
  (a cold shutdown), before it exits.
- `plans_recover`, run by every worker every PLAN_RECOVER_EVERY_S (webui/celery.py) and by
  `manage.py plans_recover`, puts lapsed leases (the worker died mid-search) back in the queue, fails plans
  whose search was cut off PLAN_MAX_ATTEMPTS times, and sends the outbox: plans never sent, and plans sent long
  ago but never started while their broker queue holds fewer messages than plans sent to it (a broker that
  restarted without its data lost them; a long queue alone is no reason to send a plan twice).

None of this relies on the broker redelivering: Celery's filesystem broker cannot, Redis does only after its
visibility timeout. Leases compare machine clocks, which must agree to well within PLAN_TIME_GRACE_S (NTP).
"""
from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import request_started
from django.db import DatabaseError, connection
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from kombu.exceptions import ChannelError

import planner
from planner import PlanSpec

from .celery import app
from .models import Plan, SweepScenario

logger = logging.getLogger(__name__)

# The task is sent by name: this module is imported by the services, which the task module imports.
PLAN_RUN_TASK = "webui.plan_run"
# Lease tokens derived from their holder's name (uuid5): the same name gives the same token in any process.
LEASE_NAMESPACE = uuid.UUID("4f1c2a9e-7a61-4c55-9a3b-0c6f2e8d5b17")


def plan_time_limit(*, spec: PlanSpec) -> float:
    """The soft time limit for this spec's search in seconds: a base plus a cost per layout the search may
    consider (`planner.estimate_layouts`, an upper bound), capped at PLAN_TIME_LIMIT_S."""
    layouts = planner.estimate_layouts(spec)
    limit = settings.PLAN_TIME_BASE_S + layouts * settings.PLAN_TIME_PER_LAYOUT_US / 1e6
    return round(min(settings.PLAN_TIME_LIMIT_S, limit), 1)


def plan_hard_limit(*, plan: Plan) -> float:
    """When the worker kills the search outright: the soft limit plus time to record the failure."""
    return plan.time_limit_s + settings.PLAN_TIME_GRACE_S


def plan_dispatch(*, plan: Plan) -> bool:
    """Send a queued plan's task that is due for sending (the sweep); True when the broker took it.

    Stamps `dispatched_at` first with a conditional UPDATE against the stamp the caller read, so that two sweeps
    racing over the outbox send it once.
    """
    sent_at = timezone.now()
    if not Plan.objects.filter(pk=plan.pk, status=Plan.Status.QUEUED, dispatched_at=plan.dispatched_at).update(
            dispatched_at=sent_at):
        return False  # someone else sent it a moment ago, or it is no longer queued
    plan.dispatched_at = sent_at
    return plan_send(plan=plan)


class _Broker:
    """Whether this process's last send failed lately: then, until `down_until` (time.monotonic()), sends are not
    tried (settings.BROKER_BACKOFF_S). One slow failure per request, or per backoff in a worker's sweeps, not one
    per plan. Each web request tries again (a broker back a moment ago takes its plans at once)."""
    down_until = 0.0


def _try_the_broker_again(**kwargs: Any) -> None:
    _Broker.down_until = 0.0


request_started.connect(_try_the_broker_again, dispatch_uid="webui.delivery.broker")


def plan_send(*, plan: Plan) -> bool:
    """Hand the task of a plan already stamped `dispatched_at` to the broker, with the plan's time limits.
    A broker that refuses it (down, unreachable, not answering) is logged and the stamp cleared: the plan is in
    the outbox, and its page says it is waiting; after that, the rest of the request's sends (a worker's, for
    BROKER_BACKOFF_S) go to the outbox without trying (_Broker). No exception escapes: the plan is saved either
    way."""
    if time.monotonic() >= _Broker.down_until:
        try:
            app.send_task(PLAN_RUN_TASK, args=(plan.pk,), soft_time_limit=plan.time_limit_s,
                          time_limit=plan_hard_limit(plan=plan), queue=plan_queue(plan=plan))
            return True
        except Exception as err:  # kombu's OperationalError, a socket error, a timeout: the broker is not there
            _Broker.down_until = time.monotonic() + settings.BROKER_BACKOFF_S
            logger.warning("plan %s: the broker refused the task (%s); it stays in the outbox, with the rest of "
                           "this request's plans (a worker tries again in %g s)", plan.pk, err,
                           settings.BROKER_BACKOFF_S)
    Plan.objects.filter(pk=plan.pk, dispatched_at=plan.dispatched_at).update(dispatched_at=None)
    return False


def plan_queue(*, plan: Plan) -> str:
    """The broker queue of a plan's task: a sweep's scenarios wait in their own, which workers take from in turn
    with the queue of plans asked for one by one (settings.CELERY_TASK_QUEUES)."""
    # A scenario's row is committed with its plan, before the task is sent (sweeps.sweep_create).
    is_scenario = SweepScenario.objects.filter(plan_id=plan.pk).exists()
    return settings.SWEEP_QUEUE if is_scenario else settings.CELERY_TASK_DEFAULT_QUEUE


def in_queue(queue: str) -> Q:
    """The plans whose tasks go to broker queue `queue` (plan_queue), as a filter."""
    scenarios = Q(pk__in=SweepScenario.objects.values("plan_id"))
    return scenarios if queue == settings.SWEEP_QUEUE else ~scenarios


def plan_queue_position(*, plan: Plan) -> int:
    """How many queued plans of the same broker queue were asked for before this one."""
    earlier = Plan.objects.filter(status=Plan.Status.QUEUED, created_at__lt=plan.created_at)
    return earlier.filter(in_queue(plan_queue(plan=plan))).count()


def lease_holder(*, hostname: str, pid: int | None, task_id: str) -> str:
    """The name of one delivery of a plan's task in one pool process: known to the pool process that searches
    and to its worker's main process, which outlives it."""
    return f"{hostname}/{pid}/{task_id}"


def lease_token(holder: str | None) -> uuid.UUID:
    """The lease token of a named holder, or a fresh random one for an unnamed caller (a test, a command)."""
    return uuid.uuid5(LEASE_NAMESPACE, holder) if holder else uuid.uuid4()


def plan_claim(*, plan_id: int, token: uuid.UUID | None = None) -> tuple[Plan | None, uuid.UUID | None]:
    """(the plan, a lease token) when this caller may run its search now; (the plan, None) when it may not:
    it is running under someone else's live lease, or finished. (None, None) when there is no such plan.
    The lease is `token` (a holder's `lease_token`, known before the claim), or a fresh one."""
    plan = Plan.objects.filter(pk=plan_id).only("time_limit_s").first()
    if plan is None:
        return None, None
    renewed = token is not None  # a worker's search, whose main process renews the lease (leases_renew)
    token = token or lease_token(None)
    now = timezone.now()
    lease = timedelta(seconds=plan_hard_limit(plan=plan) + settings.PLAN_TIME_GRACE_S)
    if renewed:
        lease = min(lease, timedelta(seconds=settings.PLAN_LEASE_S))
    claimed = Plan.objects.filter(pk=plan_id, status=Plan.Status.QUEUED).update(
        status=Plan.Status.RUNNING, lease_token=token, lease_expires_at=now + lease, started_at=now,
        attempts=F("attempts") + 1)
    plan.refresh_from_db()
    return plan, (token if claimed else None)


def leases_renew(*, holders: list[str]) -> int:
    """Extend the leases of the plans whose searches `holders` (lease_holder names: the worker's searches in
    hand) are running, to PLAN_LEASE_S from now but never past the claim's hard time limit and its grace: a search
    past its limit is the worker's to kill, and its plan then lapses as before. Returns how many were renewed."""
    if not holders:
        return 0
    now = timezone.now()
    renewed = 0
    running = Plan.objects.filter(status=Plan.Status.RUNNING, lease_token__in=[lease_token(h) for h in holders])
    for plan in running.only("pk", "lease_token", "started_at", "time_limit_s"):
        end = plan.started_at + timedelta(seconds=plan_hard_limit(plan=plan) + settings.PLAN_TIME_GRACE_S)
        until = min(now + timedelta(seconds=settings.PLAN_LEASE_S), end)
        renewed += Plan.objects.filter(pk=plan.pk, status=Plan.Status.RUNNING, lease_token=plan.lease_token,
                                       lease_expires_at__lt=until).update(lease_expires_at=until)
    return renewed


def plan_store(*, plan: Plan, token: uuid.UUID, **fields: Any) -> Plan:
    """Record a claimed plan's outcome (status, result or error, ...) if it still holds the lease."""
    stored = Plan.objects.filter(pk=plan.pk, status=Plan.Status.RUNNING, lease_token=token).update(
        lease_token=None, lease_expires_at=None, finished_at=timezone.now(), **fields)
    try:
        plan.refresh_from_db()
    except Plan.DoesNotExist:
        # Deleted in the admin while it was searched: nothing to store (reading the row back raised DoesNotExist,
        # an ERROR with a traceback in the worker's log, after a warning that blamed a lapsed lease).
        logger.info("plan %s was deleted during its search; its answer is dropped", plan.pk)
        return plan
    if not stored:
        logger.warning("plan %s: the lease lapsed before the answer was stored; another worker has the plan",
                       plan.code)
    return plan


def plan_release(*, plan: Plan, token: uuid.UUID) -> None:
    """Give a claimed plan back to the queue (a transient error; the task will retry). Best effort: with the
    database gone too, the lease lapses and `plans_recover` does it."""
    try:
        Plan.objects.filter(pk=plan.pk, status=Plan.Status.RUNNING, lease_token=token).update(
            status=Plan.Status.QUEUED, lease_token=None, lease_expires_at=None)
    except DatabaseError:
        logger.warning("plan %s: could not release the lease; it will lapse", plan.code)


def plan_lost(*, plan_id: int, holder: str | None, send: bool = True) -> str:
    """The pool process that ran this plan's task under `holder` is gone (killed, out of memory, or cut off by a
    shutdown); its worker's main process calls this at once. Returns what became of the plan:

    - "failed": it was that process's search, and the PLAN_MAX_ATTEMPTS-th to be cut off;
    - "requeued": it was that process's search; it is back in the queue (and sent again now if `send`);
    - "sent": it was still queued (the process died before claiming it); sent again now;
    - "": it is finished, or another delivery holds it, or the broker refused it (the outbox sends it later).

    A worker that stopped the process itself (a shutdown) passes send=False: it did not acknowledge the
    message, which goes back to the broker's queue as the worker closes its connection, and a message sent now
    might be taken by that same worker on its way out. The plan counts as sent; should the broker lose the
    message, the outbox sends it again after PLAN_RESEND_AFTER_S.
    """
    held = Plan.objects.filter(pk=plan_id, status=Plan.Status.RUNNING, lease_token=lease_token(holder)) \
        if holder else Plan.objects.none()
    return _plan_give_back(plan_id=plan_id, held=held, send=send)


def plan_stopped(*, plan_id: int, token: uuid.UUID) -> str:
    """The search process holding `token` is being stopped mid-search (a worker's cold shutdown): what its
    worker's main process would do with `plan_lost(send=False)`, done by the process itself on its way out, so
    that the plan goes back whether or not the main process had registered the search's start. Same answers as
    `plan_lost`; "" when the plan is not running under `token`: not claimed yet, finished (its answer is
    stored), or taken by another delivery after this lease lapsed."""
    held = Plan.objects.filter(pk=plan_id, status=Plan.Status.RUNNING, lease_token=token)
    return _plan_give_back(plan_id=plan_id, held=held, send=False)


def _plan_give_back(*, plan_id: int, held: QuerySet[Plan], send: bool) -> str:
    """Give the plan back, on a new database connection if this one is broken. Both callers run when a signal
    struck: a stop's SystemExit is raised between two Python steps wherever the process was, inside a query too
    (psycopg waits for the server in Python), which leaves the connection mid-command ("another command is
    already in progress"). Trying again is safe: it changes only a plan still held."""
    try:
        return _plan_give_back_now(plan_id=plan_id, held=held, send=send)
    except DatabaseError as err:
        logger.info("plan %s: the database connection failed under the give-back (%s: %s); trying on a new one",
                    plan_id, type(err).__name__, err)
        connection.close()
        return _plan_give_back_now(plan_id=plan_id, held=held, send=send)


def _plan_give_back_now(*, plan_id: int, held: QuerySet[Plan], send: bool) -> str:
    now = timezone.now()
    if held.filter(attempts__gte=settings.PLAN_MAX_ATTEMPTS).update(
            status=Plan.Status.FAILED, lease_token=None, lease_expires_at=None, finished_at=now,
            error=f"Its search process stopped {settings.PLAN_MAX_ATTEMPTS} times before finishing (the system "
                  "killed it, most likely for lack of memory), so it was not tried again. Pin part of the layout "
                  "(TP, PP) to make the search smaller, or ask your operator to look at the workers' logs."):
        return "failed"
    requeued = held.update(status=Plan.Status.QUEUED, lease_token=None, lease_expires_at=None,
                           dispatched_at=None if send else now)
    plan = Plan.objects.filter(pk=plan_id, status=Plan.Status.QUEUED).only("dispatched_at", "time_limit_s").first()
    sent = send and plan is not None and plan_dispatch(plan=plan)
    return "requeued" if requeued else ("sent" if sent else "")


def _lost_messages(queued: QuerySet[Plan], before: Any, limit: int) -> list[Plan]:
    """Plans sent before `before` and still queued whose message the broker seems to have lost (a restart without
    its data, a torn file skipped): as many of the longest-waiting as its queue holds fewer messages than plans sent
    to it. A plan that is only waiting its turn behind a long queue is not sent again: every 2 minutes, each of the
    2,048 scenarios of two big sweeps was, so duplicates multiplied in the queue and workers spent minutes taking
    messages of plans already done. Where the broker cannot say how many it holds, every such plan is due."""
    stale = queued.filter(dispatched_at__lt=before)
    if limit <= 0 or not stale.exists():
        return []
    due: list[Plan] = []
    for queue in (settings.SWEEP_QUEUE, settings.CELERY_TASK_DEFAULT_QUEUE):
        of_queue = in_queue(queue)
        waiting = stale.filter(of_queue)
        if len(due) >= limit or not waiting.exists():
            continue
        held = broker_backlog(queue)
        sent_to_it = queued.filter(of_queue, dispatched_at__isnull=False).count()
        missing = sent_to_it if held is None else sent_to_it - held
        due += list(waiting.order_by("dispatched_at")[:max(0, min(missing, limit - len(due)))])
    return due


def broker_backlog(queue: str) -> int | None:
    """How many messages wait in the broker's `queue` (the filesystem broker's files, a Redis list's length); None
    when the broker cannot be asked. Messages a worker has taken but not finished are not counted: their plans
    may be sent again once, which claiming makes harmless."""
    try:
        with app.connection_for_read() as conn:
            with conn.channel() as channel:
                try:
                    return int(channel.queue_declare(queue=queue, passive=True).message_count)
                except ChannelError:  # Redis keeps no key for an empty queue: "no such queue" is none waiting
                    return 0
    except Exception as err:  # the broker is down or unreachable: the caller sends what it cannot rule out
        logger.info("could not count the messages waiting on %s (%s: %s)", queue, type(err).__name__, err)
        return None


def plans_recover(*, limit: int = 500) -> dict[str, int]:
    """One sweep: lapsed leases back to the queue (or failed, after PLAN_MAX_ATTEMPTS), then send the outbox.
    Safe to run from any number of processes at once. Returns {"requeued", "failed", "sent", "unsent"}.

    It only reads unless something is due: it runs every few seconds in every worker, and on SQLite a write
    would wait for the database's one write lock.
    """
    now = timezone.now()
    lapsed_q = Q(status=Plan.Status.RUNNING) & (Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True))
    lapsed_ids = list(Plan.objects.filter(lapsed_q).values_list("pk", flat=True)[:limit])
    failed = requeued = 0
    if lapsed_ids:
        lapsed = Plan.objects.filter(lapsed_q, pk__in=lapsed_ids)  # still lapsed: a racing sweep may have been first
        failed = lapsed.filter(attempts__gte=settings.PLAN_MAX_ATTEMPTS).update(
            status=Plan.Status.FAILED, lease_token=None, lease_expires_at=None, finished_at=now,
            error=f"The search was cut off {settings.PLAN_MAX_ATTEMPTS} times (its worker stopped, or it ran "
                  "past its hard time limit), so it was not tried again. Pin part of the layout (TP, PP) to make "
                  "the search smaller, or ask your operator to look at the workers' logs.")
        requeued = lapsed.update(status=Plan.Status.QUEUED, lease_token=None, lease_expires_at=None,
                                 dispatched_at=None)
    queued = Plan.objects.filter(status=Plan.Status.QUEUED).only("dispatched_at", "time_limit_s")
    due = list(queued.filter(dispatched_at__isnull=True).order_by("created_at")[:limit])
    due += _lost_messages(queued, now - timedelta(seconds=settings.PLAN_RESEND_AFTER_S), limit - len(due))
    sent = sum(plan_dispatch(plan=plan) for plan in due)
    counts = {"requeued": requeued, "failed": failed, "sent": sent, "unsent": len(due) - sent}
    if any(counts.values()):
        logger.info("plans_recover: %s", counts)
    return counts
