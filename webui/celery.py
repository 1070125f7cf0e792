"""Celery wiring, as cookiecutter-django does it: settings come from Django's, under the CELERY_ prefix.

Two additions for #4, both in every worker so that no extra process is needed:
- each pool process caps its address space (PLAN_MEMORY_LIMIT_MB), so a search that would exhaust the machine
  fails with MemoryError instead;
- a timer runs `delivery.plans_recover` every PLAN_RECOVER_EVERY_S (and once soon after start): lapsed leases
  back to the queue, the outbox sent. It talks to the database and the broker directly, so it works while
  messages are being lost, and any number of workers may run it at once.
"""
from __future__ import annotations

import logging
import os
import resource
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

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


def recover_plans() -> None:
    from celery.worker import state
    from django.db import connection

    from webui import delivery

    if state.should_stop or state.should_terminate:
        return  # a worker on its way out must not send itself plans it would drop

    try:
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
