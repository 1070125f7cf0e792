"""One settings module, driven by environment variables whose defaults run on a fresh clone.

Defaults: SQLite and Celery's filesystem broker, both under var/, so `make run` needs no server.
`DATABASE_URL` switches to PostgreSQL (or any database dj-database-url knows) and `CELERY_BROKER_URL` to Redis.
`DEBUG` is on only when asked (DEBUG=1); `HTTPS=1` turns on everything `check --deploy` asks of a site served
over TLS (README, "Security").
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from kombu import Queue


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in ("1", "true", "yes", "on")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def local_secret_key(path: Path) -> str:
    """A random key made once per checkout and kept in var/, so a laptop run needs no setting and no two
    clones share a key. Several machines must share one: they set SECRET_KEY. Created atomically (link), so
    processes starting together all read the same key."""
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(secrets.token_urlsafe(50))
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)
# Under pytest the broker folder and collected static files are the tests' own, so a `make run` beside the
# tests never takes their tasks or serves their files.
_TESTING = "PYTEST_VERSION" in os.environ

DEBUG = env_bool("DEBUG")
SECRET_KEY = os.environ.get("SECRET_KEY") or local_secret_key(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

# ---------------------------------------------------------------------------------------------------------
# Security. Always on: no framing, no MIME sniffing, same-origin referrers and opener (Django's defaults, stated
# here so they are seen), HttpOnly session cookie. HTTPS=1 is for a site served over TLS, usually by a proxy
# that terminates it and sets X-Forwarded-Proto (it must overwrite a client's own): redirect plain HTTP,
# secure cookies, HSTS. A laptop run (`make run`) is plain HTTP, so none of that is on by default.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
HTTPS = env_bool("HTTPS")
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "webui",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# A form whose token went stale (a login in another tab) gets a page saying what to do, not Django's bare 403.
CSRF_FAILURE_VIEW = "webui.views.csrf_failure"

ROOT_URLCONF = "webui.urls"
WSGI_APPLICATION = "webui.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---------------------------------------------------------------------------------------------------------
# Database: SQLite under var/ unless DATABASE_URL says otherwise.
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}", conn_max_age=int(os.environ.get("CONN_MAX_AGE", "0"))
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the worker write the same file: WAL lets readers run beside a writer, IMMEDIATE
    # transactions take the write lock up front so two writers queue (up to `timeout`) instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not :memory:, so that a real worker process can see the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# ---------------------------------------------------------------------------------------------------------
# Static files: WhiteNoise serves them from STATIC_ROOT (collectstatic); plotly.js comes from the installed
# plotly package through PlotlyJSFinder, never from a CDN.
STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / ("test-static" if _TESTING else "static")))
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webui.staticfinders.PlotlyJSFinder",
]
# Content-hashed names (plan.3f2a9c.js), so WhiteNoise can tell browsers to cache them for good.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

# Request bodies: the JSON API reads them whole, and a spec is a few kilobytes.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # planner.jsonio.MAX_BYTES, the CLI's bound too
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200  # the plan form has about 100 (98 fields and its CSRF token)

# ---------------------------------------------------------------------------------------------------------
# Celery: the filesystem broker under var/ unless CELERY_BROKER_URL says otherwise. Results live in the Plan
# row, so no result backend. Tests get their own broker folder so a `make run` worker never takes their tasks.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost//")
_default_broker_dir = VAR_DIR / ("test-broker" if _TESTING else "broker")
BROKER_DIR = Path(os.environ.get("CELERY_BROKER_DIR", _default_broker_dir))
if CELERY_BROKER_URL.startswith("filesystem"):
    for _sub in ("queue", "processed", "control"):
        (BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.25,
    }
else:
    # Redis hands an unacknowledged message (its worker died) to another worker after the visibility timeout.
    # It must exceed the longest hard time limit, or a long search is delivered twice while it runs (harmless,
    # the second finds the plan leased, but wasted). The plan's lease (webui/delivery.py) recovers sooner.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_float("REDIS_VISIBILITY_TIMEOUT_S", 3600),
        "unacked_restore_interval": env_float("REDIS_RESTORE_EVERY_S", 10),
        "unacked_restore_throttle": 1,
        "socket_connect_timeout": 3,
        # A Redis that takes the connection and never answers (stalled, or half-open after a partition) held a
        # submission until gunicorn killed it: 30 s, then an HTML 500, the plan saved all the same. The worker's
        # own polls wait 1 s (kombu's BRPOP timeout), well inside this.
        "socket_timeout": env_float("BROKER_SOCKET_TIMEOUT_S", 2),
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker that is down must not hold a submission for long: the plan is saved and the outbox sends it later.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
# After a send the broker refused (or did not answer), the rest of the request's sends, and a worker's sweeps for
# this long, go straight to the outbox without trying: a 256-scenario sweep posted while the broker was down waited
# 0.2 s on each, past gunicorn's timeout. The outbox sends them once the broker is back (webui/delivery.py).
BROKER_BACKOFF_S = env_float("BROKER_BACKOFF_S", 5)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a worker that dies mid-search leaves the message for another
# A pool process that dies mid-search (the OOM killer): its worker's main process gives the plan back and sends
# it again (webui/tasks.py), so the lost message is acknowledged, not requeued (a second copy would only find the
# plan taken, and how a requeued message comes back differs between brokers and Celery versions).
CELERY_TASK_REJECT_ON_WORKER_LOST = False
# How long the main process waits for a dead pool process's last words before it declares the task lost
# (billiard's default is 10 s). Results live in the Plan row, never in that pipe, so there is nothing to wait for.
CELERY_WORKER_LOST_WAIT = 1.0
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# prefork, whose pool processes hold no lock between searches (webui/pool.py): with the embedded broker, a pool
# process killed while idle stopped every later search.
CELERY_WORKER_POOL = "webui.pool:TaskPool"
# Two queues, which every worker consumes in turn (Kombu's round-robin over a worker's queues, filesystem and
# Redis alike): plans asked for one by one, and the scenarios of sweeps (webui/delivery.py `plan_queue`). A
# 1,024-scenario sweep then holds a plan asked for after it behind one scenario, not behind all of them.
CELERY_TASK_DEFAULT_QUEUE = "celery"
SWEEP_QUEUE = "sweeps"
CELERY_TASK_QUEUES = (Queue(CELERY_TASK_DEFAULT_QUEUE), Queue(SWEEP_QUEUE))
# A search that outlives a lost broker connection still stores its answer; the message comes back and is a no-op.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Sweeps: how many scenarios of one client's sweeps may wait or run at once (two sweeps of the largest size), and
# the request header that names the client where a proxy stands in front (e.g. X-Real-IP, which the proxy must set
# itself); without one, the connection's address (REMOTE_ADDR).
SWEEP_MAX_PENDING_PER_CLIENT = int(os.environ.get("SWEEP_MAX_PENDING_PER_CLIENT", "2048"))
CLIENT_ADDRESS_HEADER = os.environ.get("CLIENT_ADDRESS_HEADER", "")

# Plans: time limits sized from the spec (webui/delivery.py: plan_time_limits), leases, recovery.
# A search costs a few microseconds per layout on a 2024 server (planner.estimate_layouts is an upper bound
# on the layouts); PLAN_TIME_PER_LAYOUT_US allows ~20x that for a slow or busy machine.
PLAN_TIME_LIMIT_S = env_float("PLAN_TIME_LIMIT_S", 120)  # the most any search may take (soft limit)
PLAN_TIME_BASE_S = env_float("PLAN_TIME_BASE_S", 10)
PLAN_TIME_PER_LAYOUT_US = env_float("PLAN_TIME_PER_LAYOUT_US", 100)
PLAN_TIME_GRACE_S = env_float("PLAN_TIME_GRACE_S", 10)  # soft -> hard limit -> end of the lease
PLAN_MAX_ATTEMPTS = int(os.environ.get("PLAN_MAX_ATTEMPTS", "3"))  # searches interrupted (worker lost) before failing
PLAN_RECOVER_EVERY_S = env_float("PLAN_RECOVER_EVERY_S", 10)  # each worker's outbox and lease sweep
# A worker's search holds its plan for this long at a time, and the worker's main process renews the lease at each
# sweep while the search runs (never past the hard time limit and its grace): a worker that dies stops renewing,
# and its plan is back in the queue within about PLAN_LEASE_S + PLAN_RECOVER_EVERY_S, not only once the hard time
# limit has passed (up to 2.5 minutes). Room for two missed sweeps at least.
PLAN_LEASE_S = max(env_float("PLAN_LEASE_S", 30), 3 * PLAN_RECOVER_EVERY_S)
# Sent, never started, and missing from its broker queue (the broker lost it, or a worker killed whole had taken it
# before claiming it): sent again. As soon as a lapsed lease is back: a taken message waited 2 minutes.
PLAN_RESEND_AFTER_S = env_float("PLAN_RESEND_AFTER_S", 45)
PLAN_MEMORY_LIMIT_MB = int(os.environ.get("PLAN_MEMORY_LIMIT_MB", "4096"))  # address space of a search process
# Defaults for a task sent without its own limits (by hand, say); plans always carry their own.
CELERY_TASK_SOFT_TIME_LIMIT = PLAN_TIME_LIMIT_S
CELERY_TASK_TIME_LIMIT = PLAN_TIME_LIMIT_S + PLAN_TIME_GRACE_S
CELERY_WORKER_MAX_MEMORY_PER_CHILD = PLAN_MEMORY_LIMIT_MB * 1024 // 2  # KiB resident: replace a bloated process

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
