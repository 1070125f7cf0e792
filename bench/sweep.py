"""Sweep throughput: scenarios per second with 1 and with 2 Celery workers, on the stack `make run` starts.

Each run gets a fresh var/ folder (SQLite database, filesystem broker), so no scenario reuses an answer from
an earlier run: gunicorn, and N workers (concurrency 1, nice 10, as `make run`). It posts one sweep to
POST /api/sweeps, polls GET /api/sweeps/<code> until every scenario is done, and prints the time from the
POST to the last scenario's answer (the server's created_at -> the last plan's finished_at) and scenarios/s.

The default sweep is the issue's target: Llama 3 70B on 256 to 8,192 H100s (6 counts) × 2 fabrics (NDR
InfiniBand fat tree, RoCEv2) × BF16/FP8 = 24 scenarios; target: done within 60 s on the single worker of
`make run`. Timings vary with the machine's other load: --repeat runs each case several times and prints the
best and every run.

Run:    .venv/bin/python bench/sweep.py            (options: --help)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.web.procs import WebServer, WorkerProcess  # noqa: E402

SWEEP: dict[str, Any] = {
    "base": {"model": "Llama 3 70B", "training": {"global_batch": 1024},
             "cluster": {"gpu": "H100 SXM5 80GB", "node": "DGX H100"}},
    "vary": {"cluster.num_gpus": [256, 512, 1024, 2048, 4096, 8192],
             "cluster.fabric": ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"],
             "training.precision": ["bf16", "fp8"]},
    "goal": {"tokens": 15e12, "deadline_days": 90},
}


def one_run(workers: int, timeout: float) -> dict[str, Any]:
    """A fresh var/ folder, gunicorn and `workers` Celery workers; one sweep from POST to its last answer."""
    var = Path(tempfile.mkdtemp(prefix="planner-sweep-"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_VERSION", "DEBUG", "DATABASE_URL", "CELERY_BROKER_URL", "CELERY_BROKER_DIR")}
    env.update({"VAR_DIR": str(var), "LOG_LEVEL": "WARNING", "STATIC_ROOT": str(var / "static")})
    started: list[Any] = []
    try:
        for args in (("migrate", "--noinput"), ("catalog", "seed"), ("collectstatic", "--noinput")):
            subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)
        web = WebServer(env)
        started.append(web)
        pool = [WorkerProcess(env, name=f"sweep{i}", nice=10) for i in range(workers)]
        started.extend(pool)
        web.wait_ready()
        for worker in pool:
            worker.wait_ready()
        began = time.monotonic()
        status, created = web.post_json("/api/sweeps", SWEEP, timeout=60)
        if status != 201:
            raise RuntimeError(f"the sweep was refused: {status} {created}")
        body = created
        while time.monotonic() - began < timeout:
            status, body = web.get_json(f"/api/sweeps/{created['code']}")
            if body.get("status") == "done":
                break
            time.sleep(0.2)
        return {"workers": workers, **summary(body, env, began)}
    finally:
        for process in reversed(started):
            process.stop()
        shutil.rmtree(var, ignore_errors=True)


def summary(body: dict[str, Any], env: dict[str, str], began: float) -> dict[str, Any]:
    """Scenarios done, and the server's own times: the sweep's created_at to its last plan's finished_at."""
    code = ("import json, django; django.setup(); from webui.models import Sweep; "
            f"s = Sweep.objects.get(code='{body['code']}'); "
            "ends = [x.plan.finished_at for x in s.scenarios.select_related('plan') if x.plan.finished_at]; "
            "print(json.dumps([s.created_at.isoformat(), max(ends).isoformat() if ends else None]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**env, "DJANGO_SETTINGS_MODULE": "webui.settings"})
    created, last = (datetime.fromisoformat(t) if t else None for t in json.loads(out.stdout))
    done = sum(row["status"] == "done" for row in body["scenarios"])
    seconds = (last - created).total_seconds() if last else float("nan")
    best = body.get("best") or {}
    return {"total": body["total"], "done": done, "seconds": seconds, "per_s": done / seconds if last else 0.0,
            "wall_s": time.monotonic() - began, "best": best.get("values")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--repeat", type=int, default=1, help="runs per worker count (the best is reported)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for one sweep")
    args = parser.parse_args()
    total = 1
    for values in SWEEP["vary"].values():
        total *= len(values)
    print(f"sweep: {SWEEP['base']['model']}, {total} scenarios ({' × '.join(SWEEP['vary'])}); gunicorn, SQLite, "
          f"filesystem broker, workers at concurrency 1, nice 10; {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}", flush=True)
    worst = 0
    for workers in args.workers:
        runs = [one_run(workers, args.timeout) for _ in range(args.repeat)]
        for run in runs:
            print(f"  {workers} worker(s): {run['done']}/{run['total']} done in {run['seconds']:.1f} s "
                  f"({run['per_s']:.2f} scenarios/s; {run['wall_s']:.1f} s from POST to the page saying done)",
                  flush=True)
        fastest = max(runs, key=lambda r: r["per_s"])
        print(f"{workers} worker(s): best {fastest['per_s']:.2f} scenarios/s, {fastest['seconds']:.1f} s for "
              f"{fastest['total']} scenarios; best scenario for the goal: {fastest['best']}", flush=True)
        worst = max(worst, sum(r["done"] != r["total"] for r in runs))
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
