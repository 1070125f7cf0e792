# Two commands for a new machine with Python 3.11:  make run  |  make test
# Everything else here is what those two need.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
HOST   ?= 127.0.0.1
WORKERS ?= 2

.PHONY: run test setup venv migrate static clean validation

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

migrate: venv
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py catalog seed

static: venv
	$(PY) manage.py collectstatic --noinput -v 0

setup: migrate static

# The web server (gunicorn + WhiteNoise, content-hashed static files) and one Celery worker, which also sends
# plans the broker missed and recovers searches whose worker died (webui/celery.py). Searches run at a lower
# CPU priority than page requests, so the pages stay quick while a search runs. Ctrl-C stops both.
run: setup
	@nice -n 10 $(VENV)/bin/celery -A webui worker --concurrency 1 --loglevel info \
		--without-mingle --without-gossip --without-heartbeat > var/worker.log 2>&1 & \
	worker=$$!; trap 'kill $$worker 2>/dev/null; wait $$worker 2>/dev/null' EXIT INT TERM; \
	echo ""; echo "  The placement planner is running at http://$(HOST):$(PORT)/"; \
	echo "  (worker log: var/worker.log; stop with Ctrl-C)"; echo ""; \
	$(VENV)/bin/gunicorn webui.wsgi --bind $(HOST):$(PORT) --workers $(WORKERS) --access-logfile -

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf var/static var/test-static var/broker var/test-broker var/*.sqlite3*

# The engine measured against the published runs (planner/data/validation.json): the /validation/ page and every
# plan's "how far to trust the step time" read it. 1-2 minutes (the unpinned search runs on every row).
validation: venv
	$(PY) -m planner validate --json --search > planner/data/validation.json.tmp
	mv planner/data/validation.json.tmp planner/data/validation.json
