"""`mooring compare` and the claims rule: same partition per seed, tables, plots, nested MLflow runs."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from orchestrator.driver.signals import RunInterrupted
from orchestrator.experiment.config import ClaimCheck, load_config
from orchestrator.io import checkpoint as ckpt
from pipelines.compare import compare
from pipelines.comparison import Comparison, aggregate_metric, summary_table
from pipelines.paired import paired_verdict
from tests.conftest import COMPARED


def test_metric_aggregations_by_hand():
    history = [{"round": r, "accuracy": a} for r, a in enumerate([0.1, 0.5, 0.3, 0.9, 0.2, 0.4, 0.6], 1)]
    assert aggregate_metric(history, "accuracy:final") == 0.6
    assert aggregate_metric(history, "accuracy:best") == 0.9
    assert aggregate_metric(history, "accuracy:last5") == pytest.approx((0.3 + 0.9 + 0.2 + 0.4 + 0.6) / 5)
    assert aggregate_metric(history, "accuracy:top5") == pytest.approx((0.9 + 0.6 + 0.5 + 0.4 + 0.3) / 5)
    assert aggregate_metric(history, "personalized_accuracy:final") is None


def comparison(method_finals, baseline_finals):
    comp = Comparison()
    for name, finals in (("m", method_finals), ("b", baseline_finals)):
        comp.histories[name] = {seed: [{"round": 1, "accuracy": v}] for seed, v in enumerate(finals)}
    return comp


def test_paired_rule_counts_wins_and_tests_the_mean_difference():
    check = ClaimCheck(statement="m beats b", method="m", baseline="b", max_p=0.1)
    v = paired_verdict(check, comparison([0.8, 0.7, 0.9, 0.6, 0.75], [0.7, 0.72, 0.8, 0.5, 0.7]), "accuracy:final")
    assert v.wins == 4 and v.needed_wins == 4
    assert v.diffs == pytest.approx([0.1, -0.02, 0.1, 0.1, 0.05])
    from scipy.stats import ttest_1samp

    assert v.p_value == pytest.approx(ttest_1samp(v.diffs, 0, alternative="greater").pvalue)
    assert v.holds
    harm = ClaimCheck(statement="m hurts", method="m", baseline="b", expect="worse")
    assert not paired_verdict(harm, comparison([0.8, 0.7, 0.9], [0.7, 0.72, 0.8]), "accuracy:final").holds
    three_of_five = comparison([0.8, 0.7, 0.9, 0.6, 0.6], [0.7, 0.72, 0.8, 0.5, 0.7])
    assert not paired_verdict(ClaimCheck(statement="", method="m", baseline="b"), three_of_five, "accuracy:final").holds


@pytest.mark.ray
def test_compare_runs_every_variant_on_the_same_partition(finished_comparison):
    from mlflow.tracking import MlflowClient

    base, comp, out = finished_comparison
    variants = COMPARED
    assert [(r["variant"], r["seed"]) for r in comp.rows] == [(v, s) for s in (0, 1) for v in variants]
    table = {row["variant"]: row for row in summary_table(comp)}
    finals = [r["final_global_accuracy"] for r in comp.rows if r["variant"] == "fedprox"]
    assert table["fedprox"]["global_accuracy_mean"] == pytest.approx(np.mean(finals))
    assert table["fedprox"]["global_accuracy_std"] == pytest.approx(np.std(finals, ddof=1))
    assert table["local"]["global_accuracy_mean"] is None  # no global model: never its personalized figure
    assert table["local"]["personalized_accuracy_mean"] is not None
    for name in ("runs.csv", "runs.parquet", "summary.csv", "summary.parquet", "accuracy.png"):
        assert (out / name).stat().st_size > 0
    assert set(json.loads((out / "histories.json").read_text())) == set(variants)
    client = MlflowClient(tracking_uri=base.tracking.uri)
    runs = [client.get_run(r["mlflow_run_id"]) for r in comp.rows]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {comp.parent_run_id}
    # artifacts beside the SQLite store, not in ./mlruns of the directory the tests run from
    assert all(r.info.artifact_uri.startswith((out.parent / "mlartifacts").as_uri()) for r in runs)
    for seed in (0, 1):
        hashes = {r.data.tags["partition_hash"] for r, row in zip(runs, comp.rows) if row["seed"] == seed}
        assert len(hashes) == 1  # every method of a seed saw exactly the same partition
    parent = {a.path for a in client.list_artifacts(comp.parent_run_id)}
    assert {"runs.csv", "summary.csv", "accuracy.png", "summary_table.json"} <= parent
    parent_metrics = client.get_run(comp.parent_run_id).data.metrics
    assert parent_metrics["fedprox.global_accuracy_mean"] == pytest.approx(np.mean(finals))
    assert "local.global_accuracy_mean" not in parent_metrics and "local.personalized_accuracy_mean" in parent_metrics
    for run in runs:  # one sortable column for every method
        assert {"final_personalized_accuracy", "bytes_sent", "wall_seconds"} <= set(run.data.metrics) or \
            {"final_global_accuracy", "best_global_accuracy", "bytes_sent", "wall_seconds"} <= set(run.data.metrics)
    local_run = next(r for r, row in zip(runs, comp.rows) if row["variant"] == "local")
    assert "final_global_accuracy" not in local_run.data.metrics
    check_report(out / "report.html", comp, runs, client)


def check_report(path, comp: Comparison, runs, client) -> None:
    """report.html: a summary row per variant, the accuracy plot inside the file, a row per run linking its MLflow
    run, and the same file on the parent run."""
    page = path.read_text()
    tables = re.findall(r"<table>(.*?)</table>", page, re.S)
    summary_rows = re.findall(r"<tr><td>(\w+)</td><td>–</td><td>2</td>", tables[0])  # no settings but the name
    assert summary_rows == ["fedprox", "local"]
    assert page.count('<img alt="Accuracy by round" src="data:image/png;base64,') == 1
    for row, run in zip(comp.rows, runs):
        link = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        assert re.search(rf"<tr><td>{row['variant']}</td><td>algorithm.name={row['variant']}</td><td>{row['seed']}</td>"
                         rf".*<a href=\"{re.escape(link)}\">", tables[1])
    assert "report.html" in {a.path for a in client.list_artifacts(comp.parent_run_id)}
    markdown = (path.parent / "report.md").read_text()  # the same report, as a page for a documentation site
    assert markdown.startswith("# ") and f"mooring compare: {len(comp.rows)} runs (seeds 0, 1), " in markdown
    assert re.findall(r"^\| (\w+) \| – \| 2 \|", markdown, re.M) == ["fedprox", "local"]
    assert "![Accuracy by round](accuracy.png)" in markdown and (path.parent / "accuracy.png").is_file()


# ------------------------------------------------------------------------------------ bad input, signals
@pytest.mark.parametrize("option, value, repeated", [("--algorithms", "fedavg,fedprox,fedavg", "fedavg"),
                                                     ("--seeds", "0,1,0", "0")])
def test_a_variant_or_seed_given_twice_is_refused_in_one_line(capsys, option, value, repeated):
    from orchestrator.cli import main

    assert main(["compare", "configs/default.yaml", option, value, "--address", "127.0.0.1:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"error: {option} {value}: {repeated} is given more than once; give "
                                              "each once"]  # before Ray: the address is never tried


@pytest.mark.parametrize("option, value, expected", [
    ("--seeds", "", "integers, for example 0,1,2"), ("--seeds", ",", "integers, for example 0,1,2"),
    ("--seeds", "0,,1", "integers, for example 0,1,2"), ("--seeds", "0,x", "integers, for example 0,1,2"),
    ("--algorithms", " , ", "names, for example fedavg,fedprox"),
])
def test_an_empty_or_bad_list_is_refused_not_read_as_the_config_s(capsys, option, value, expected):
    from orchestrator.cli import main

    assert main(["compare", "configs/default.yaml", option, value, "--address", "127.0.0.1:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"error: {option} {value!r}: expected comma-separated {expected}"]


@pytest.mark.parametrize("name, problem", [("fedxx", "unknown algorithm; allowed: creff, dann, ditto, fedavg, "),
                                           ("no_such_lab.method:MyProx", "cannot import no_such_lab.method")])
def test_an_algorithm_that_names_nothing_usable_is_refused_in_one_line(capsys, name, problem):
    from orchestrator.cli import main

    assert main(["compare", "configs/default.yaml", "--algorithms", f"fedavg,{name}", "--address", "127.0.0.1:1"]) == 2
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert out == "" and line.startswith(f"error: --algorithms: {name}: {problem}")  # before Ray


def test_an_output_json_that_is_a_directory_is_refused_before_the_comparison(capsys, tmp_path):
    from orchestrator.cli import main

    argv = ["compare", "configs/default.yaml", "--algorithms", "fedavg", "--output-json", str(tmp_path),
            "--out", str(tmp_path / "out"), "--address", "127.0.0.1:1"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"error: --output-json {tmp_path}: a directory; give the path of a file to write the result to"]
    assert not (tmp_path / "out").exists()  # before any run (and before Ray: the address is never tried)


def wait_for(paths_ready, proc_alive=lambda: True, limit: float = 300.0) -> bool:
    """True once `paths_ready()` holds (the limit only keeps a broken run from hanging the suite)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc_alive():
        if paths_ready():
            return True
        time.sleep(0.2)
    return False


def runs_of(uri: str) -> dict[str, object]:
    """Every MLflow run of the store by name (the parent is compare-NAME)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("mooring").experiment_id])}


@pytest.mark.ray
def test_a_signal_keeps_the_finished_runs_and_ends_the_others_killed(ray_session, workdir, tmp_path):
    base = load_config("configs/default.yaml", workdir + ["data.num_clients=4", "checkpoint.every=1"])
    variants = {"short": {"algorithm.name": "fedavg", "train.rounds": 2},
                "long": {"algorithm.name": "fedprox", "train.rounds": 10**12}}
    runs, short_done, compared = tmp_path / "runs", threading.Event(), threading.Event()

    def signal_once_short_is_done_and_long_checkpointed():
        if wait_for(lambda: short_done.is_set() and any(runs.glob("*-fedprox-*/checkpoints/LATEST")),
                    lambda: not compared.is_set()):
            os.kill(os.getpid(), signal.SIGTERM)  # compare() takes it: its handler is in place while runs run

    def finished(line: str) -> None:  # compare lists each run it has collected
        if line.split()[0] == "short":
            short_done.set()

    threading.Thread(target=signal_once_short_is_done_and_long_checkpointed, daemon=True).start()
    try:
        with pytest.raises(RunInterrupted) as stopped:
            compare(base, variants, [0], tmp_path / "out", parallel=2, echo=finished, progress=False)
    finally:
        compared.set()
    [long_dir] = runs.glob("*-fedprox-*")
    assert stopped.value.signum == signal.SIGTERM
    assert str(stopped.value) == (f"stopped; 1 of 2 runs finished, their tables in {tmp_path / 'out'}; long seed 0: "
                                  f"continue with `mooring run --resume {long_dir}`")
    assert ckpt.checkpoint_to_resume(str(long_dir))  # verified
    with open(tmp_path / "out" / "runs.csv") as f:
        assert [row["variant"] for row in csv.DictReader(f)] == ["short"]
    statuses = {name: run.info.status for name, run in runs_of(base.tracking.uri).items()}
    assert statuses == {"compare-default short,long": "KILLED", "default-short-s0 rounds=2": "FINISHED",
                        "default-long-s0 rounds=1000000000000": "KILLED"}  # named by what differs


@pytest.mark.ray
def test_sigterm_stops_mooring_compare_in_one_line_with_its_runs_killed(ray_session, workdir, tmp_path):
    runs, uri = tmp_path / "runs", workdir[2].split("=", 1)[1]
    sets = [*workdir, "data.num_clients=4", "train.rounds=1000000000000", "checkpoint.every=1"]
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "compare", "configs/default.yaml",
                             "--algorithms", "fedavg", *[f"--set={s}" for s in sets], "--out", str(tmp_path / "out"),
                             "--quiet", "--address", ray_session.get_runtime_context().gcs_address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: any(runs.glob("*/checkpoints/LATEST")), lambda: proc.poll() is None), \
            proc.communicate()[1][-2000:]
        assert runs_of(uri)["default-fedavg-s0 num_clients=4 rounds=1000000000000"].info.status == "RUNNING"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    [run_dir] = runs.iterdir()
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err and "ray::" not in err, err
    assert err.strip().splitlines()[-1] == ("interrupted: stopped; none of the 1 runs finished, no tables written; "
                                            f"fedavg seed 0: continue with `mooring run --resume {run_dir}`")
    assert not (tmp_path / "out").exists()
    statuses = {name: run.info.status for name, run in runs_of(uri).items()}
    assert statuses == {"compare-default fedavg num_clients=4 rounds=1000000000000": "KILLED",  # --set, not paths
                        "default-fedavg-s0 num_clients=4 rounds=1000000000000": "KILLED"}


def test_all_algorithms_is_every_registered_method_but_the_protocol_variants():
    from pipelines.compare import every_method
    from tasks.algorithms import ALGORITHMS

    methods = every_method()
    assert {"fedavg", "fedprox", "moon", "local", "fedproto", "fedfa", "fedfm", "fedsa", "feddebias", "fednh"} <= set(
        methods)
    variants = set(ALGORITHMS.names()) - set(methods)
    assert variants == {name for name in ALGORITHMS.names() if ALGORITHMS.get(name).protocol_variant}
    assert {"fedavg_pm", "local_pm", "fedavg_periodic"} <= variants


# ------------------------------------------------------------------------- paired statistics, variants
def test_paired_differences_against_a_baseline_by_hand():
    from pipelines.paired import format_paired, paired_rows

    comp = comparison([0.80, 0.70, 0.90], [0.70, 0.72, 0.80])  # m, b: diffs +0.10, −0.02, +0.10
    [row] = paired_rows(comp, "b")
    assert (row.variant, row.metric, row.seeds, row.wins) == ("m", "global", [0, 1, 2], 2)
    assert row.diffs == pytest.approx([0.10, -0.02, 0.10]) and row.mean == pytest.approx(0.06)
    # s = √(((0.04)² + (0.08)² + (0.04)²) / 2) = √0.0048; t(0.975, 2) = 4.302653; half = t · s / √3 = 0.172106
    half = 4.302653 * 0.0048 ** 0.5 / 3 ** 0.5
    assert row.interval == pytest.approx((0.06 - half, 0.06 + half), abs=1e-6)
    from scipy.stats import ttest_1samp

    assert row.p_value == pytest.approx(ttest_1samp([0.10, -0.02, 0.10], 0, alternative="greater").pvalue)
    text = format_paired([row], "b")
    assert "+10.00 -2.00 +10.00" in text and "+6.00" in text and f"[{100 * (0.06 - half):+.2f}, " in text
    assert "2/3" in text


def test_variant_labels_overrides_and_files_are_parsed(tmp_path):
    from pipelines.compare import parse_variant, read_variants_file
    from pipelines.comparison import format_table

    assert parse_variant("scaffold_sgd=fedprox train.optimizer.momentum=0 algorithm.fedprox.mu=0.5") == (
        "scaffold_sgd", {"algorithm.name": "fedprox", "train.optimizer.momentum": 0, "algorithm.fedprox.mu": 0.5})
    path = tmp_path / "variants.yaml"
    path.write_text("variants:\n  slow: {algorithm.name: fedavg, train.optimizer.lr: 0.01}\n")
    assert read_variants_file(str(path)) == {"slow": {"algorithm.name": "fedavg", "train.optimizer.lr": 0.01}}
    long = "a_very_long_variant_label_past_the_column_width"
    rows = [{"variant": v, "seeds": 1, "global_accuracy_mean": 0.5, "global_accuracy_std": None,
             "personalized_accuracy_mean": None, "personalized_accuracy_std": None, "bytes_sent": 1e6,
             "settings": f"algorithm.name={v}"} for v in ("fedavg", long)]
    header, short_row, long_row = format_table(rows).splitlines()[:3]
    seeds_end = header.index("seeds") + len("seeds")  # the columns stay aligned past the long label
    assert short_row[seeds_end - 1] == long_row[seeds_end - 1] == "1" and len(short_row) == len(long_row)
    assert f"  {long}: algorithm.name={long}" in format_table(rows)


def finished_rows(comp, variant: str, algorithm: str, accuracy: float | None) -> None:
    comp.rows.append({"variant": variant, "algorithm": algorithm, "seed": 0, "final_global_accuracy": accuracy,
                      "final_personalized_accuracy": 0.9, "bytes_sent": 1e6, "wall_seconds": 1.0})


def test_the_table_shows_settings_beyond_a_method_s_name_and_marks_a_global_model_that_needs_a_word():
    """A comparison of methods by name lists no settings under its table, a variant's own overrides are listed; the
    global accuracy of FedPer and FedRep (the shared body under the initial head) is marked and said what it is."""
    from pipelines.comparison import Comparison, format_table, summary_table

    comp = Comparison(settings={"fedavg": {"algorithm.name": "fedavg"}, "fedrep": {"algorithm.name": "fedrep"},
                                "local": {"algorithm.name": "local"},
                                "prox_mu1": {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 1.0}})
    for variant, algorithm, accuracy in (("fedavg", "fedavg", 0.8), ("fedrep", "fedrep", 0.3), ("local", "local", None),
                                         ("prox_mu1", "fedprox", 0.7)):
        finished_rows(comp, variant, algorithm, accuracy)
    lines = format_table(summary_table(comp)).splitlines()
    rows = {line.split()[0]: line for line in lines[1:5]}
    assert "80.00 % " in rows["fedavg"] and "†" not in rows["fedavg"] and "†" not in rows["local"]
    assert "30.00 % †" in rows["fedrep"]
    settings = lines[lines.index("settings (over the base config):") + 1:]
    assert settings[0] == "  prox_mu1: algorithm.name=fedprox, algorithm.fedprox.mu=1.0"
    assert settings[1].startswith("global: the server's model")  # the legend: no other variant's settings
    assert "† global model of fedrep: the shared body under the initial head, a head no client trained it with " \
           "(docs/methods/fednh.md §5.1)" in lines


@pytest.mark.parametrize("argv, line", [
    (["--algorithms", "fedavg,feddebias", "--set", "train.engine=vectorized"],
     "error: variant feddebias: train.engine: vectorized cannot train feddebias"),
    (["--variant", "a=fedavg train.optimizer.lr=-1", "--variant", "b=fedavg"],
     "error: variant a: train.optimizer.lr = -1: Input should be greater than 0"),
    (["--algorithms", "fedavg", "--baseline", "fedprox"], "error: --baseline fedprox: not a variant of this "
                                                           "comparison; variants: fedavg"),
    (["--variant", "nolabel"], "error: --variant 'nolabel': expected 'LABEL=ALGORITHM KEY=VALUE ...'"),
])
def test_an_impossible_variant_is_refused_before_any_run(capsys, tmp_path, argv, line):
    from orchestrator.cli import main

    out_dir = tmp_path / "out"
    rc = main(["compare", "configs/default.yaml", *argv, "--out", str(out_dir), "--address", "127.0.0.1:1",
               "--set", f"checkpoint.dir={tmp_path / 'runs'}"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith(line), err
    assert not out_dir.exists() and not (tmp_path / "runs").exists()  # before Ray: the address is never tried


def test_claims_refuse_an_impossible_run_of_any_setting_before_the_first(capsys, tmp_path):
    from orchestrator.cli import main

    rc = main(["claims", "configs/claims/feddebias_digits.yaml", "--set", "train.engine=vectorized",
               "--set", f"checkpoint.dir={tmp_path / 'runs'}", "--results", str(tmp_path / "results"),
               "--out", str(tmp_path / "claims.md"), "--address", "127.0.0.1:1"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    refused = ["component1", "component2", "component2_no_max", "feddebias"]  # fedavg, the baseline, runs on it
    assert rc == 2 and out == "" and [line.split(", ")[2].split(":")[0] for line in lines] == [
        f"variant {name}" for name in refused]
    assert all(line.startswith("error: feddebias_digits, setting ") and
               "train.engine: vectorized cannot train feddebias" in line for line in lines)
    assert not (tmp_path / "results").exists() and not (tmp_path / "claims.md").exists()
