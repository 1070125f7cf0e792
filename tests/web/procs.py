"""Real processes for the web tests and bench/load.py: a Celery worker, gunicorn, a private redis-server.

Each is configured only through its environment (DATABASE_URL, CELERY_BROKER_URL, PLAN_* ...), exactly as a
deployment would be, and keeps its output so a failing test can show it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL for a Django database settings dict (the test database, in the tests)."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = quote(settings_dict.get("USER") or "")
    password = quote(settings_dict.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "localhost"
    return f"postgres://{auth}{host}:{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}"


class Process:
    """A subprocess in its own process group (so that it and its children can be killed together), whose
    output is collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str], name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        # A process group of its own, so it can be killed with its children, but the caller's session: Linux
        # shares CPU fairly between sessions (autogroups) whatever their niceness, and a benchmark that runs
        # workers at a lower priority than the web server needs them in one.
        self.proc = subprocess.Popen(args, cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def output(self, last: int = 60) -> str:
        return f"--- {self.name} ---\n" + "\n".join(self.lines[-last:])

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: the machine died, nothing gets to clean up."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerProcess(Process):
    """`celery -A webui worker` (prefork, like production), never eager mode."""

    def __init__(self, env: dict[str, str], concurrency: int = 1, name: str | None = None, nice: int = 0) -> None:
        name = name or f"test-{uuid.uuid4().hex[:8]}"
        super().__init__(
            ["nice", "-n", str(nice), str(BIN / "celery"), "-A", "webui", "worker", "--concurrency", str(concurrency), "--loglevel", "info",
             "--without-mingle", "--without-gossip", "--without-heartbeat", "-n", f"{name}@%h"], env, name)

    def wait_ready(self, timeout: float = 60) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(" ready.") or not self.alive():
                break
            time.sleep(0.1)
        if not self.count(" ready."):
            self.stop()
            raise RuntimeError(f"the Celery worker did not start:\n{self.output()}")
        return self


class WebClient:
    """Talks to a web server at `url` over HTTP, as a script would."""

    def __init__(self, url: str) -> None:
        self.url = url

    def post_json(self, path: str, body: Any, timeout: float = 30) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        return _open(request, timeout)

    def get_json(self, path: str, timeout: float = 30) -> tuple[int, dict[str, Any]]:
        return _open(urllib.request.Request(self.url + path, headers={"Accept": "application/json"}), timeout)

    def get_text(self, path: str, timeout: float = 30) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
            return response.read().decode()

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/api/catalog", timeout=2):
                return True
        except (OSError, urllib.error.URLError):
            return False


class WebServer(Process, WebClient):
    """gunicorn serving webui.wsgi, as `make run` and production do (WhiteNoise for static files)."""

    def __init__(self, env: dict[str, str], workers: int = 2, port: int | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        WebClient.__init__(self, f"http://127.0.0.1:{self.port}")
        Process.__init__(self, [str(BIN / "gunicorn"), "webui.wsgi", "--bind", f"127.0.0.1:{self.port}",
                                "--workers", str(workers), *extra], env, f"gunicorn:{self.port}")

    def wait_ready(self, timeout: float = 60) -> WebServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            if self.answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gunicorn did not start:\n{self.output()}")


def _open(request: urllib.request.Request, timeout: float) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class RedisServer:
    """A private redis-server on a free port that keeps nothing on disk, so a test may stop and restart it
    (never the shared one on 6379). Restarting loses every message in it, as a real restart without
    persistence does."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.directory = directory
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
