"""Celery's prefork pool, with pool processes that hold no lock while they wait for a search.

With a broker Celery cannot watch from its event loop (the embedded filesystem broker), the pool is billiard's
blocking Pool: its processes take jobs from one shared pipe, guarded by one lock between processes. Billiard's pool
process waits for its next job inside that lock (`SimpleQueue.get_payload` blocks in `recv_bytes` holding
`_rlock`), so a pool process killed while idle (the OOM killer, an operator's `kill -9`) left the lock held for
good: the process that replaced it waited on the lock forever, and every later plan stayed queued while the worker
looked alive. Here a pool process waits on the pipe outside the lock and takes the lock only to read a job that is
there, for as long as that read takes; another process that got to the job first leaves it waiting again.

With Redis the pool is Celery's AsynPool, whose processes each have pipes of their own and no shared lock; it is
left as it is. Settings: CELERY_WORKER_POOL names this module's TaskPool, so `celery worker` uses it unless told
`--pool` otherwise.
"""
from __future__ import annotations

from typing import Any, Callable

from billiard import pool as blocking
from billiard.common import pickle_loads
from celery.concurrency import prefork


class Worker(blocking.Worker):
    """A pool process of the blocking pool that waits for a job without the shared queue's read lock."""

    def _make_recv_method(self, conn: Any) -> Callable[[float], tuple[bool, Any]]:
        reader, lock = getattr(conn, "_reader", None), getattr(conn, "_rlock", None)
        if reader is None or lock is None:
            return super()._make_recv_method(conn)  # not billiard's SimpleQueue: its own way

        def recv(timeout: float) -> tuple[bool, Any]:
            if not reader.poll(timeout):
                return False, None
            with lock:
                if not reader.poll(0):  # another pool process read it first
                    return False, None
                payload = reader.recv_bytes()
            return True, pickle_loads(payload)

        return recv


class BlockingPool(blocking.Pool):
    Worker = Worker


class TaskPool(prefork.TaskPool):
    """prefork, with the blocking pool above; the asynchronous pool (Redis) unchanged."""

    BlockingPool = BlockingPool
