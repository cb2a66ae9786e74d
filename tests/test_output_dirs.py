"""Output directories (`compare --out`, `table` and `claims` `--results`): one command at a time writes one, a
second is refused in one line naming the first and writes nothing, a lock left by a process that has ended does
not block, and a path that cannot be an output directory is refused before anything runs."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main as mooring
from orchestrator.io.output_lock import command_line, holding_output
from tests.test_tables import tiny_spec, write_spec

HOLD_THE_DIRECTORY = """
import sys
from orchestrator.io.output_lock import command_line, holding_output
with holding_output(sys.argv[1], "--out"):
    print("held", flush=True)
    sys.stdin.read()
"""

NO_RAY = ["--address", "127.0.0.1:1"]  # a refusal before Ray never tries it


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def holder(directory: Path) -> subprocess.Popen:
    """Another process holding `directory` until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_THE_DIRECTORY, str(directory)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def earlier_results(directory: Path) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "runs.csv").write_text("variant,seed\nfedavg,0\n")
    (directory / "histories.json").write_text('{"fedavg": {"0": []}}')
    return files_of(directory)


def test_a_second_compare_on_an_output_directory_is_refused_naming_the_first(tmp_path, capsys):
    out = tmp_path / "out"
    before = earlier_results(out)
    first = holder(out)
    try:
        rc = mooring(["compare", "configs/default.yaml", "--algorithms", "fedavg,fedprox", "--out", str(out),
                      "--set", f"checkpoint.dir={tmp_path / 'runs'}", *NO_RAY])
        held = files_of(out)
    finally:
        first.stdin.close()
        first.wait(timeout=60)
    std, err = capsys.readouterr()
    assert rc == 2 and std == "" and err.splitlines() == [
        f"error: --out {out}: in use by another command (pid {first.pid} on {socket.gethostname()}: -c {out}); "
        "wait for it to end, or give another --out"]
    held.pop(".lock")
    assert held == before  # nothing overwritten
    assert not (tmp_path / "runs").exists()  # no run started


@pytest.mark.parametrize("command", ["table", "claims"])
def test_a_table_or_claims_on_a_held_results_directory_is_refused_before_any_run(tmp_path, capsys, command):
    results = tmp_path / "results"
    before = earlier_results(results / "s")
    sets = ["--set", f"checkpoint.dir={tmp_path / 'runs'}", "--set", f"data.partitions_dir={tmp_path / 'p'}"]
    argv = ([command, write_spec(tmp_path, tiny_spec())] if command == "table"
            else [command, "configs/claims/fedfa_digits.yaml"]) + [
        "--results", str(results), "--out", str(tmp_path / "report.md"), *sets, *NO_RAY]
    with holding_output(results, "--results"):  # another file description: flock refuses this process too
        rc = mooring(argv)
    std, err = capsys.readouterr()
    assert rc == 2 and std == "" and err.splitlines() == [
        f"error: --results {results}: in use by another command (pid {os.getpid()} on {socket.gethostname()}: "
        f"{command_line()}); wait for it to end, or give another --results"]
    assert files_of(results / "s") == before
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("argv", "line"), [
    (["compare", "configs/default.yaml", "--algorithms", "fedavg", "--out", "{file}"],
     "--out {file}: a file, not a directory; give a directory to write the results in"),
    (["compare", "configs/default.yaml", "--algorithms", "fedavg", "--out", "{file}/cmp"],
     "--out {file}/cmp: {file} is a file, not a directory"),
    (["table", "{spec}", "--out", "{tmp}/t.md", "--results", "{file}"],
     "--results {file}: a file, not a directory; give a directory to write the results in"),
    (["claims", "configs/claims/fedfa_digits.yaml", "--out", "{tmp}/c.md", "--results", "{file}"],
     "--results {file}: a file, not a directory; give a directory to write the results in"),
    (["claims", "configs/claims/fedfa_digits.yaml", "--out", "{tmp}", "--results", "{tmp}/results"],
     "--out {tmp}: a directory; give the path of a file to write the report to"),
])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_run(tmp_path, capsys, workdir, argv, line):
    file = tmp_path / "existing"
    file.write_text("kept\n")
    store = (tmp_path / "mlflow.db").read_bytes()
    names = {"file": file, "tmp": tmp_path, "spec": write_spec(tmp_path, tiny_spec())}
    rc = mooring([a.format(**names) for a in argv] + [a for s in workdir for a in ("--set", s)] + NO_RAY)
    std, err = capsys.readouterr()
    assert rc == 2 and std == "" and err.splitlines() == [f"error: {line.format(**names)}"]
    assert file.read_text() == "kept\n"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()
    assert (tmp_path / "mlflow.db").read_bytes() == store  # no MLflow run either


def test_the_python_api_refuses_an_output_path_that_is_a_file(tmp_path):
    import mooring as api
    from mooring.errors import MooringError

    file = tmp_path / "existing"
    file.write_text("kept\n")
    with pytest.raises(MooringError) as refused:
        api.compare("configs/default.yaml", ["fedavg"], {"checkpoint.dir": str(tmp_path / "runs")}, out=file,
                    address="127.0.0.1:1")
    assert str(refused.value) == f"--out {file}: a file, not a directory; give a directory to write the results in"
    assert not (tmp_path / "runs").exists()


def test_a_lock_left_by_a_killed_holder_does_not_block(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    first = holder(out)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert f"pid {first.pid} on " in (out / ".lock").read_text()  # the file stays, naming a process that is gone
    with holding_output(out, "--out"):
        assert (out / ".lock").read_text().startswith(f"pid {os.getpid()} on {socket.gethostname()}: ")
    assert (out / ".lock").exists()  # a directory that was there before is left as it was found, with its lock


def test_a_directory_made_for_nothing_is_removed_again(tmp_path):
    made = tmp_path / "a" / "b" / "out"
    with holding_output(made, "--out"):
        assert [p.name for p in made.iterdir()] == [".lock"]
    assert list(tmp_path.iterdir()) == []  # nor its parents, made with it
    with holding_output(made, "--out"):
        (made / "runs.csv").write_text("x\n")
    assert (made / "runs.csv").read_text() == "x\n"


@pytest.mark.ray
def test_a_compare_writes_over_a_stale_lock_and_leaves_its_tables(ray_session, workdir, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    first = holder(out)
    first.kill()
    first.wait(timeout=60)
    sets = [*workdir, "data.num_clients=4", "train.rounds=1", "checkpoint.every=0", "eval.diagnostics=false"]
    rc = mooring(["compare", "configs/default.yaml", "--algorithms", "fedavg", "--seeds", "0", "--out", str(out),
                  "--quiet", *(a for s in sets for a in ("--set", s)),
                  "--address", ray_session.get_runtime_context().gcs_address])
    assert rc == 0, capsys.readouterr().err
    assert {"runs.csv", "summary.csv", "histories.json", "report.html"} <= set(files_of(out))


def test_the_lock_names_the_command_without_a_urls_password(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/mooring", "compare", "c.yaml", "--set",
                                      "tracking.uri=postgresql://bob:secret@db:5432/mlflow"])
    with holding_output(tmp_path / "out", "--out"):
        held = (tmp_path / "out" / ".lock").read_text()
    assert held == (f"pid {os.getpid()} on {socket.gethostname()}: mooring compare c.yaml --set "
                    "tracking.uri=postgresql://bob:***@db:5432/mlflow\n")
