"""The placement planner's web app: Django project and app in one package.

The Celery app is imported here so that `@shared_task` binds to it whenever Django starts (cookiecutter-django).
"""
from .celery import app as celery_app

__all__ = ["celery_app"]
