"""Celery wiring, as cookiecutter-django does it: settings come from Django's, under the CELERY_ prefix.

Three additions, in every worker so that no extra process is needed (and, in every process, the embedded
broker's safer transport, webui/broker.py):
- each pool process caps its address space (PLAN_MEMORY_LIMIT_MB), so a search that would exhaust the machine
  fails with MemoryError instead;
- a timer runs `delivery.plans_recover` every PLAN_RECOVER_EVERY_S (and once soon after start): the leases of the
  searches in hand renewed (`delivery.leases_renew`), lapsed leases back to the queue, the outbox sent. It talks
  to the database and the broker directly, so it works while messages are being lost, and any number of workers
  may run it at once;
- a cold shutdown (SIGQUIT, what `make run` sends on Ctrl-C) stops every search in hand at once
  (`stop_searches_first`), and each gives its plan back to the queue on its way out.
"""
from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import sys
import threading
from types import FrameType
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_init, worker_process_init, worker_ready

from . import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

# filesystem:// (the embedded broker) writes and reads whole messages only (webui/broker.py).
broker.install()

app = Celery("webui")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["webui"])

logger = logging.getLogger(__name__)


@worker_process_init.connect
def limit_search_memory(**kwargs: Any) -> None:
    from django.conf import settings

    # One search per pool process: BLAS threads would only oversubscribe the cores, and each reserves address
    # space under the cap. numpy is first imported by the first search, after this.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    limit = settings.PLAN_MEMORY_LIMIT_MB * 2**20
    if limit > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


# Held in the worker's main process around each database sweep, and around each give-back that runs on a thread
# of its own (by its caller, `tasks.plan_give_back`), and taken around every fork (`prepare_for_forks`). A process
# forked while another thread is inside SQLite (or an import) inherits that thread's locks held for good, and its
# own first query waits on them forever: seen with the embedded broker, whose timer runs the sweep on a thread of
# its own while billiard starts a pool process. An RLock: with Redis the sweep runs on the thread that forks, and
# a cold shutdown's give-back may run inside a signal handler that struck in the middle of a sweep.
fork_guard = threading.RLock()


@worker_init.connect
def prepare_for_forks(**kwargs: Any) -> None:
    """In the worker's main process, before it starts a thread or a pool process: forks wait for `fork_guard`;
    and the SQL compiler, which Django imports on a connection's first query, is imported now."""
    from django.db import connections

    os.register_at_fork(before=fork_guard.acquire, after_in_parent=fork_guard.release,
                        after_in_child=fork_guard.release)
    for alias in connections:
        with contextlib.suppress(Exception):  # a backend that will not load fails the sweep, with its message
            connections[alias].ops.compiler("SQLCompiler")


@worker_ready.connect
def stop_searches_first(sender: Any, **kwargs: Any) -> None:
    """Make the worker's cold shutdown (SIGQUIT) stop every search in hand at once, each giving its plan back.

    Celery's cold shutdown cancels only the searches whose start the main process has registered
    (Request.cancel skips a request without `time_start`, set when the main process reads the pool's
    acknowledgement), then waits for the pool inside its signal handler: a search begun a moment before the
    signal ran on to its end, or to `make run`'s deadline. So the SIGQUIT handler Celery installed is wrapped, once
    the worker is ready: first note the shutdown (`tasks.searches_stopping`, so that the main process does not
    send a stopped plan again), then SIGTERM every pool process, which billiard raises as SystemExit inside the
    search and `services.plan_run` answers by giving the plan back (`delivery.plan_stopped`), then Celery's
    handler as before. A process Celery cancels too gets a second SIGTERM, which the task holds off until its
    plan is back (`tasks.stop_signal_once`). The sender is the worker's consumer, in the main process."""
    from webui.tasks import searches_stopping

    celery_handler = signal.getsignal(signal.SIGQUIT)
    pool = getattr(sender, "pool", None)
    if not callable(celery_handler) or pool is None or getattr(celery_handler, "stops_searches_first", False):
        return  # no handler to wrap, or already wrapped (the consumer is ready again after a broker reconnect)

    def cold_shutdown(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGQUIT, celery_handler)  # once; Celery installs its next handler itself
        searches_stopping.set()
        pids: list[int] = []
        with contextlib.suppress(AttributeError, TypeError):  # a pool that is not of processes: nothing to stop
            pids = list(pool.info.get("processes", ()))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        # Said the way Celery's own handlers speak (print, not logging, inside a signal handler); no stdout, no word.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            print(f"worker: cold shutdown: stopping the searches in pool processes {pids}", file=sys.__stdout__,
                  flush=True)
        celery_handler(signum, frame)

    cold_shutdown.stops_searches_first = True  # type: ignore[attr-defined]
    with contextlib.suppress(ValueError):  # not the main thread: leave Celery's handler alone
        signal.signal(signal.SIGQUIT, cold_shutdown)


def recover_plans() -> None:
    """The worker's sweep: renew the leases of the searches in hand (a worker on its way out too, while it waits
    for them), then `delivery.plans_recover`."""
    from celery.worker import state
    from django.db import connection

    from webui import delivery

    # The pool process's own lease name (tasks.plan_run), known here once the pool has said it started the task.
    holders = [delivery.lease_holder(hostname=r.hostname, pid=r.worker_pid, task_id=r.id)
               for r in list(state.active_requests) if getattr(r, "worker_pid", None)]
    with fork_guard:
        try:
            delivery.leases_renew(holders=holders)
            if not (state.should_stop or state.should_terminate):  # one on its way out sends itself no plans
                delivery.plans_recover()
        except Exception:  # a sweep that fails (database away) must not stop the timer: the next one tries again
            logger.exception("plans_recover failed; trying again in the next sweep")
        finally:
            connection.close()  # the sweep runs in the worker's main process: hold no connection between sweeps


class PlanRecovery(bootsteps.StartStopStep):
    """Runs `recover_plans` on the worker's own timer."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.timers: list[Any] = []

    def start(self, worker: Any) -> None:
        from django.conf import settings

        self.timers = [worker.timer.call_after(1.0, recover_plans),
                       worker.timer.call_repeatedly(settings.PLAN_RECOVER_EVERY_S, recover_plans)]

    def stop(self, worker: Any) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers = []


app.steps["worker"].add(PlanRecovery)
