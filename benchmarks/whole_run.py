"""A whole `mooring run`, start-up and shutdown included, against the efficient plain loop's whole process.

The tiny-client workload (benchmarks/tiny_clients.py) at 100 clients with 10 per round by default, two client
actors asked for (resources.clients_on: auto may train so small a round in the coordinator instead; the row
says where they trained), MLflow tracking (a temporary SQLite store) and checkpoints on, as a newcomer's
`mooring run` would: a fresh process from launch to exit (imports, Ray's start, the data, the actors, 20
rounds, the artifacts, Ray's shutdown). The floor is benchmarks/bare_loop.py as a fresh process from launch to
exit (imports, data and partition, 20 rounds). Each side the fastest of `repeats` interleaved runs. Then, untimed,
one more `mooring run --profile` and one more plain loop with their processes' CPU seconds sampled: where the
run's wall seconds went (its start-up phases) and which processes spent the CPU (on a machine of few cores,
or a busy one, the CPU is what a whole run waits for).

    python -m benchmarks.whole_run           (or: mooring bench whole-run [--size 100/10] [--engine E])
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common import (
    DEFAULT_CONFIG,
    bare_loop_process,
    child_env,
    markdown_table,
    reproduce,
    store_overrides,
    temp_workdir,
)
from benchmarks.tiny_clients import workload

TARGET = 1.5  # × the efficient plain loop's whole process (issues 23, 41)
SAMPLE_SECONDS = 0.1


def mooring_run_seconds(overrides: list[str], cwd: str) -> float:
    """`mooring run` as a fresh process, launch to exit."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", DEFAULT_CONFIG, "--quiet", *(f"--set={o}" for o in overrides)]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=child_env(), check=False)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"mooring run failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    return seconds


def where_clients_trained(tmp: str) -> str:
    """The row label's note where the last run's clients trained in the coordinator (its actors.json)."""
    from benchmarks.tiny_clients import where_clients_trained as note

    runs = sorted(Path(tmp, "runs").glob("*/actors.json"), key=lambda p: p.stat().st_mtime)
    return note(str(runs[-1].parent)) if runs else ""


def measure(size: str = "100/10", rounds: int = 20, repeats: int = 3, actors: int = 2, engine: str | None = None,
            mooring_overrides: tuple[str, ...] = ()) -> dict:
    """`mooring_overrides` apply to the `mooring run` only (resources.partial_sums=true, for example)."""
    out = {"size": size, "rounds": rounds, "repeats": repeats, "actors": actors, "engine": engine,
           "command": f"mooring bench whole-run --size {size} --rounds {rounds} --repeats {repeats} --actors {actors}"
                      + (f" --engine {engine}" if engine else "") + "".join(f" --set {o}" for o in mooring_overrides)}
    bare_whole, bare_rounds, mooring = [], [], []
    with temp_workdir() as tmp:
        base = workload(size, rounds) + store_overrides(tmp)
        run_overrides = base + [f"resources.num_actors={actors}"] + ([f"train.engine={engine}"] if engine else []) \
            + list(mooring_overrides)
        for _ in range(repeats):
            rounds_s, whole_s = bare_loop_process(DEFAULT_CONFIG, base, tmp)
            bare_rounds.append(rounds_s)
            bare_whole.append(whole_s)
            mooring.append(mooring_run_seconds(run_overrides, tmp))
        out["where"] = where_clients_trained(tmp)
        out["profile"], out["cpu"] = profiled_run(run_overrides, tmp)
        out["bare_cpu"] = sum(process_tree_cpu(bare_loop_command(base), tmp)[1].values())
    out.update(bare=min(bare_whole), bare_rounds=min(bare_rounds), mooring=min(mooring))
    out["ratio"] = out["mooring"] / out["bare"]
    return out


def bare_loop_command(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bare_loop", DEFAULT_CONFIG, *(f"--set={o}" for o in overrides)]


def profiled_run(overrides: list[str], cwd: str) -> tuple[list[str], dict[str, float]]:
    """One `mooring run --profile`: its start-up and end phases (the profile table's header, start:, end: and the
    driver's wait for the rounds), and the CPU seconds of its processes by kind."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", DEFAULT_CONFIG, "--quiet", "--profile",
           *(f"--set={o}" for o in overrides)]
    stdout, cpu = process_tree_cpu(cmd, cwd)
    lines = stdout.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("phase ")), len(lines))
    kept = [line for line in lines[header + 1:] if line.startswith(("start:", "end:", "driver: wait for the round"))]
    return lines[header:header + 1] + kept, cpu


def process_tree_cpu(cmd: list[str], cwd: str) -> tuple[str, dict[str, float]]:
    """Run `cmd`; its stdout, and the CPU seconds (user + system) of it and every descendant, by kind
    (`process_kind`), each process's as last sampled (every SAMPLE_SECONDS) before it ended."""
    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd,
                            env=child_env())
    seen: dict[int, tuple[str, float]] = {}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                try:
                    times = p.cpu_times()
                    seen[p.pid] = (process_kind(p, p.pid == proc.pid), times.user + times.system)
                except psutil.Error:
                    pass
            done.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = proc.communicate()
    done.set()
    sampler.join()
    by_kind: dict[str, float] = {}
    for kind, seconds in seen.values():
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
    return stdout, by_kind


def process_kind(p, is_root: bool) -> str:
    """The driver, an actor or idle worker by its Ray title, else Ray's own processes."""
    if is_root:
        return "the driver (`mooring run`)"
    title = " ".join(p.cmdline())
    if "multiprocessing" in title:  # spawn's child: the run's MLflow tracking (orchestrator/reporting/tracker_process.py)
        return "MLflow tracking's process"
    for actor in ("CoordinatorActor", "ClientActor", "IDLE"):
        if f"ray::{actor}" in title:
            return f"Ray worker: {actor}" if actor != "IDLE" else "Ray worker, idle"
    return "Ray's own processes (GCS, raylet, agents, log monitor)"


def report(m: dict) -> str:
    clients, per_round = m["size"].split("/")
    engine = f", engine {m['engine']}" if m["engine"] else ""
    actors = "" if "no Ray" in m["where"] else f", {m['actors']} actor{'s' if m['actors'] > 1 else ''}"
    rows = [["efficient plain loop, whole process", f"{m['bare']:.1f}", "1.00", f"of which rounds {m['bare_rounds']:.1f} s"],
            [f"`mooring run`{actors}{engine}{m['where']}, whole process",
             f"{m['mooring']:.1f}", f"{m['ratio']:.2f}",
             f"target ≤ {TARGET:g}"]]
    return (f"{clients} clients, {per_round} per round, {m['rounds']} rounds, launch to exit:\n\n"
            + markdown_table(["", "seconds", "× plain loop", ""], rows)
            + f"\n\nEach the fastest of {m['repeats']} interleaved runs. " + reproduce(m["command"]) + "\n"
            + breakdown(m))


def breakdown(m: dict) -> str:
    """One more (untimed) run's start-up phases and its processes' CPU seconds, against the plain loop's."""
    if "cpu" not in m:
        return ""
    cpu = "; ".join(f"{kind} {seconds:.1f}" for kind, seconds in sorted(m["cpu"].items(), key=lambda kv: -kv[1]))
    return ("\nWhere one more run's time went (`mooring run --profile`, which shuts Ray down in order; a phase "
            "marked 'in the background' overlaps others; a run without Ray has no Ray phases):\n\n```\n" + "\n".join(m["profile"]) + "\n```\n\n"
            f"CPU seconds, sampled: `mooring run` {sum(m['cpu'].values()):.1f} ({cpu}); the plain loop's process "
            f"{m['bare_cpu']:.1f}.\n")


if __name__ == "__main__":
    print(report(measure()))
