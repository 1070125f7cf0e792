"""WSGI entry point for gunicorn (`gunicorn webui.wsgi`)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")

application = get_wsgi_application()

# Every submission sizes its time limit with planner.estimate_layouts, whose module brings numpy: load it now,
# with the server, rather than in the first request each web worker answers.
import planner.search  # noqa: E402,F401
