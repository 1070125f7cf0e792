"""Celery tasks: thin, like views. Take a plan id, call a service; the service records the outcome.

Delivery is at least once (late acknowledgement, the outbox may send a plan twice); `services.plan_run` makes
it exactly once by claiming the plan with a lease.

A search runs in a pool process, which the kernel's OOM killer (or anyone) may kill. The worker's main process
outlives it and is told at once (`PlanRequest.on_failure`, WorkerLostError): it gives the plan back to the
queue and sends it again (`delivery.plan_lost`), and acknowledges the lost message, which frees the worker for
the next plan. Should even that fail (the database away), the plan's lease lapses and the sweep recovers it.
A worker's cold shutdown stops its pool processes itself (webui/celery.py): each gives its plan back before it
exits (`stop_signal_once`, `delivery.plan_stopped`), and the main process keeps the message for the next worker.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any, Iterator

from billiard import current_process
from billiard.exceptions import Terminated, WorkerLostError
from celery import Task, shared_task
from celery.worker import state as worker_state
from celery.worker.request import Request
from django.db import InterfaceError, OperationalError, connection

from . import delivery, services
from .celery import fork_guard

logger = logging.getLogger(__name__)

# How a pool process ends without its task returning: killed from outside (WorkerLostError), or stopped by its
# own worker (Terminated; a cold shutdown's cancel, which billiard 4.3 reports as SystemExit or KeyboardInterrupt).
KILLED = (WorkerLostError,)
STOPPED = (Terminated, SystemExit, KeyboardInterrupt)

# Set in the worker's main process when its cold shutdown begins (webui/celery.py `stop_searches_first`), before
# its pool processes are stopped, which Celery's own shutdown flags may not yet say.
searches_stopping = threading.Event()


class PlanRequest(Request):
    """A plan task's request as the worker's main process handles it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        error = getattr(exc_info.exception, "exc", exc_info.exception)  # billiard wraps it with its traceback
        if isinstance(error, KILLED + STOPPED) and self.args:
            holder = delivery.lease_holder(hostname=self.hostname, pid=self.worker_pid, task_id=self.id)
            # A worker that is shutting down, or stops its own process, keeps the message: nothing is sent again.
            shutting_down = bool(worker_state.should_stop or worker_state.should_terminate
                                 or searches_stopping.is_set())
            plan_give_back(plan_id=self.args[0], holder=holder if self.worker_pid else None,
                           send=isinstance(error, KILLED) and not shutting_down, reason=repr(error))
            if shutting_down:
                # As Celery does with a search it cancels itself: the message stays unacknowledged, and the broker
                # gives it to the next worker (Celery would acknowledge a lost process's message, and lose it).
                worker_state.task_ready(self)
                return
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)


# How long the main process waits for a give-back before it goes on (the plan's lease lapses, the sweep
# recovers it): a database that does not answer must not hold a worker's shutdown.
GIVE_BACK_WAIT_S = 10.0
# How long a stopped search process has to give its plan back before it exits without doing so (its worker's
# main process then gives it back, or the lease lapses): the stop strikes wherever the search was, and what it
# interrupted may hold a lock the give-back needs.
STOP_GIVE_BACK_S = 5.0


def plan_give_back(*, plan_id: int, holder: str | None, send: bool, reason: str) -> None:
    """`delivery.plan_lost`, from the worker's main process: logged, never raised, no connection kept.

    It runs on a thread of its own, with its own database connection. A cold shutdown calls it inside the
    SIGQUIT handler (Celery stops the pool there), on top of whatever the main thread was doing, which may be a
    query of the recovery sweep: psycopg holds that connection's lock for the whole query, and a second query on
    it from the same thread would wait for the lock forever, and the worker would never exit. While the
    give-back's thread runs, the calling thread holds `fork_guard` for it (webui/celery.py: no pool process is
    forked while a thread is inside the database). The caller may own the guard already, in the sweep the signal
    interrupted; the give-back's thread could not have taken it then."""
    done = threading.Thread(target=_plan_give_back, name=f"give-back-{plan_id}", daemon=True,
                            kwargs={"plan_id": plan_id, "holder": holder, "send": send, "reason": reason})
    guarded = fork_guard.acquire(timeout=GIVE_BACK_WAIT_S)  # a sweep on the timer thread ends within moments
    try:
        done.start()
        done.join(GIVE_BACK_WAIT_S)
    finally:
        if guarded:
            fork_guard.release()
    if done.is_alive():
        logger.error("plan %s: the give-back did not finish within %.0f s; going on (its lease will lapse)",
                     plan_id, GIVE_BACK_WAIT_S)


def _plan_give_back(*, plan_id: int, holder: str | None, send: bool, reason: str) -> None:
    try:
        outcome = delivery.plan_lost(plan_id=plan_id, holder=holder, send=send)
        logger.warning("plan %s: its search process was lost (%s): %s", plan_id, reason,
                       outcome or "nothing to do (finished, or held by another delivery)")
    except Exception:  # the lease lapses and the sweep recovers the plan
        logger.exception("plan %s: could not give the plan back; its lease will lapse", plan_id)
    finally:
        connection.close()  # this thread's own connection


# Database hiccups (a locked SQLite file, a dropped PostgreSQL connection) are worth retrying: the service gives
# the plan back first. The engine's own failures are not (the same spec fails the same way): the service
# records them on the plan. Time limits come with each message, sized from the plan's spec.
@shared_task(bind=True, name=delivery.PLAN_RUN_TASK, Request=PlanRequest,
             autoretry_for=(OperationalError, InterfaceError), retry_backoff=True, retry_backoff_max=60, max_retries=5)
def plan_run_task(self: Task, plan_id: int) -> None:
    holder = delivery.lease_holder(hostname=self.request.hostname, pid=os.getpid(), task_id=self.request.id)
    with stop_signal_once():
        services.plan_run(plan_id=plan_id, holder=holder)


@contextlib.contextmanager
def stop_signal_once() -> Iterator[None]:
    """In a pool process, the first SIGTERM stops the search as billiard's handler does (SystemExit, the process
    on its way out), and holds every later one off: a cold shutdown may send two (`webui.celery.stop_searches_first`
    and Celery's cancel), and billiard's handler leaves the second to kill the process before
    `services.plan_run` has given the plan back. The give-back gets STOP_GIVE_BACK_S; then the process exits
    (SIGALRM), and its worker's main process takes over (`PlanRequest.on_failure`). Elsewhere (a solo or thread
    pool, a test) nothing changes: the search runs in the worker's main process, whose SIGTERM is Celery's warm
    shutdown."""
    if current_process().name == "MainProcess" or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # pending until the process exits
        # Bounded: should the give-back hang (a lock held by the code the stop interrupted), exit without it
        # rather than hold the worker's shutdown (billiard joins its pool processes without a timeout).
        signal.signal(signal.SIGALRM, lambda *_: os._exit(128 + signum))
        signal.setitimer(signal.ITIMER_REAL, STOP_GIVE_BACK_S)
        if callable(previous):
            previous(signum, frame)  # billiard's: SystemExit, with the job reported lost rather than failed
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is stop:
            signal.signal(signal.SIGTERM, previous)
