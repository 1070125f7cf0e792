"""Load: many planners submitting at once, on the production stack.

Starts gunicorn (WEB_WORKERS processes), 2 Celery workers, a private redis-server and a dedicated PostgreSQL
database (`planner_load`, created and dropped here), then 25 client threads post 500 specs to POST /api/plans
(a mix: each distinct spec asked several times, as a team does) and poll GET /api/plans/<code> until every
plan is done or failed. Prints submitted / completed / lost, p50 and p95 of the submit latency (client side)
and of the time to done (the server's created_at -> finished_at), and stops everything it started.

Run:    .venv/bin/python bench/load.py            (options: --help)
Needs:  PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres) or POSTGRES_URL; redis-server on PATH.
Target (issue #4): 0 lost, p95 submit latency under 200 ms.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.web.procs import RedisServer, WebServer, WorkerProcess  # noqa: E402

MODELS = ["Llama 3 8B", "Llama 3 70B", "Mixtral 8x7B", "GPT-3 175B", "Llama 3.1 405B"]
GPUS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
BATCHES = [512, 1024, 2048, 4096]
HARDWARE = {"gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand rail-optimized (DGX SuperPOD)"}


def specs(plans: int, distinct: int, seed: int) -> list[dict[str, Any]]:
    """`plans` specs drawn from `distinct` different ones (catalog names, as the form sends them), shuffled."""
    pool = [{"model": {"name": model}, "training": {"global_batch": batch, "precision": "bf16", "tokens": 1e12},
             "cluster": {"num_gpus": gpus, **HARDWARE}}
            for model, gpus, batch in itertools.product(MODELS, GPUS, BATCHES)]
    rng = random.Random(seed)
    chosen = rng.sample(pool, min(distinct, len(pool)))
    picks = [chosen[i % len(chosen)] for i in range(plans)]
    rng.shuffle(picks)
    return picks


def model_rows(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Model presets as full sections (the API takes catalog names for hardware only)."""
    code = ("import json, django; django.setup(); from webui import services; "
            "print(json.dumps(services.catalog_as_dict()['model']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**env, "DJANGO_SETTINGS_MODULE": "webui.settings"})
    return json.loads(out.stdout)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class Client(threading.Thread):
    """One planner: submits its share back to back, then polls its plans until each is done or failed."""

    def __init__(self, web: WebServer, jobs: queue.Queue, deadline: float, poll_s: float) -> None:
        super().__init__(daemon=True)
        self.web, self.jobs, self.deadline, self.poll_s = web, jobs, deadline, poll_s
        self.submitted_at = 0.0
        self.latencies: list[float] = []
        self.refused: list[str] = []
        self.pending: list[str] = []
        self.finished: dict[str, dict[str, Any]] = {}

    def run(self) -> None:
        while True:
            try:
                spec = self.jobs.get_nowait()
            except queue.Empty:
                break
            started = time.perf_counter()
            try:
                status, body = self.web.post_json("/api/plans", spec)
            except OSError as err:
                self.refused.append(f"{type(err).__name__}: {err}")
                continue
            self.latencies.append(time.perf_counter() - started)
            if status == 201:
                self.pending.append(body["code"])
            else:
                self.refused.append(f"{status}: {body}")
        self.submitted_at = time.monotonic()
        while self.pending and time.monotonic() < self.deadline:
            for code in list(self.pending):
                try:
                    status, body = self.web.get_json(f"/api/plans/{code}")
                except OSError:
                    continue
                if status == 200 and body["status"] in ("done", "failed"):
                    self.finished[code] = body
                    self.pending.remove(code)
            if self.pending:
                time.sleep(self.poll_s)


def create_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=500)
    parser.add_argument("--clients", type=int, default=25)
    parser.add_argument("--distinct", type=int, default=150, help="different specs among the plans")
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--celery-workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for every plan")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between a client's rounds of status polls")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness of the Celery workers (README: on a machine shared with the web server, "
                             "searches run at a lower priority than requests); 0 for none")
    args = parser.parse_args()

    postgres = os.environ.get("POSTGRES_URL", "postgres://postgres@127.0.0.1:5432")
    database = "planner_load"
    tmp = Path(tempfile.mkdtemp(prefix="planner-load-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "DEBUG")}
    redis = RedisServer(tmp)
    env.update({"DATABASE_URL": f"{postgres}/{database}", "CELERY_BROKER_URL": redis.url, "CONN_MAX_AGE": "60",
                "LOG_LEVEL": "WARNING", "VAR_DIR": str(tmp)})
    started: list[Any] = []
    try:
        create_database(f"{postgres}/postgres", database)
        redis.start()
        started.append(redis)
        manage(env, "migrate", "--noinput")
        manage(env, "catalog", "seed")
        models = model_rows(env)
        web = WebServer(env, workers=args.web_workers, extra=("--backlog", "256"))
        started.append(web)
        workers = [WorkerProcess(env, name=f"load{i}", nice=args.nice) for i in range(args.celery_workers)]
        started.extend(workers)
        web.wait_ready()
        for worker in workers:
            worker.wait_ready()

        jobs: queue.Queue = queue.Queue()
        for spec in specs(args.plans, args.distinct, args.seed):
            jobs.put({**spec, "model": models[spec["model"]["name"]]})
        print(f"load: {args.plans} plans ({args.distinct} distinct specs) from {args.clients} clients; gunicorn "
              f"x{args.web_workers}, {args.celery_workers} Celery workers (nice {args.nice}), Redis, PostgreSQL; "
              f"{os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}", flush=True)
        began = time.monotonic()
        clients = [Client(web, jobs, began + args.timeout, args.poll) for _ in range(args.clients)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        report(clients, began, args.plans, workers)
        lost = sum(len(c.pending) for c in clients) + sum(len(c.refused) for c in clients)
        return 1 if lost else 0
    finally:
        for process in reversed(started):
            process.stop()
        try:
            drop_database(f"{postgres}/postgres", database)
        except psycopg.Error as err:
            print(f"could not drop {database}: {err}", file=sys.stderr)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def report(clients: list[Client], began: float, asked: int, workers: list[WorkerProcess]) -> None:
    wall = time.monotonic() - began
    submitting = max(c.submitted_at for c in clients) - began
    latencies = [s for c in clients for s in c.latencies]
    finished = {code: body for c in clients for code, body in c.finished.items()}
    refused = [r for c in clients for r in c.refused]
    pending = [code for c in clients for code in c.pending]
    done = [b for b in finished.values() if b["status"] == "done"]
    failed = [b for b in finished.values() if b["status"] == "failed"]
    to_done = [(parse(b["finished_at"]) - parse(b["created_at"])).total_seconds() for b in finished.values()]
    at_submit = sum(1 for b in done if "reused_from" in b and b["attempts"] == 0)
    at_claim = sum(1 for b in done if "reused_from" in b and b["attempts"] > 0)
    searched = sum(1 for b in finished.values() if "reused_from" not in b)
    print(f"submitted {asked - len(refused)}  completed {len(finished)} (done {len(done)}, failed {len(failed)})  "
          f"lost {len(pending) + len(refused)}")
    print(f"answers: searched {searched}, reused at submission {at_submit}, reused when a worker took it "
          f"{at_claim}")
    if latencies:
        print(f"submit latency: p50 {percentile(latencies, 50) * 1e3:.0f} ms  "
              f"p95 {percentile(latencies, 95) * 1e3:.0f} ms  max {max(latencies) * 1e3:.0f} ms")
    if to_done:
        print(f"time to done:   p50 {percentile(to_done, 50):.2f} s  p95 {percentile(to_done, 95):.2f} s  "
              f"max {max(to_done):.2f} s")
    print(f"wall: submissions took {submitting:.1f} s ({len(latencies) / submitting:.0f}/s), every plan finished "
          f"after {wall:.1f} s")
    for problem in (refused + [f"never finished: {code}" for code in pending])[:10]:
        print("  ", problem)
    for worker in workers:
        errors = [line for line in worker.lines if " ERROR " in line or "Traceback" in line]
        for line in errors[:5]:
            print(f"   {worker.name}: {line}")


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


if __name__ == "__main__":
    sys.exit(main())
