"""The benchmarks' floor does Mooring's training, and the benchmarks run, report ratios and write nothing where
they run (tiny sizes: no timing is asserted)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from benchmarks.bare_loop import check_supported, plain_mlp, train_rounds
from benchmarks.tiny_clients import workload
from orchestrator.config import load_config
from orchestrator.datasets import prepare_data
from orchestrator.federation import ClientHost, Server, in_process_calls, sample_clients


def test_the_bare_loop_trains_as_mooring_does(workdir):
    """With one full batch per client, the shuffle cannot matter: the bare loop's global model after three
    rounds equals Mooring's (float32 summation order aside)."""
    cfg = load_config("configs/default.yaml", workload("12/4", rounds=3) + workdir + ["train.batch_size=1000"])
    data = prepare_data(cfg)
    server, host = Server(cfg, data), ClientHost(cfg, data, list(range(data.num_clients)))
    model = plain_mlp(64, [128], 64, data.num_classes)
    model.load_state_dict(dict(zip(model.state_dict(), server.state["model"].values())))
    clients = [(d.x, d.y) for d in (data.client_data(c) for c in range(data.num_clients))]
    per_round = [sample_clients(cfg.seed, t, data.num_clients, cfg.clients_per_round) for t in range(3)]
    train_rounds(model, clients, per_round, cfg.train, torch.Generator().manual_seed(0))
    for _ in range(3):
        server.run_round(in_process_calls(host))
    for bare, ours in zip(model.state_dict().values(), server.state["model"].values()):
        assert torch.allclose(bare, ours, atol=1e-6)
    assert not torch.equal(list(model.state_dict().values())[0], list(Server(cfg, data).state["model"].values())[0])


def test_the_bare_loop_refuses_what_it_does_not_do():
    cfg = load_config("configs/default.yaml", ["train.optimizer.name=adam"])
    with pytest.raises(ValueError, match="plain SGD"):
        check_supported(cfg)


def bench(cwd, *args):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "bench", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def ratios(text: str) -> dict[str, float]:
    """{row label: × bare loop} from a benchmark's markdown table."""
    rows = re.findall(r"^\| ([^|]+?) \| [^|]+ \| ([0-9.]+)", text, flags=re.M)
    return {label: float(ratio) for label, ratio in rows}


@pytest.mark.ray
def test_tiny_client_benchmark_reports_ratios_and_writes_nothing_where_it_runs(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = bench(cwd, "tiny", "--size", "12/4", "--rounds", "2", "--repeats", "1", "--actors", "1")
    assert out.returncode == 0, out.stderr
    found = ratios(out.stdout)
    assert found["bare loop (fresh process, 1 thread)"] == 1.0
    assert found["Mooring's run_in_process (1 thread, no Ray)"] > 0 and found["Mooring, 1 actor"] > 0
    assert "Reproduce: `mooring bench tiny --size 12/4 --rounds 2 --repeats 1 --actors 1`" in out.stdout
    assert list(cwd.iterdir()) == []  # no ./mlruns, partitions or run directories left behind


@pytest.mark.ray
def test_whole_run_benchmark_times_a_whole_mooring_run_against_the_bare_process(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = bench(cwd, "whole-run", "--size", "12/4", "--rounds", "2", "--repeats", "1", "--actors", "1")
    assert out.returncode == 0, out.stderr
    found = ratios(out.stdout)
    assert found["bare loop, whole process"] == 1.0 and found["`mooring run`, 1 actor, whole process"] > 0
    assert "Reproduce: `mooring bench whole-run --size 12/4 --rounds 2 --repeats 1 --actors 1`" in out.stdout
    assert list(cwd.iterdir()) == []


def test_bench_refuses_a_malformed_size_in_one_line(tmp_path):
    out = bench(tmp_path, "tiny", "--size", "100")
    assert out.returncode == 2 and "expected CLIENTS/PER_ROUND" in out.stderr and "Traceback" not in out.stderr


def test_scale_benchmark_refuses_too_few_rounds_in_one_line(tmp_path):
    out = bench(tmp_path, "scale", "--rounds", "3")
    assert out.returncode != 0 and "at least 4" in out.stderr and "Traceback" not in out.stderr


def test_scale_benchmark_takes_each_checkpoint_off_the_round_that_waited_for_it():
    from benchmarks.scale import steady_round_seconds

    # a checkpoint after every round: rounds 2 to 5 each waited for the one before them (round 1 and the last,
    # which also evaluates, are left out)
    rounds, checkpoints = [9.0, 1.5, 1.25, 1.5, 3.0], [0.5, 0.25, 0.5, 0.5, 0.1]
    assert steady_round_seconds(rounds, checkpoints, every=1) == 1.0
    assert steady_round_seconds([9.0, 1.0, 1.5, 1.0, 3.0], [0.5, 7.0], every=2) == 1.0  # round 3 waited for round 2's


def test_engine_benchmark_reports_both_engines_and_their_ratio(tmp_path):
    """One process, no Ray: vectorized against sequential on this machine's device, at a tiny size."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = bench(cwd, "engine", "--size", "4/3", "--samples", "8", "--rounds", "1", "--set", "train.batch_size=4")
    assert out.returncode == 0, out.stderr
    rates = dict(re.findall(r"^\| (sequential|vectorized) \| ([0-9.]+) \|", out.stdout, flags=re.M))
    assert set(rates) == {"sequential", "vectorized"} and all(float(r) > 0 for r in rates.values())
    assert float(re.search(r"vectorized / sequential: ([0-9.]+)×", out.stdout).group(1)) > 0
    assert "2 steps of batch 4 per client update" in out.stdout
    assert "Reproduce: `mooring bench engine --size 4/3 --samples 8 --rounds 1 --set train.batch_size=4`" in out.stdout
    assert list(cwd.iterdir()) == []
