"""`mooring ui` for real: a server on a fresh store answers, runs in one process, and stops on a signal."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import psutil
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_page(url: str, proc: subprocess.Popen, limit: float = 600.0) -> bytes:
    """The page, once the server answers (the limit only keeps a broken server from hanging the suite)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mooring ui exited before serving"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read()
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no answer from {url}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ui_serves_the_store_in_one_process_and_stops_on_a_signal(tmp_path, sig):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "ui", "--uri", f"sqlite:///{tmp_path}/m.db",
                             "--port", str(port)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        page = wait_for_page(f"http://127.0.0.1:{port}/", proc)
        assert b"<html" in page.lower() or b"<!doctype html" in page.lower()
        [script] = re.findall(rb'src="/?(static-files/[^"]+\.js)"', page)[:1]  # served before MLflow has loaded
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{script.decode()}", timeout=60) as r:
            assert r.status == 200 and len(r.read()) > 10_000
        request = urllib.request.Request(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search",
                                         data=b'{"max_results": 5}', headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            assert b"experiments" in r.read()
        everything = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(everything) == 1  # no launcher, no workers, no job runner
        os.kill(proc.pid, sig)
        proc.wait(timeout=120)
        gone, alive = psutil.wait_procs(everything, timeout=30)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_port_in_use_is_one_line_before_any_url(tmp_path, capsys):
    from orchestrator.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["ui", "--uri", f"sqlite:///{tmp_path}/m.db", "--port", str(port)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""  # no URL printed, no server started
    assert err.splitlines() == [f"error: --port {port}: port {port} on 127.0.0.1 is already in use; choose another "
                                "with --port"]


def test_mlflow_s_built_ui_is_where_the_ui_serves_it_from():
    from orchestrator.reporting.mlflow_internals import mlflow_static_dir

    assert (mlflow_static_dir() / "index.html").is_file()


def test_the_landing_goes_first_in_mlflow_s_page_and_stands_down_where_the_ui_renamed_what_it_sets(tmp_path, capsys):
    from orchestrator.commands.ui import SUMMARY_COLUMNS, first_page
    from orchestrator.reporting.mlflow_internals import UI_MARKERS, missing_ui_markers, mlflow_static_dir

    installed = mlflow_static_dir()
    assert missing_ui_markers(installed) == []  # the installed MLflow names everything the landing sets
    page = first_page(installed)
    head = page.index("<head>") + len("<head>")
    assert page[head:].startswith("<script>")  # before MLflow's own script reads its choices
    assert all(f"metrics.`{name}`" in page for name in SUMMARY_COLUMNS)
    assert page.replace(page[head:page.index("</script>") + len("</script>")], "") == \
        (installed / "index.html").read_text()  # nothing else of MLflow's page changed
    renamed = tmp_path / "build"
    (renamed / "static" / "js").mkdir(parents=True)
    (renamed / "index.html").write_text("<html><head></head></html>")
    (renamed / "static" / "js" / "main.1.js").write_text("ExperimentPage ReactComponentState runsExpanded selectedColumns")
    assert missing_ui_markers(renamed) == [m for m in UI_MARKERS if m.startswith("mlflow.")]
    assert first_page(renamed) == "<html><head></head></html>"
    assert capsys.readouterr().out.splitlines() == [
        "warning: this MLflow's UI does not name mlflow.workflowType, mlflow.assistant.panelOpen, "
        "mlflow.telemetry.info.alert.dismissed: the UI opens on MLflow's own home page, not on Mooring's runs"]


def test_mlflow_s_telemetry_is_off_for_mooring_s_runs_unless_turned_on():
    """As MLflow itself decides it, in a fresh process that imports Mooring's tracking (what every run does),
    outside a CI or test environment (where MLflow turns it off by itself): off by default, on where the user
    set MLFLOW_DISABLE_TELEMETRY=false before Mooring was imported."""
    probe = textwrap.dedent("""
        import importlib, os
        import orchestrator.reporting.tracking
        from mlflow.telemetry.utils import is_telemetry_disabled
        print(is_telemetry_disabled())
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "false"
        importlib.reload(orchestrator.reporting.tracking)
        print(is_telemetry_disabled())
    """)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/"), "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "False"], out.stderr[-500:]
