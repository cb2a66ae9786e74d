"""One `mooring run` that needs Ray and so starts a local instance of its own, as a new user runs it, watched from
here: every process it starts as it starts it, then, once it has exited, which of them (and of Ray's instance)
are left. Run once a session (tests/conftest.py, `mooring_run_on_its_own_ray`) for the tests that read it:
tests/test_startup.py (its result, token authentication, no process of its environment left) and
tests/test_failures.py (none of its Ray session's processes left, agents included)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# rounds on client actors (clients_on=actors: a run that needs Ray), tracked nowhere
SETTINGS = ["train.rounds=3", "train.local_epochs=1", "data.num_clients=6", "checkpoint.every=2",
            "resources.num_actors=2", "resources.clients_on=actors", "tracking.enabled=false"]


def ray_processes_of(tmpdir: str) -> list[psutil.Process]:
    """Every process started with TMPDIR=tmpdir (the driver passes its environment to Ray's processes, and the
    raylet to its workers, whose command lines Ray rewrites)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TMPDIR") == tmpdir:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def session_dir(cmdlines: list[str]) -> str:
    """The Ray session directory the processes' command lines name (/tmp/ray/session_...)."""
    return next(m.group(0) for line in cmdlines if (m := re.search(r"/\S*/session_[^/\s]+", line)))


@dataclass
class OwnRayRun:
    returncode: int
    stdout: str
    stderr: str
    out_json: Path
    home: Path
    cmdlines: list[str]  # of every process the run started, seen as it started them
    session_left: list[str]  # its Ray session's processes still there 5 s after it exited
    environment_left: list[psutil.Process]  # processes with its TMPDIR still there 60 s after it exited


def run_with_its_own_ray(tmp: Path) -> OwnRayRun:
    """`mooring run` (the console script) with a new user's HOME (no ~/.ray/auth_token, no RAY_AUTH_MODE) and a
    TMPDIR of its own, its outputs in `tmp`."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="mx-"))  # short: Ray's socket paths under it must fit in 107 bytes
    out_json, home = tmp / "out.json", tmp / "home"
    env = {**os.environ, "TMPDIR": str(ray_tmp), "HOME": str(home)}
    for variable in ("RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(variable, None)
    sets = [f"checkpoint.dir={tmp / 'runs'}", f"data.partitions_dir={tmp / 'p'}", *SETTINGS]
    mooring = Path(sys.executable).parent / "mooring"
    with open(tmp / "stdout", "w+") as stdout, open(tmp / "stderr", "w+") as stderr:
        run = subprocess.Popen([str(mooring), "run", "configs/default.yaml", "--quiet", "--output-json", str(out_json),
                                *[f"--set={s}" for s in sets]], stdout=stdout, stderr=stderr, text=True, env=env)
        seen: dict[int, psutil.Process] = {}
        cmdlines = []
        deadline = time.monotonic() + 600
        while run.poll() is None and time.monotonic() < deadline:  # every process the run starts, as it starts them
            try:
                for child in psutil.Process(run.pid).children(recursive=True):
                    if child.pid not in seen:
                        seen[child.pid] = child
                        cmdlines.append(" ".join(child.cmdline()))
            except psutil.Error:
                pass
            time.sleep(0.05)
        if run.poll() is None:
            run.kill()
        returncode = run.wait()
        exited = time.monotonic()
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()

    session_left: list[str] = []
    if returncode == 0 and cmdlines:
        session = session_dir(cmdlines)

        def described(process: psutil.Process) -> str | None:
            try:
                return None if process.status() == psutil.STATUS_ZOMBIE else " ".join(process.cmdline())[:120]
            except psutil.Error:  # ended meanwhile
                return None

        def of_the_session() -> list[str]:
            named = [p for p in psutil.process_iter(["cmdline"]) if session in " ".join(p.info["cmdline"] or [])]
            return sorted({d for p in [*seen.values(), *named] if (d := described(p)) is not None})

        deadline = exited + 5
        while of_the_session() and time.monotonic() < deadline:
            time.sleep(0.2)
        session_left = of_the_session()
    deadline = exited + 60  # the kernel kills Ray's processes with the driver; workers follow their raylet
    while ray_processes_of(str(ray_tmp)) and time.monotonic() < deadline:
        time.sleep(0.5)
    environment_left = ray_processes_of(str(ray_tmp))
    if not environment_left:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
    return OwnRayRun(returncode, out, err, out_json, home, cmdlines, session_left, environment_left)
