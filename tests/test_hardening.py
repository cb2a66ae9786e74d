"""Faults a run must survive or refuse in one line (issue #14): bad output directories, non-finite losses,
corrupt or malicious checkpoints, a stop signal at any round count, a failed set-up, and the local Ray
instance's sockets."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psutil
import pytest

from orchestrator.driver.run import run_experiment
from orchestrator.driver.run_dir import check_output_dirs
from orchestrator.driver.run_errors import RunError
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.io import checkpoint as ckpt

FAST = ["train.rounds=4", "data.num_clients=6", "checkpoint.every=2", "resources.num_actors=2",
        "resources.resident_clients=1"]


def cli(*args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **kw)


# ------------------------------------------------------------------------------- output directories
@pytest.mark.parametrize("key, value, problem", [
    ("checkpoint.dir", "/proc/mooring", r"cannot write in /proc \(No such file or directory\)"),
    ("checkpoint.dir", "/etc/hostname", r"/etc/hostname is a file, not a directory"),
    ("checkpoint.dir", "/etc/hostname/runs", r"/etc/hostname is a file, not a directory"),
    ("data.partitions_dir", "/proc/parts", r"cannot write in /proc \(No such file or directory\)"),
])
def test_an_output_directory_that_cannot_be_written_is_one_line(key, value, problem):
    cfg = load_config("configs/default.yaml", [f"{key}={value}"])
    with pytest.raises(ConfigError, match=rf"^{key} = '{value}': {problem}$"):
        check_output_dirs(cfg)


@pytest.mark.parametrize("key", ["checkpoint.dir", "data.partitions_dir"])
def test_an_output_uri_of_no_known_filesystem_is_refused_by_the_config(key):
    with pytest.raises(ConfigError) as e:
        load_config("configs/default.yaml", [f"{key}=xyz://bucket/runs"])
    assert str(e.value) == (f"configs/default.yaml: {key} = 'xyz://bucket/runs': no filesystem for xyz://; allowed: "
                            "a local path or a URI of file://, s3://, gs://, gcs://, hdfs://, viewfs://, abfs://, abfss://")
    assert load_config("configs/default.yaml", [f"{key}=s3://bucket/runs"])  # known: checked when it is written


# ------------------------------------------------------------------ a run directory's records on resume
@pytest.mark.parametrize("name, content, problem", [
    ("run.json", b'{"mlflow_run_id": "ab', "not JSON (line 1: Unterminated string starting at)"),
    ("run.json", b"[1]", "not a JSON object"),
    ("run.json", b"[" * 100_000, "nested more than about"),
    ("metrics.jsonl", b'{"round": 1}\n{"round": 2, "acc\n', "line 2: not JSON (line 1: "),
    ("metrics.jsonl", b'{"round": 1}\n\n7\n', "line 3: not a round's metrics (an object with its round)"),
])
def test_a_damaged_run_record_is_one_line_before_a_resume_starts(tmp_path, capsys, name, content, problem):
    from orchestrator import cli

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy("configs/default.yaml", run / "config.yaml")
    (run / name).write_bytes(content)
    assert cli.main(["run", "--resume", str(run)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {run / name}: {problem}"), line
    assert (run / name).read_bytes() == content


def test_a_config_given_beside_resume_is_refused_not_ignored(tmp_path, capsys):
    from orchestrator import cli

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy("configs/default.yaml", run / "config.yaml")
    assert cli.main(["run", "configs/privacy_digits.yaml", "--resume", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: mooring run configs/privacy_digits.yaml --resume {run}: a resume continues the run with its own "
        f"config ({run}/config.yaml); give no CONFIG (change what may change with --set)"]
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]


@pytest.mark.parametrize("content, problem", [
    (b'{"fedavg": {"0": [{"round": 1, "accuracy": 0.5}', "not JSON (line 1: Expecting ',' delimiter)"),
    (b"[" * 100_000, "nested more than about"),
    (b'{"fedavg": [1]}', 'not {"variant": {"seed": [{"metric": number, ...}, ...]}} as mooring compare writes it'),
    (b'{"fedavg": {"x": []}}', "fedavg: 'x' is not a seed (0, 1, 2, ...)"),
    (b'{"fedavg": {"0": [{"accuracy": "high"}]}}', "fedavg, seed 0: not {"),
])
def test_damaged_saved_histories_are_one_line_for_claims_report_only(tmp_path, content, problem):
    from pipelines.claims import saved_comparison

    (tmp_path / "histories.json").write_bytes(content)
    with pytest.raises(ConfigError) as e:
        saved_comparison(tmp_path)
    [line] = str(e.value).splitlines()
    assert line.startswith(f"--report-only: {tmp_path / 'histories.json'}: {problem}"), line
    assert line.endswith("; run the claims again to write it")
    (tmp_path / "histories.json").write_text('{"fedavg": {"0": [{"round": 1, "accuracy": 0.5}]}}')
    assert saved_comparison(tmp_path).values("fedavg", "accuracy:final") == {0: 0.5}


# ----------------------------------------------------------------------------------- non-finite loss
def test_a_non_finite_loss_stops_the_round_naming_round_and_client(workdir):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import NonFiniteLoss, run_in_process

    cfg = load_config("configs/default.yaml", workdir + ["data.num_clients=3", "train.optimizer.lr=1e30",
                                                         "train.rounds=2"])
    with pytest.raises(NonFiniteLoss, match=r"^round 1: client \d reported training loss (nan|inf|-inf); lower "
                                            r"train.optimizer.lr"):
        run_in_process(cfg, prepare_data(cfg))


@pytest.mark.ray
def test_a_run_that_opts_to_continue_writes_strict_json(ray_session, workdir):
    cfg = load_config("configs/default.yaml", workdir + ["data.num_clients=3", "train.optimizer.lr=1e30",
                                                         "train.rounds=2", "train.on_nonfinite_loss=continue"])
    result = run_experiment(cfg, progress=False)

    def no_bare_constants(name):
        raise AssertionError(f"bare {name} in JSON")

    lines = Path(result.run_dir, "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=no_bare_constants) for line in lines]
    assert [r["round"] for r in rows] == [1, 2] and rows[0]["train_loss"] is None
    json.loads(Path(result.run_dir, "result.json").read_text(), parse_constant=no_bare_constants)


@pytest.mark.ray
def test_a_non_finite_loss_ends_the_run_in_one_line_and_its_mlflow_run_failed(ray_session, workdir):
    from mlflow.tracking import MlflowClient

    cfg = load_config("configs/default.yaml", workdir + ["data.num_clients=3", "train.optimizer.lr=1e30"])
    with pytest.raises(RunError, match=r"^round 1 failed: NonFiniteLoss: round 1: client \d reported training loss"):
        run_experiment(cfg, progress=False)
    # the actor check fails before MLflow's run is opened (start-up overlaps them): no run may be left RUNNING
    client = MlflowClient(cfg.tracking.uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id]) if experiment is not None else []
    assert all(r.info.status == "FAILED" for r in runs), [r.info.status for r in runs]


# ----------------------------------------------------------------------------------------- set-up
@pytest.mark.ray
def test_a_run_failing_in_set_up_leaves_no_run_directory_and_no_running_mlflow_run(ray_session, workdir):
    from mlflow.tracking import MlflowClient

    cfg = load_config("configs/default.yaml", FAST + workdir + ["resources.num_actors=5"])
    with pytest.raises(RunError, match=r"resources.num_actors = 5 × 1 CPU per actor needs 5 CPUs"):
        run_experiment(cfg, progress=False)
    assert list(Path(cfg.checkpoint.dir).iterdir()) == []
    # the actor check fails before MLflow's run is opened (start-up overlaps them): no run may be left RUNNING
    client = MlflowClient(cfg.tracking.uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id]) if experiment is not None else []
    assert all(r.info.status == "FAILED" for r in runs), [r.info.status for r in runs]


# ------------------------------------------------------------------------------------- checkpoints
class Payload:
    """A pickle that would create a file if it were ever unpickled with code execution."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def rewrite(checkpoint: Path, name: str, data: bytes, update_manifest: bool) -> None:
    """Replace a checkpoint file; with update_manifest, as an attacker who also rewrites the manifest."""
    (checkpoint / name).write_bytes(data)
    if update_manifest:
        manifest = json.loads((checkpoint / "manifest.json").read_text())
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def client_state_file(checkpoint: Path) -> tuple[str, Path]:
    """A client state file the checkpoint names (the first client's), and the client's id."""
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    cid = sorted(manifest["client_states"], key=int)[0]
    return cid, checkpoint.parent.parent / "client_states" / f"c{cid}.r{manifest['client_states'][cid]['round']:06d}.pt"


def rewrite_client_state(checkpoint: Path, data: bytes) -> Path:
    """Replace a client state file the checkpoint names, and its manifest entry, as an attacker would."""
    cid, path = client_state_file(checkpoint)
    path.write_bytes(data)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["client_states"][cid].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="module")
def finished_run(ray_session, tmp_path_factory, mlflow_store_made):
    """A 4-round run with checkpoints at rounds 2 and 4, and its history."""
    tmp = tmp_path_factory.mktemp("ckpt")
    shutil.copyfile(mlflow_store_made, tmp / "mlflow.db")
    cfg = load_config("configs/default.yaml", FAST + [f"checkpoint.dir={tmp / 'runs'}", f"data.partitions_dir={tmp / 'p'}",
                                                      f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}", "algorithm.name=local"])
    result = run_experiment(cfg, progress=False)
    return cfg, Path(result.run_dir), result.history


def corrupt(case: str, run: Path, marker: Path) -> str:
    """Apply one corruption to `run`; returns the bad file's path as the refusal must name it."""
    latest = run / "checkpoints" / "round-000004"
    evil = pickle.dumps(Payload(marker))
    if case == "server.pt truncated":
        data = (latest / "server.pt").read_bytes()
        (latest / "server.pt").write_bytes(data[: len(data) // 2])
    elif case == "server.pt empty":
        (latest / "server.pt").write_bytes(b"")
    elif case == "server.pt malicious, manifest rewritten":
        rewrite(latest, "server.pt", evil, update_manifest=True)
    elif case == "client state truncated":
        _, path = client_state_file(latest)
        path.write_bytes(path.read_bytes()[:100])
        return str(path)
    elif case == "client state malicious, manifest rewritten":
        return str(rewrite_client_state(latest, evil))
    elif case == "client state missing":
        _, path = client_state_file(latest)
        path.unlink()
        return str(path)
    elif case == "manifest missing":
        (latest / "manifest.json").unlink()
        return str(latest / "manifest.json")
    elif case == "LATEST outside the run":
        (run / "checkpoints" / "LATEST").write_text("../../../../etc")
        return str(run / "checkpoints" / "LATEST")
    elif case == "LATEST names a missing round":
        (run / "checkpoints" / "LATEST").write_text("round-000009")
        return str(run / "checkpoints" / "LATEST")
    return str(latest / case.split(" ")[0])


CORRUPTIONS = ["server.pt truncated", "server.pt empty", "server.pt malicious, manifest rewritten",
               "client state truncated", "client state malicious, manifest rewritten", "client state missing",
               "manifest missing",
               "LATEST outside the run", "LATEST names a missing round"]


@pytest.mark.ray
def test_an_unsafe_yaml_in_the_run_directory_is_refused_without_running_it(finished_run, tmp_path):
    cfg, original, _ = finished_run
    run = tmp_path / original.name
    shutil.copytree(original, run)
    marker = tmp_path / "pwned"
    (run / "config.yaml").write_text(f'seed: !!python/object/apply:os.system ["touch {marker}"]\n')
    out = cli("run", "--resume", str(run), "--quiet")
    _, err = out.communicate(timeout=300)
    assert out.returncode == 2 and not marker.exists()
    assert err.strip().splitlines() == [f"error: {run / 'config.yaml'}: refused YAML tag at line 1, column 7 "
                                        "(could not determine a constructor for the tag "
                                        "'tag:yaml.org,2002:python/object/apply:os.system'); only plain data "
                                        "(mappings, lists, strings, numbers) is read"]


@pytest.mark.ray
def test_resume_from_an_earlier_round_gives_the_uninterrupted_history(finished_run, tmp_path):
    cfg, original, history = finished_run
    run = tmp_path / original.name
    shutil.copytree(original, run)
    corrupt("server.pt truncated", run, tmp_path / "unused")
    with pytest.raises(RunError, match=r"round-000004/server.pt: \d+ bytes with sha256 .*round 2"):
        run_experiment(cfg, progress=False, resume_dir=str(run))
    resumed = run_experiment(cfg, progress=False, resume_dir=str(run), from_round=2)
    assert resumed.history == history
    ckpt.verify_checkpoint(str(run / "checkpoints" / "round-000004"))  # rewritten by the resumed run


def test_a_checkpoint_without_the_round_asked_for_is_one_line(tmp_path):
    (tmp_path / "checkpoints" / "round-000002").mkdir(parents=True)
    with pytest.raises(ckpt.CheckpointError, match=r"^--from-round 3: .* has no checkpoint of that round "
                                                   r"\(checkpointed rounds: 2\)$"):
        ckpt.checkpoint_to_resume(str(tmp_path), from_round=3)


# --------------------------------------------------------------------------------------- signals
def process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.ray
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_10_to_the_12_round_run_with_a_checkpoint(signum, tmp_path, mlflow_store_made):
    from mlflow.tracking import MlflowClient

    runs = tmp_path / "runs"
    shutil.copyfile(mlflow_store_made, tmp_path / "mlflow.db")  # its tables made (tests/conftest.py)
    sets = [f"checkpoint.dir={runs}", f"data.partitions_dir={tmp_path / 'p'}", "data.num_clients=4",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "train.rounds=1000000000000", "checkpoint.every=0"]
    proc = cli("run", "configs/default.yaml", *[f"--set={s}" for s in sets], "--quiet")
    try:
        while not any(runs.glob("*/metrics.jsonl")) and proc.poll() is None:  # the rounds have begun
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        tree = process_tree(proc.pid)  # its loopback-only sockets: tests/test_ray_internals.py
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum and "Traceback" not in err
    [run_dir] = runs.iterdir()
    [line] = err.strip().splitlines()
    stopped = int(line.split("stopped after round ")[1].split(";")[0])
    assert line == (f"interrupted: stopped after round {stopped}; checkpoint {run_dir}/checkpoints/"
                    f"{ckpt.checkpoint_name(stopped)}; continue with `mooring run --resume {run_dir}`")
    assert ckpt.checkpoint_to_resume(str(run_dir)).endswith(ckpt.checkpoint_name(stopped))  # verified
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("mooring").experiment_id])
    assert run.info.status == "KILLED"
    _, alive = psutil.wait_procs(tree[1:], timeout=60)  # Ray's processes of this run end with it
    assert alive == []


# ------------------------------------------------------------------------------- under load
# Every corruption is resumed this many times, each a `mooring run --resume` refused before Ray starts
UNDER_LOAD_REPEATS = int(os.environ.get("MOORING_UNDER_LOAD_REPEATS", "1"))


@contextlib.contextmanager
def cpu_burners(n: int = 2):
    """n processes spinning on a core each, for the duration of the block: the load under which a race in an
    early exit (a background thread still running while the interpreter shuts down) shows up."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def exits_and_stderr(commands: list[list[str]], parallel: int = 3) -> list[tuple[int, str]]:
    """Each `mooring` command's exit code and stderr, in order, `parallel` of them running at a time."""
    results: dict[int, tuple[int, str]] = {}
    pending, running = list(enumerate(commands)), []
    while pending or running:
        while pending and len(running) < parallel:
            i, argv = pending.pop(0)
            running.append((i, cli(*argv)))
        i, done = running.pop(0)
        _, err = done.communicate(timeout=300)
        results[i] = (done.returncode, err)
    return [results[i] for i in range(len(commands))]


def check_refusal(case: str, run: Path, bad_file: str, code: int, err: str) -> None:
    assert code == 1 and "Traceback" not in err, (case, code, err[-500:])
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: cannot resume: {bad_file}: "), (case, line)
    intact = "is round 4" if case.startswith("LATEST") else "before it is round 2"
    assert line.endswith(f"the newest intact checkpoint {intact}: resume with "
                         f"`mooring run --resume {run} --from-round {intact[-1]}`"), (case, line)


@pytest.mark.ray
def test_bad_resumes_and_a_bad_config_are_one_line_under_load_never_a_signal(finished_run, tmp_path):
    """Every corrupted checkpoint (UNDER_LOAD_REPEATS times each) is refused in one line naming the bad file and
    the newest intact checkpoint, nothing in it executed; and a config refused once its data is being prepared
    (an engine the method cannot run on) is one line too: all with two CPU burners beside them, none ended by
    a signal (an early exit while a background thread still holds library state once aborted the process)."""
    _, original, _ = finished_run
    marker = tmp_path / "pwned"
    resumes = []
    for i, case in enumerate(CORRUPTIONS * UNDER_LOAD_REPEATS):
        run = tmp_path / f"{i}" / original.name
        shutil.copytree(original, run)
        resumes.append((case, run, corrupt(case, run, marker)))
    overrides = [*FAST, f"checkpoint.dir={tmp_path / 'runs'}", f"data.partitions_dir={tmp_path / 'p'}",
                 "tracking.enabled=false", "algorithm.name=feddebias", "train.engine=vectorized"]
    bad_config = ["run", "configs/default.yaml", "--quiet", *[f"--set={o}" for o in overrides]]
    with cpu_burners():
        results = exits_and_stderr([["run", "--resume", str(run), "--quiet"] for _, run, _ in resumes]
                                   + [bad_config] * UNDER_LOAD_REPEATS)
    signalled = [(code, err[-300:]) for code, err in results if code < 0 or code > 2]
    assert not signalled, f"{len(signalled)} of {len(results)} early exits ended by a signal: {signalled[:3]}"
    for (case, run, bad_file), (code, err) in zip(resumes, results):
        check_refusal(case, run, bad_file, code, err)
    for code, err in results[len(resumes):]:
        assert code == 2 and err.strip().splitlines() == [
            "error: train.engine: vectorized cannot train feddebias: its max step (the projector θ, with its own "
            "optimizer) must update θ between the forward pass and the min-step loss of every iteration: two "
            "parameter groups stepped in sequence; use train.engine=auto or sequential"], err[-500:]
    assert not marker.exists()  # nothing was executed
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # the refused run left nothing


# ------------------------------------------------------ resuming: a changed config, a busy directory, a full disk
def files_of(run: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `run`, with its modification time and bytes."""
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(run.rglob("*"))
            if p.is_file()}


def copy_of(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    return copy


@pytest.mark.ray
def test_a_resume_whose_config_changed_is_refused_naming_the_changes(finished_run, tmp_path):
    import yaml

    from orchestrator.driver.run_dir import read_run_config

    _, original, _ = finished_run
    run = copy_of(original, tmp_path)
    raw = yaml.safe_load((run / "config.yaml").read_text())
    raw["model"]["hidden"], raw["data"]["num_clients"] = [32], 8
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    before = files_of(run)
    with pytest.raises(ConfigError) as refused:
        run_experiment(read_run_config(str(run), ["train.local_epochs=3"]), progress=False, resume_dir=str(run))
    assert str(refused.value) == (
        f"--resume {run}: its config.yaml (with any --set) differs from the config the run was started with: "
        "data.num_clients 6 → 8, model.hidden [128] → [32], train.local_epochs 2 → 3; resume with the original "
        "config or start a new run")
    after = files_of(run)
    after.pop(".lock"), before.pop(".lock")  # the refusing run held the directory meanwhile
    assert after == before


@pytest.mark.ray
def test_a_resume_may_extend_the_run_and_change_where_it_runs_not_shrink_it(finished_run, tmp_path):
    from orchestrator.driver import resume_config
    from orchestrator.driver.run_dir import read_run_config

    _, original, _ = finished_run
    run = copy_of(original, tmp_path)
    resume_config.check_unchanged(str(run), read_run_config(str(run), [
        "train.rounds=10", "resources.num_actors=1", "train.engine=vectorized", "checkpoint.every=1",
        f"data.partitions_dir={tmp_path / 'elsewhere'}", "name=renamed"]))
    before = files_of(run)
    with pytest.raises(ConfigError, match=rf"^--resume {run}: train.rounds = 3, but the run's checkpoint is of "
                                          r"round 4; train.rounds may grow on a resume, not shrink below the rounds "
                                          r"done$"):
        run_experiment(read_run_config(str(run), ["train.rounds=3"]), progress=False, resume_dir=str(run))
    after = files_of(run)
    after.pop(".lock"), before.pop(".lock")
    assert after == before


HOLD_THE_LOCK = """
import sys
from orchestrator.io.run_lock import holding
with holding(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.ray
def test_a_second_run_in_a_run_directory_is_refused_naming_the_first(finished_run, tmp_path, capsys):
    import socket

    from orchestrator.cli import report_known_error
    from orchestrator.io.run_lock import holding

    cfg, original, _ = finished_run
    run = copy_of(original, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(run)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = files_of(run)
        with pytest.raises(RunError) as resumed:
            run_experiment(cfg, progress=False, resume_dir=str(run))
        with pytest.raises(RunError) as started:  # a new run given that directory
            run_experiment(cfg, progress=False, run_dir=str(run))
        assert files_of(run) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    expected = (f"{run} is in use by another run (pid {holder.pid} on {socket.gethostname()}); wait for it to end, "
                "or stop it (SIGINT or SIGTERM checkpoints it) and resume then")
    assert str(resumed.value) == str(started.value) == expected
    assert report_known_error(resumed.value) == 1
    assert capsys.readouterr().err == f"error: {expected}\n"
    with holding(str(run)):  # the kernel released it with its holder
        pass


@contextmanager
def tmpfs(path: Path, options: str):
    """A tmpfs mounted at `path` (a real small or read-only filesystem), unmounted after; the test is skipped,
    saying why, where this process may not mount one."""
    path.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                                 text=True)
    except FileNotFoundError:
        pytest.skip("no mount command on this machine, to make a small filesystem")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


@pytest.mark.ray
def test_a_checkpoint_on_a_full_disk_is_one_line_naming_the_file_and_the_resume(finished_run, tmp_path):
    """A run's first checkpoint, and a client's state written in a Ray worker as a client actor writes it, on a
    real filesystem too small for them: one line naming the file and the resume command, nothing half-written."""
    import ray
    import torch

    from orchestrator.driver.run_errors import disk_full
    from orchestrator.io import storage

    _, original, _ = finished_run
    snapshot = ckpt.load_server_snapshot(str(original / "checkpoints" / "round-000004"))
    snapshot["state"] = {"weight": torch.zeros(32_000)}  # a global model of 128 kB
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        run = disk / original.name
        run.mkdir()
        shutil.copy(original / "config.yaml", run)
        server_pt, client_state = f"{run}/checkpoints/round-000004/server.pt", f"{run}/client_states/c0.r000005.pt"
        with pytest.raises(OSError) as here:
            ckpt.write_checkpoint(str(run), snapshot, {}, None)
        with pytest.raises(ray.exceptions.RayTaskError) as in_a_worker:  # as a client actor writes a client's state
            ray.get(ray.remote(num_cpus=0)(storage.write_bytes_atomic).remote(client_state, bytes(100_000)))
        for line, path in ((disk_full(str(run), here.value), server_pt),
                           (disk_full(str(run), in_a_worker.value), client_state)):
            assert str(line) == (f"{path}: No space left on device; free space there, then continue with "
                                 f"`mooring run --resume {run}`")
        assert not list(run.rglob("*.tmp-*"))
        assert ckpt.checkpoint_rounds(str(run)) == []  # no half checkpoint: the resume it names starts at round 0
        assert ckpt.checkpoint_to_resume(str(run)) is None


# --------------------------------------------------------------------------------------- --output-json
@pytest.mark.parametrize("case", ["a directory", "its directory missing", "its directory a file",
                                  "its directory read-only"])
def test_a_bad_output_json_is_refused_before_the_run(case, tmp_path, capsys):
    from orchestrator import cli

    (tmp_path / "file").write_text("")
    path, problem = {
        "a directory": (tmp_path, "a directory; give the path of a file to write the result to"),
        "its directory missing": (tmp_path / "no" / "r.json", f"directory {tmp_path / 'no'} does not exist"),
        "its directory a file": (tmp_path / "file" / "r.json", f"{tmp_path / 'file'} is a file, not a directory"),
        "its directory read-only": (tmp_path / "ro" / "r.json",
                                    f"cannot write in {tmp_path / 'ro'} (Read-only file system)"),
    }[case]
    with tmpfs(tmp_path / "ro", "ro,size=64k") if case.endswith("read-only") else nullcontext():
        code = cli.main(["run", "configs/default.yaml", "--quiet", "--output-json", str(path),
                         "--set", f"checkpoint.dir={tmp_path / 'runs'}"])
    assert code == 2
    assert capsys.readouterr().err == f"error: --output-json {path}: {problem}\n"
    assert not (tmp_path / "runs").exists()  # refused before anything was written
