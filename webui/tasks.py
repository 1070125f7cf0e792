"""Celery tasks: thin, like views. Take a plan id, call a service; the service records the outcome."""
from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import services


# Database hiccups (a locked SQLite file, a dropped PostgreSQL connection) are worth retrying; the engine's
# own failures are not (the same spec fails the same way) and the service records them on the plan.
@shared_task(name="webui.plan_run", autoretry_for=(OperationalError, InterfaceError), retry_backoff=True,
             max_retries=3)
def plan_run_task(plan_id: int) -> None:
    services.plan_run(plan_id=plan_id)
