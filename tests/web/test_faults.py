"""Faults a shared planning service meets, with real processes throughout (tests/web/procs.py): gunicorn takes
the submission over HTTP and `celery worker` runs the search, over the test database (SQLite, or PostgreSQL
when DATABASE_URL says so) and a private broker: a redis-server of the test's own (so that it may be stopped),
or a filesystem broker folder, which cannot redeliver at all, so only the Plan's lease and outbox bring a lost
search back.
"""
from __future__ import annotations

import contextlib
import copy
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from django.utils import timezone

from webui.models import Plan

from .conftest import SMALL_SPEC, require, wait_for_status
from .procs import Process, RedisServer, WebClient, WebServer, WorkerProcess, free_port

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# The longest search the spec allows (about 0.5-0.8 s: 1,048,576 GPUs, the largest batch), so that a kill
# lands in the middle of it.
BIG_SPEC: dict[str, Any] = copy.deepcopy(SMALL_SPEC)
BIG_SPEC["cluster"]["num_gpus"] = 1_048_576
BIG_SPEC["training"]["global_batch"] = 16_777_216

# Short limits so that a lost search comes back within seconds. The big spec's ~190,000 layouts (an upper
# bound) give a soft limit of 4 s + 10 us each = 5.9 s, a hard one of 6.9 s, a lease of 7.9 s. Redis hands an
# unacknowledged message out again after 3 s, well before the lease lapses: that delivery must do nothing.
FAULT_ENV = {"PLAN_TIME_BASE_S": "4", "PLAN_TIME_PER_LAYOUT_US": "10", "PLAN_TIME_GRACE_S": "1",
             "PLAN_RECOVER_EVERY_S": "0.5", "PLAN_RESEND_AFTER_S": "3",
             "REDIS_VISIBILITY_TIMEOUT_S": "3", "REDIS_RESTORE_EVERY_S": "1"}


@pytest.fixture
def spawn() -> Iterator[Callable[[Process], Any]]:
    """Start processes for one test; all are stopped at its end, before the database is flushed."""
    started: list[Process] = []

    def start(process: Process) -> Any:
        started.append(process)
        return process.wait_ready()

    yield start
    for process in reversed(started):
        process.stop()


def outputs(*processes: Process) -> str:
    return "\n".join(p.output() for p in processes)


@pytest.fixture
def redis(tmp_path) -> Iterator[RedisServer]:
    require(RedisServer.available(), "no redis-server on PATH (apt-get install -y redis-server)")
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(params=["filesystem", "redis"])
def broker_env(request, service_env, tmp_path) -> dict[str, str]:
    """The environment of every process in a fault test: its own broker, the short limits above."""
    if request.param == "redis":
        url = request.getfixturevalue("redis").url
        return {**service_env, **FAULT_ENV, "CELERY_BROKER_URL": url}
    return {**service_env, **FAULT_ENV, "CELERY_BROKER_URL": "filesystem://localhost//",
            "CELERY_BROKER_DIR": str(tmp_path / "broker")}


def submit(web: WebClient, spec: dict[str, Any]) -> Plan:
    status, body = web.post_json("/api/plans", spec)
    assert status == 201, body
    return Plan.objects.get(code=body["code"])


def test_a_plan_whose_worker_is_killed_mid_search_completes_once_on_another_worker(seeded, broker_env, spawn):
    web = spawn(WebServer(broker_env))
    first = spawn(WorkerProcess(broker_env, name="first"))
    plan = submit(web, BIG_SPEC)
    wait_for_status(plan, ("running", "done", "failed"), timeout=60, every=0.01)
    first.kill()  # SIGKILL to the worker and its pool: nothing acknowledges, nothing cleans up
    plan.refresh_from_db()
    assert plan.status == "running" and plan.attempts == 1, f"the kill must land mid-search\n{outputs(first)}"
    assert plan.lease_token is not None and plan.result is None

    second = spawn(WorkerProcess(broker_env, name="second"))
    wait_for_status(plan, ("done", "failed"), timeout=60)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(second, web)}"
    time.sleep(2)  # long enough for any late duplicate delivery (Redis restores after 3 s) to arrive and do nothing
    plan.refresh_from_db()
    assert plan.attempts == 2, outputs(second)  # the killed search, then exactly one more
    assert plan.result["plans"][0]["step_time_s"] > 0 and plan.error == ""
    assert plan.lease_token is None and plan.started_at <= plan.finished_at
    assert Plan.objects.count() == 1
    if broker_env["CELERY_BROKER_URL"].startswith("redis"):
        # Redis handed the killed worker's message out again; that delivery found the plan leased or done.
        assert second.count("this delivery has nothing to do") >= 1, outputs(second)


def test_a_plan_submitted_while_redis_is_down_waits_and_completes_when_it_is_back(seeded, redis, service_env, spawn):
    env = {**service_env, **FAULT_ENV, "CELERY_BROKER_URL": redis.url}
    web = spawn(WebServer(env))
    worker = spawn(WorkerProcess(env))
    redis.stop()

    started = time.monotonic()
    plan = submit(web, SMALL_SPEC)
    assert time.monotonic() - started < 5  # the broker's absence costs a moment, not a hung request
    assert plan.status == "queued" and plan.dispatched_at is None
    status, shown = web.get_json(f"/api/plans/{plan.code}")
    assert status == 200 and shown["status"] == "queued" and shown["waiting_for_broker"] is True
    assert "waiting for the task queue" in web.get_text(f"/plans/{plan.code}/")
    time.sleep(2)  # several sweeps try to send it meanwhile, and fail
    plan.refresh_from_db()
    assert (plan.status, plan.dispatched_at, plan.attempts) == ("queued", None, 0)

    redis.start()  # same port, empty
    wait_for_status(plan, ("done", "failed"), timeout=90)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(worker, web)}"
    assert plan.attempts == 1 and plan.dispatched_at is not None
    assert web.get_json(f"/api/plans/{plan.code}")[1]["result"]["plans"][0]["step_time_s"] > 0
    # The web server's own connection comes back too: the next plan goes straight out.
    second = submit(web, {**SMALL_SPEC, "training": {**SMALL_SPEC["training"], "global_batch": 512}})
    assert second.dispatched_at is not None
    wait_for_status(second, ("done", "failed"), timeout=60)
    assert second.status == "done", outputs(worker, web)


def test_a_plan_whose_message_a_redis_restart_lost_is_sent_again(seeded, redis, service_env, spawn):
    env = {**service_env, **FAULT_ENV, "CELERY_BROKER_URL": redis.url}
    web = spawn(WebServer(env))
    plan = submit(web, SMALL_SPEC)  # no worker yet: the message waits in Redis
    assert plan.dispatched_at is not None
    redis.stop()
    redis.start()  # keeps nothing on disk: the message is gone, the plan row is not
    worker = spawn(WorkerProcess(env))
    wait_for_status(plan, ("done", "failed"), timeout=60)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(worker, web)}"
    assert plan.attempts == 1


@pytest.mark.parametrize("broker_env", ["filesystem"], indirect=True)
def test_a_torn_message_file_does_not_stop_the_worker(seeded, broker_env, spawn):
    """A message file cut off mid-write (its writer, a worker sending a plan again, was killed; webui/broker.py)
    lies first in the embedded broker's queue. Kombu's own transport raised its JSON error out of the consumer and
    Celery stopped the worker ("Unrecoverable error: JSONDecodeError"), so no plan ran again; the worker now skips
    it, says so, and runs the plan."""
    queue = Path(broker_env["CELERY_BROKER_DIR"]) / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    (queue / "0000000001_torn.celery.msg").write_bytes(b'{"body": "eyJ')
    web = spawn(WebServer(broker_env))
    worker = spawn(WorkerProcess(broker_env))
    plan = submit(web, SMALL_SPEC)
    wait_for_status(plan, ("done", "failed"), timeout=60)
    assert plan.status == "done", outputs(worker)
    assert "skipped a message on celery that does not parse" in worker.output()
    assert "Unrecoverable error" not in worker.output()
    assert not (queue / "0000000001_torn.celery.msg").exists()


# A DeepSeek-V3-shaped MoE on 322,560 H800s (2^10 x 9 x 5 x 7: 132 divisors, so many TP x PP x CP x DP splits) with
# a global batch of four sequences per GPU: the longest search within the bounds that we found, 2.5-3 s on one core
# (262,144 GPUs, a power of two, searches in 0.4 s since the search got faster), so that a kill lands in the middle
# of it. Time limits stay long here (PLAN_TIME_BASE_S below): the lease outlasts the test, so a plan that comes
# back does so because the worker noticed, not because the lease lapsed.
MOE_SPEC: dict[str, Any] = {
    "model": {"name": "DeepSeek-V3 shape", "layers": 61, "hidden": 7168, "heads": 128, "ffn_hidden": 18432,
              "gated_mlp": True, "vocab": 129280, "seq_len": 4096, "experts": 256, "top_k": 8,
              "expert_ffn_hidden": 2048, "shared_experts": 1, "dense_layers": 3},
    "training": {"global_batch": 1_290_240, "precision": "fp8"},
    "cluster": {"num_gpus": 322_560, "gpu": "H800 SXM5 80GB", "node": "HGX H800",
                "fabric": "NDR InfiniBand fat tree"},
}
LONG_LEASE = {"PLAN_TIME_BASE_S": "100", "PLAN_LEASE_S": "300", "PLAN_RESEND_AFTER_S": "300"}


def pool_children(worker: Process) -> list[int]:
    """The pids of a worker's pool processes (children of its main process, forked by any of its threads: with the
    embedded broker, billiard's pool-maintenance thread forks the replacement of a pool process that died)."""
    tasks = Path(f"/proc/{worker.proc.pid}/task").iterdir()
    return sorted(int(pid) for task in tasks for pid in (task / "children").read_text().split())


def test_a_killed_pool_process_frees_the_worker_at_once(seeded, broker_env, spawn):
    env = {**broker_env, **LONG_LEASE}
    web = spawn(WebServer(env))
    worker = spawn(WorkerProcess(env, name="only"))
    plan = submit(web, MOE_SPEC)
    wait_for_status(plan, ("running", "done", "failed"), timeout=60, every=0.01)
    [child] = pool_children(worker)
    os.kill(child, signal.SIGKILL)  # as the kernel's OOM killer would: the worker's main process lives on
    killed_at = timezone.now()
    plan.refresh_from_db()
    assert plan.status == "running" and plan.attempts == 1, f"the kill must land mid-search\n{outputs(worker)}"
    assert plan.lease_expires_at - killed_at > timedelta(seconds=100)
    later = submit(web, SMALL_SPEC)  # posted after the kill: the same worker, with a new pool process, serves it

    for each in (plan, later):
        wait_for_status(each, ("done", "failed"), timeout=90)
        assert each.status == "done", f"{each.status} {each.error}\n{outputs(worker, web)}"
    # Searched again within seconds, long before its lease would have lapsed; once more, not twice.
    assert plan.started_at - killed_at < timedelta(seconds=20), outputs(worker)
    assert plan.attempts == 2 and later.attempts == 1, outputs(worker)
    assert plan.result["plans"][0]["step_time_s"] > 0 and plan.error == "" and worker.alive()
    assert worker.count("its search process was lost") == 1, outputs(worker)


def test_a_pool_process_killed_while_idle_does_not_stop_the_worker(seeded, broker_env, spawn):
    # An idle pool process waits for its next search. Billiard's own wait holds the pool's shared read lock while
    # it blocks, so a pool process killed there left the lock held for good, and with the embedded broker (whose
    # pool shares one queue) the process that replaced it waited on that lock forever: every later plan stayed
    # queued while the worker looked alive.
    web = spawn(WebServer(broker_env))
    worker = spawn(WorkerProcess(broker_env, name="only"))
    first = submit(web, SMALL_SPEC)  # one search done: the pool process is idle, waiting for the next
    wait_for_status(first, ("done", "failed"), timeout=60)
    [child] = pool_children(worker)
    os.kill(child, signal.SIGKILL)
    assert wait_until(lambda: pool_children(worker) not in ([], [child]), timeout=20), outputs(worker)

    later = submit(web, {**SMALL_SPEC, "training": {**SMALL_SPEC["training"], "global_batch": 512}})  # not a reuse
    wait_for_status(later, ("done", "failed"), timeout=30)
    assert later.status == "done", f"{later.status} {later.error}\n{outputs(worker, web)}"
    assert later.attempts == 1 and later.result["plans"][0]["step_time_s"] > 0 and worker.alive()


# Long time limits and a short lease (PLAN_LEASE_S), renewed by the worker's main process at each sweep: a search
# outlives its lease while its worker lives, and a worker killed whole gives its plan back within the lease.
SHORT_LEASE = {"PLAN_TIME_BASE_S": "100", "PLAN_LEASE_S": "1.5", "PLAN_RECOVER_EVERY_S": "0.5",
               "PLAN_RESEND_AFTER_S": "300"}


def test_a_search_outlives_its_lease_while_its_worker_renews_it(seeded, broker_env, spawn):
    # A lease shorter than the search (about 1 s), renewed every 0.15 s.
    env = {**broker_env, **SHORT_LEASE, "PLAN_LEASE_S": "0.45", "PLAN_RECOVER_EVERY_S": "0.15"}
    web = spawn(WebServer(env))
    workers = [spawn(WorkerProcess(env, name=name)) for name in ("first", "second")]  # either could take it over
    plan = submit(web, MOE_SPEC)
    wait_for_status(plan, ("done", "failed"), timeout=90)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(*workers)}"
    took = (plan.finished_at - plan.started_at).total_seconds()
    assert took > 0.45, f"the search ({took:.2f} s) must outlast its 0.45 s lease for this test to say anything"
    assert plan.attempts == 1, outputs(*workers)  # never given to the other worker as lapsed


def test_a_worker_killed_whole_gives_its_plan_back_within_its_lease_not_its_time_limit(seeded, broker_env, spawn):
    # Its plan stayed "running" until the hard time limit and its grace had passed: here over 100 s.
    env = {**broker_env, **SHORT_LEASE}
    web = spawn(WebServer(env))
    first = spawn(WorkerProcess(env, name="first"))
    plan = submit(web, MOE_SPEC)
    wait_for_status(plan, ("running", "done", "failed"), timeout=60, every=0.01)
    first.kill()  # SIGKILL to the worker and its pool: nothing renews the lease, nothing gives the plan back
    killed_at = timezone.now()
    plan.refresh_from_db()
    assert plan.status == "running" and plan.attempts == 1, f"the kill must land mid-search\n{outputs(first)}"
    assert plan.lease_expires_at - killed_at < timedelta(seconds=2)
    second = spawn(WorkerProcess(env, name="second"))
    wait_for_status(plan, ("done", "failed"), timeout=90)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(second, web)}"
    assert plan.started_at - killed_at < timedelta(seconds=30), outputs(second)
    assert plan.attempts == 2, outputs(second)


def test_a_worker_stopped_mid_search_hands_its_plan_to_a_worker_still_running(seeded, broker_env, spawn):
    # A recovery sweep every 2 ms, so that the stop is likely to land in the middle of one of its queries, and the
    # pool process's start too (webui/celery.py `fork_guard`): the shutdown must not wait on the query it
    # interrupted (on PostgreSQL a give-back on that connection would), nor a pool process on a lock it inherited.
    env = {**broker_env, **LONG_LEASE, "PLAN_RECOVER_EVERY_S": "0.002"}
    web = spawn(WebServer(env))
    workers = [spawn(WorkerProcess(env, name=name)) for name in ("first", "second")]
    plan = submit(web, MOE_SPEC)
    started = wait_for_status(plan, ("running", "done", "failed"), timeout=60, every=0.01)
    assert started[-1] != "queued", f"no worker started the search\n{outputs(*workers)}"
    # One search per worker: only one took the message (its log line may reach us a moment after the claim).
    assert wait_until(lambda: any(w.count("] received") for w in workers), 5), outputs(*workers)
    [holder] = [w for w in workers if w.count("] received")]
    [other] = [w for w in workers if w is not holder]
    os.kill(holder.proc.pid, signal.SIGQUIT)  # a cold shutdown, as `systemctl stop` with KillSignal=SIGQUIT sends
    stopped_at = timezone.now()
    assert wait_until(lambda: not holder.alive(), 20), f"the stopped worker did not exit\n{outputs(holder, other)}"

    wait_for_status(plan, ("done", "failed"), timeout=90)
    assert plan.status == "done", f"{plan.status} {plan.error}\n{outputs(holder, other)}"
    # Given back by the stopped search itself, and searched again by the other worker within seconds (the lease
    # outlasts the test), once: the stopped worker's message went back to the broker. Redis may hand it out twice
    # (the stopping worker restores it, and so may the other's visibility sweep); a second delivery does nothing.
    assert holder.count(f"plan {plan.pk}: stopped mid-search: requeued") == 1, outputs(holder)
    assert plan.started_at - stopped_at < timedelta(seconds=20), outputs(holder, other)
    time.sleep(2)  # long enough for such a duplicate to arrive
    plan.refresh_from_db()
    assert plan.attempts == 2, outputs(holder, other)
    assert other.count("this delivery has nothing to do") == other.count("] received") - 1, outputs(other)


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, however deep (make -> serve -> gunicorn and celery -> their children)."""
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found |= {int(child)} | descendants(int(child))
    except FileNotFoundError:
        pass
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


# Each way of stopping on one broker (both brokers run the pool-kill test above): SIGTERM to make alone, as a
# supervisor sends it, and Ctrl-C, which the terminal sends to the whole foreground process group.
@pytest.mark.parametrize("broker_env, how", [("filesystem", "SIGTERM to make"), ("redis", "Ctrl-C")],
                         indirect=["broker_env"])
def test_make_run_stops_the_web_server_and_the_worker_within_10_s_mid_search(seeded, broker_env, spawn, tmp_path,
                                                                              how):
    # The stop must land mid-search, and the search (about 2 s) can win the race on a quick machine: a plan that
    # finished first is done, nothing lost either, and the round is run again, up to three times.
    for attempt in range(3):
        env = {**broker_env, **LONG_LEASE, "PORT": str(free_port()), "VAR_DIR": str(tmp_path / f"var{attempt}")}
        spec = copy.deepcopy(MOE_SPEC)  # a spec of its own each round: a repeated one would reuse the answer
        spec["model"]["name"] += f", round {attempt + 1}"
        plan, elapsed, log = _stop_make_run_mid_search(env, how, spec)
        if plan.status != "done":
            break
        assert (plan.attempts, plan.lease_token) == (1, None) and plan.result["plans"], log[-3000:]
    # The search cut off is not lost: its pool process gave the plan back, and the next worker to start searches it.
    assert (plan.status, plan.attempts, plan.lease_token) == ("queued", 1, None), log[-3000:]
    assert f"plan {plan.pk}: stopped mid-search: requeued" in log  # by the pool process itself
    worker = spawn(WorkerProcess(env))
    wait_for_status(plan, ("done", "failed"), timeout=60)
    assert (plan.status, plan.attempts) == ("done", 2), f"{plan.error}\n{outputs(worker)}"
    print(f"{how}: everything stopped in {elapsed:.1f} s")


def _stop_make_run_mid_search(env: dict[str, str], how: str, spec: dict[str, Any]) -> tuple[Plan, float, str]:
    """`make run`, `spec` submitted, stopped `how` once its plan is running: the plan as it was left, how long
    the stop took, the worker's log. Whatever happens, nothing is left running."""
    make = Process(["make", "run"], env, "make run")
    web = WebClient(f"http://127.0.0.1:{env['PORT']}")
    log = Path(env["VAR_DIR"]) / "worker.log"
    try:
        assert wait_until(lambda: web.answers() or not make.alive(), 120), make.output()
        assert wait_until(lambda: log.exists() and " ready." in log.read_text(), 60), make.output()
        plan = submit(web, spec)
        wait_for_status(plan, ("running", "done", "failed"), timeout=60, every=0.01)
        processes = descendants(make.proc.pid)
        assert plan.status == "running" and len(processes) >= 5, make.output()  # serve, 2+1 gunicorn, 2 celery

        stopped_at = time.monotonic()
        if how == "Ctrl-C":
            os.killpg(make.proc.pid, signal.SIGINT)  # the terminal signals the whole foreground process group
        else:
            make.proc.send_signal(signal.SIGTERM)  # a supervisor signals make alone
        assert wait_until(lambda: not make.alive() and not any(map(running, processes)), 10), \
            f"{make.output()}\n{log.read_text()[-3000:]}"
        elapsed = time.monotonic() - stopped_at
    finally:  # whatever happened, leave nothing running: serve's children have process groups of their own
        leftovers = descendants(make.proc.pid)
        make.kill()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not web.answers()
    plan.refresh_from_db()
    return plan, elapsed, log.read_text()
