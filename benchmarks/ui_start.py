"""How soon `mooring ui` answers, against MLflow's own `mlflow server --workers 1` on the same fresh store.

Each side is a fresh process from launch: the seconds until the UI's page (GET /) answers, and until the
REST API's first answer (an experiments search, the call the page makes first). Each the fastest of
`repeats` interleaved runs.

    python -m benchmarks.ui_start            (or: mooring bench ui [--repeats 3])
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

from benchmarks.common import child_env, markdown_table, reproduce, temp_workdir

TARGET = 5.0  # seconds to the first page (issue 17)
SEARCH = b'{"max_results": 5}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answered(url: str, body: bytes | None = None) -> bool:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status == 200
    except OSError:
        return False


def seconds_until(url: str, start: float, proc: subprocess.Popen, body: bytes | None = None) -> float:
    while not answered(url, body):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before answering {url}")
        time.sleep(0.05)
    return time.perf_counter() - start


def server_command(kind: str, store: str, port: int) -> list[str]:
    if kind == "mooring ui":
        return [sys.executable, "-m", "orchestrator.cli", "ui", "--uri", store, "--port", str(port)]
    return [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--backend-store-uri", store,
            "--port", str(port)]


def time_server(kind: str, tmp: str, attempt: int) -> tuple[float, float]:
    """(seconds to the page, seconds to the API's first answer) for one fresh server on a fresh store."""
    port = free_port()
    store = f"sqlite:///{tmp}/{kind.replace(' ', '_')}_{attempt}.db"
    start = time.perf_counter()
    proc = subprocess.Popen(server_command(kind, store, port), cwd=tmp, env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        page = seconds_until(f"http://127.0.0.1:{port}/", start, proc)
        api = seconds_until(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search", start, proc, SEARCH)
    finally:
        stop(proc)
    return page, api


def stop(proc: subprocess.Popen) -> None:
    """The server and whatever it started (MLflow's launcher starts uvicorn and a job runner)."""
    import os

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def measure(repeats: int = 3) -> dict:
    times: dict[str, list[tuple[float, float]]] = {"mlflow server": [], "mooring ui": []}
    with temp_workdir() as tmp:
        for attempt in range(repeats):
            for kind in times:
                times[kind].append(time_server(kind, tmp, attempt))
    out = {"repeats": repeats, "command": f"mooring bench ui --repeats {repeats}"}
    for kind, pairs in times.items():
        out[kind] = (min(p for p, _ in pairs), min(a for _, a in pairs))
    return out


def report(m: dict) -> str:
    base_page, base_api = m["mlflow server"]
    rows = [[kind, f"{page:.1f}", f"{page / base_page:.2f}", f"{api:.1f}", f"{api / base_api:.2f}"]
            for kind, (page, api) in ((k, m[k]) for k in ("mlflow server", "mooring ui"))]
    return ("A fresh server on a fresh SQLite store, launch to answer:\n\n"
            + markdown_table(["server", "s to the page", "× mlflow server", "s to the API", "× mlflow server"], rows)
            + f"\n\nTarget: the page in under {TARGET:g} s. Each the fastest of {m['repeats']} interleaved runs. "
            + reproduce(m["command"]) + "\n")


if __name__ == "__main__":
    print(report(measure()))
