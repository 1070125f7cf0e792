"""Celery wiring, as cookiecutter-django does it: settings come from Django's, under the CELERY_ prefix."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

app = Celery("webui")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["webui"])
