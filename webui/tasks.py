"""Celery tasks: thin, like views. Take a plan id, call a service; the service records the outcome.

Delivery is at least once (late acknowledgement, a lost worker's message goes back to the queue, the outbox
may send a plan twice); `services.plan_run` makes it exactly once by claiming the plan with a lease.
"""
from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import services


# Database hiccups (a locked SQLite file, a dropped PostgreSQL connection) are worth retrying: the service gives
# the plan back first. The engine's own failures are not (the same spec fails the same way): the service
# records them on the plan. Time limits come with each message, sized from the plan's spec.
@shared_task(name="webui.plan_run", autoretry_for=(OperationalError, InterfaceError), retry_backoff=True,
             retry_backoff_max=60, max_retries=5)
def plan_run_task(plan_id: int) -> None:
    services.plan_run(plan_id=plan_id)
