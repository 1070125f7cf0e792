# Two commands for a new machine with Python 3.11:  make run  |  make test
# Everything else here is what those two need.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8000
HOST   ?= 127.0.0.1
WORKERS ?= 2
VAR_DIR ?= var

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
# plans the broker missed and recovers searches whose worker died (webui/celery.py), both started and stopped
# by webui/serve.py. Ctrl-C (or SIGTERM to make) stops both within seconds, even mid-search; a search cut off
# goes back to the queue.
run: setup
	@$(PY) -m webui.serve --host $(HOST) --port $(PORT) --workers $(WORKERS) --worker-log $(VAR_DIR)/worker.log

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf var/static var/test-static var/broker var/test-broker var/*.sqlite3*

# The engine measured against the published runs (planner/data/validation.json): the /validation/ page and every
# plan's "how far to trust the step time" read it. 1-2 minutes (the unpinned search runs on every row).
validation: venv
	$(PY) -m planner validate --json --search > planner/data/validation.json.tmp
	mv planner/data/validation.json.tmp planner/data/validation.json
