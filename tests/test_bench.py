"""The benchmarks' floor does Mooring's training, and the benchmarks run, report ratios and write nothing where
they run (tiny sizes: no timing is asserted)."""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from benchmarks.bare_loop import check_supported, load_flat, load_workload, train_rounds
from benchmarks.tiny_clients import workload
from benchmarks.vectorized_loop import train_rounds_vectorized
from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server, in_process_calls


@pytest.mark.parametrize("partition", [["data.partition.kind=iid"],
                                       ["data.partition.kind=dirichlet", "data.partition.alpha=0.1",
                                        "data.partition.min_size=2", "data.partition.repair=true"]])
def test_the_plain_loop_and_the_vectorised_loop_reach_mooring_s_global_model_on_the_same_batches(workdir, partition):
    """Neither reference is another workload: from Mooring's θ⁰, on the batches Mooring draws, both reach the global
    model of Mooring's sequential engine after three rounds (float32 summation order aside), IID and with client
    sizes that differ a lot (Dirichlet α = 0.1: the vectorised loop pads and masks)."""
    cfg = load_config("configs/default.yaml", workload("30/6", rounds=3) + workdir + partition +
                      ["train.engine=sequential", "train.batch_size=4", "eval.every=1"])
    data = prepare_data(cfg)
    server, host = Server(cfg, data), ClientHost(cfg, data, list(range(data.num_clients)))
    start = parameters_to_vector(list(server.state["model"].values())).clone()
    mooring_accuracies = [server.run_round(in_process_calls(host))["accuracy"] for _ in range(3)]
    mooring = parameters_to_vector(list(server.state["model"].values()))
    assert not torch.allclose(mooring, start, atol=1e-3)
    workload_, model = load_workload(cfg)
    sizes = {len(y) for _, y in workload_.clients}
    assert len(sizes) > 1 if "dirichlet" in partition[0] else True
    for train in (train_rounds, train_rounds_vectorized):
        trained = copy.deepcopy(model)
        load_flat(list(trained.parameters()), start)
        accuracies = train(trained, workload_)
        assert torch.allclose(parameters_to_vector(trained.parameters()), mooring, atol=2e-5), train.__name__
        assert accuracies == pytest.approx(mooring_accuracies, abs=1e-6), train.__name__


def test_the_plain_loops_refuse_what_they_do_not_do():
    with pytest.raises(ValueError, match="SGD"):
        check_supported(load_config("configs/default.yaml", ["train.optimizer.name=adam"]))
    with pytest.raises(ValueError, match="plain SGD: no momentum"):
        check_supported(load_config("configs/default.yaml", ["train.optimizer.momentum=0.9"]), vectorized=True)


def bench(cwd, *args):
    """`mooring bench ARGS` as a process of its own, run from `cwd` (for its exit status and error line)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "bench", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def bench_here(cwd, monkeypatch, capsys, *args) -> str:
    """`mooring bench ARGS` run from `cwd` in this process, for a benchmark that runs nothing on Ray here (its fresh
    processes are the benchmark's own): what it printed."""
    from orchestrator.cli import main

    monkeypatch.chdir(cwd)
    capsys.readouterr()
    assert main(["bench", *args]) == 0
    return capsys.readouterr().out


def ratios(text: str) -> dict[str, float]:
    """{row label: × the first reference} from a benchmark's markdown table."""
    rows = re.findall(r"^\| ([^|]+?) \| [^|]+ \| ([0-9.]+)", text, flags=re.M)
    return {label: float(ratio) for label, ratio in rows}


@pytest.mark.ray
def test_tiny_client_benchmark_reports_ratios_and_writes_nothing_where_it_runs(tmp_path):
    """As a process of its own, with a Ray instance of its own: run here, it would start the session's instance this
    early, and the runs of tests/test_checkpoint_policy.py (next in the suite, asking for no Ray) would then go on
    it, a coordinator actor each, rather than in the test's process."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = bench(cwd, "tiny", "--size", "12/4", "--rounds", "3", "--repeats", "1", "--actors", "1", "--partition",
                 "dirichlet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    found = ratios(out)
    assert found["efficient plain loop (fresh process, 1 thread)"] == 1.0
    assert found["vectorised loop, torch.func (fresh process, 1 thread)"] > 0
    # 12 clients of one step: a small round, so resources.clients_on = auto trains them in the coordinator
    assert found["Mooring's run_in_process (1 thread, no Ray)"] > 0
    assert found["Mooring, 1 actor, clients in the coordinator"] > 0
    assert "12 clients, 4 per round, Dirichlet α = 0.1, 3 rounds" in out
    assert "IID" not in out  # the partitions asked for only
    # after warm-up: round 3 alone, each row against the plain loop's round 3
    later = dict(re.findall(r"^\| ([^|]+?) \|(?: [^|]* \|){3} [0-9.]+ \| ([0-9.]+) \|", out, flags=re.M))
    assert float(later["efficient plain loop (fresh process, 1 thread)"]) == 1.0
    assert float(later["Mooring, 1 actor, clients in the coordinator"]) > 0
    assert "after warm-up: the mean of rounds 3 to 3." in out
    assert "Reproduce: `mooring bench tiny --size 12/4 --rounds 3 --repeats 1 --actors 1 --partition dirichlet`" in out
    assert list(cwd.iterdir()) == []  # no ./mlruns, partitions or run directories left behind


@pytest.mark.ray
def test_whole_run_benchmark_times_a_whole_mooring_run_against_the_bare_process(tmp_path, monkeypatch, capsys):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = bench_here(cwd, monkeypatch, capsys, "whole-run", "--size", "12/4", "--rounds", "2", "--repeats", "1",
                     "--actors", "1")
    found = ratios(out)
    assert found["efficient plain loop, whole process"] == 1.0
    # no cluster given and rounds this small: the run needs no Ray and starts none
    assert found["`mooring run`, no Ray: clients in the driver's process, whole process"] > 0
    assert "Reproduce: `mooring bench whole-run --size 12/4 --rounds 2 --repeats 1 --actors 1`" in out
    # the breakdown of one more run: its start-up phases, and the CPU seconds of its processes by kind
    assert re.search(r"^start: client actors ready and loaded +1 ", out, flags=re.M)
    cpu = re.search(r"CPU seconds, sampled: `mooring run` ([0-9.]+) \(.*the driver \(`mooring run`\) ([0-9.]+).*\); "
                    r"the plain loop's process ([0-9.]+)\.", out)
    assert cpu and float(cpu.group(1)) >= float(cpu.group(2)) > 0 and float(cpu.group(3)) > 0
    assert list(cwd.iterdir()) == []


def test_tiny_report_sets_a_round_after_warm_up_against_both_loops_and_says_where_there_is_none():
    from benchmarks.tiny_clients import BARE, LIMIT, after_warm_up, report

    assert after_warm_up([0.5, 0.3, 0.2, 0.4]) == pytest.approx(0.3)  # rounds 3 and 4
    assert after_warm_up([0.5, 0.3]) is None
    m = {"rounds": 4, "repeats": 1, "command": "mooring bench tiny",
         "cases": {("100/10", "IID"): {BARE: 0.10, LIMIT: 0.05, "Mooring, 2 actors": 0.06}},
         "after_warm_up": {("100/10", "IID"): {BARE: 0.020, LIMIT: 0.010, "Mooring, 2 actors": 0.011}},
         "targets": {("100/10", "Mooring, 2 actors"): (BARE, 0.6)}}
    text = report(m)
    assert "| Mooring, 2 actors | 0.060 | 0.60 | 1.20 | 11.00 | 0.55 | 1.10 | ≤ 0.6 × the plain loop |" in text
    assert f"| {BARE} | 0.100 | 1.00 | 2.00 | 20.00 | 1.00 | 2.00 |  |" in text
    m["after_warm_up"][("100/10", "IID")] = {BARE: None, LIMIT: None, "Mooring, 2 actors": None}
    assert "| Mooring, 2 actors | 0.060 | 0.60 | 1.20 | – | – | – | ≤ 0.6 × the plain loop |" in report(m)


def test_fixed_cost_report_takes_the_plain_loop_off_each_row():
    from benchmarks.fixed_cost import report
    from benchmarks.tiny_clients import BARE

    m = {"rounds": 100, "repeats": 3, "command": "mooring bench fixed-cost",
         "cases": {("100/1", "IID"): {BARE: 0.05, "Mooring, 2 actors": 0.25}}}
    rows = re.findall(r"^\| ([^|]+?) \| ([0-9.]+) \| ([0-9.]*) \|", report(m), flags=re.M)
    assert rows == [(BARE, "0.50", ""), ("Mooring, 2 actors", "2.50", "2.00")]
    assert "| Mooring, 2 actors | 2.50 | 2.00 | ≤ 3 ms a round |" in report(m)


def test_fixed_cost_report_sets_round_1_against_round_10_each_the_fastest_of_the_repeats():
    from benchmarks.fixed_cost import report
    from benchmarks.tiny_clients import BARE

    slow, fast = [0.004] + [0.002] * 8 + [0.0012] + [0.002] * 2, [0.003] + [0.002] * 8 + [0.001] + [0.002] * 2
    m = {"rounds": 12, "repeats": 2, "command": "mooring bench fixed-cost",
         "cases": {("100/1", "IID"): {BARE: 0.005, "Mooring, 2 actors": 0.025}},
         "per_round": {("100/1", "IID", "Mooring, 2 actors"): [slow, fast]}}
    assert "| Mooring, 2 actors | 3.00 | 1.00 | 3.00 | ≤ 1.5 |  |  |  |" in report(m)  # no coordinator clock kept
    own = [0.0011] + [0.0008] * 8 + [0.0007] + [0.0008] * 2
    m["coordinator_per_round"] = {("100/1", "IID", "Mooring, 2 actors"): [own, [0.0015] + own[1:]]}
    assert "| Mooring, 2 actors | 3.00 | 1.00 | 3.00 | ≤ 1.5 | 1.10 | 0.70 | 1.57 |" in report(m)
    assert "round 1, ms" not in report(m | {"rounds": 9})
    m["per_round"][("100/1", "IID", BARE)] = [[0.0006] + [0.0005] * 8 + [0.0004] + [0.0005] * 2]
    assert f"| {BARE} | 0.60 | 0.40 | 1.50 |  |  |  |  |" in report(m)  # no target, no coordinator


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


def test_engine_benchmark_reports_both_engines_and_their_ratio(tmp_path, monkeypatch, capsys):
    """One process, no Ray: vectorized against sequential on this machine's device, at a tiny size."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = bench_here(cwd, monkeypatch, capsys, "engine", "--size", "4/3", "--samples", "8", "--rounds", "1", "--set",
                     "train.batch_size=4")
    rates = dict(re.findall(r"^\| (sequential|vectorized) \| ([0-9.]+) \|", out, flags=re.M))
    assert set(rates) == {"sequential", "vectorized"} and all(float(r) > 0 for r in rates.values())
    assert float(re.search(r"vectorized / sequential: ([0-9.]+)×", out).group(1)) > 0
    assert "2 steps of batch 4 per client update" in out
    assert "Reproduce: `mooring bench engine --size 4/3 --samples 8 --rounds 1 --set train.batch_size=4`" in out
    assert list(cwd.iterdir()) == []
