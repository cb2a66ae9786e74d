"""The global model judged client by client (eval.per_client): its figures against a hand computation, where the
run computes them, and how compare shows them (columns) and pairs them (--metric, the paired test)."""
from __future__ import annotations

import json
import math

import pytest

from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.reporting.results import summarize
from orchestrator.server.evaluation import (
    named_for_split,
    per_client_summary,
    personalized_eval_clients,
    personalized_summary,
    worst_fraction_mean,
)
from orchestrator.server.federation import Server, in_process_calls
from pipelines.comparison import Comparison, format_table, summary_table
from pipelines.paired import format_paired, paired_rows

# (correct, total) of 13 clients on their own test data; client 12 has no test sample, so the figures across
# clients are over the other 12, whose accuracies are
# 0.9, 0.25, 0.5, 1.0, 0.0, 0.7, 0.75, 0.8, 0.4, 0.6, 0.9, 0.5
MADE_UP = {0: (9, 10), 1: (1, 4), 2: (3, 6), 3: (8, 8), 4: (0, 5), 5: (7, 10), 6: (6, 8), 7: (4, 5), 8: (2, 5),
           9: (3, 5), 10: (9, 10), 11: (1, 2), 12: (0, 0)}


def test_the_figures_across_clients_by_hand():
    figures = per_client_summary(MADE_UP)
    # sample-weighted: every client's test samples pooled, 53 correct of 78
    assert figures["client_accuracy"] == pytest.approx(53 / 78, abs=1e-12)
    # each client once: the sum of the 12 accuracies is 7.3
    assert figures["client_accuracy_mean"] == pytest.approx(7.3 / 12, abs=1e-12)
    # population variance Σ(a − 73/120)² / 12 = 229/2880 (in fractions)
    assert figures["client_accuracy_std"] == pytest.approx(math.sqrt(229 / 2880), abs=1e-12)
    # worst 10 % of 12 clients: the ceiling of 1.2, the 2 lowest, 0.0 and 0.25
    assert figures["worst10_accuracy"] == pytest.approx(0.125, abs=1e-12)
    assert figures["client_eval_clients"] == 13
    # the personalized models' figures are the same computation, under their own names
    own = personalized_summary({c: {"acc": pair} for c, pair in MADE_UP.items()})
    assert (own["personalized_accuracy"], own["personalized_accuracy_client_mean"],
            own["personalized_accuracy_client_std"], own["personalized_worst10_accuracy"]) == (
        figures["client_accuracy"], figures["client_accuracy_mean"], figures["client_accuracy_std"],
        figures["worst10_accuracy"])


@pytest.mark.parametrize("n, counted", [(1, 1), (5, 1), (10, 1), (11, 2), (15, 2), (20, 2), (29, 3), (30, 3), (31, 4)])
def test_the_worst_decile_rounds_up_and_keeps_at_least_one_client(n, counted):
    accuracies = [i / 100 for i in range(n, 0, -1)]  # the lowest is 0.01, then 0.02, ...
    assert worst_fraction_mean(accuracies) == pytest.approx(sum(range(1, counted + 1)) / 100 / counted)
    assert math.isnan(worst_fraction_mean([]))


def test_on_the_validation_split_the_figures_are_renamed():
    renamed = named_for_split(per_client_summary(MADE_UP), "validation")
    assert {"val_client_accuracy", "val_client_accuracy_mean", "val_client_accuracy_std",
            "val_worst10_accuracy", "client_eval_clients"} == set(renamed)


def config(tmp_path, *overrides: str):
    return load_config("configs/default.yaml", ["data.num_clients=6", "train.rounds=1", "train.local_epochs=1",
                                                f"data.partitions_dir={tmp_path}", *overrides])


def test_a_round_judges_the_global_model_on_each_sampled_client_s_own_test_data(tmp_path):
    cfg = config(tmp_path, "algorithm.name=fedavg", "eval.per_client.enabled=true", "eval.per_client.sample=4")
    data = prepare_data(cfg)
    host, server = ClientHost(cfg, data, list(range(6))), Server(cfg, data)
    metrics = server.run_round(in_process_calls(host))
    sampled = personalized_eval_clients(cfg.seed, 6, 4)  # the same draw as eval.personalized_clients = 4
    assert server.per_client_clients == sampled and len(sampled) == 4
    from tasks.algorithms.base import count_correct

    model = server.algorithm.global_model(server.state)  # counted here, apart from the host's evaluation
    own = {c: (count_correct(model, data.client_data(c).x_test, data.client_data(c).y_test),
               len(data.client_data(c).y_test)) for c in sampled}
    assert all(total > 0 for _, total in own.values())
    accuracies = sorted(c / n for c, n in own.values())
    assert metrics["worst10_accuracy"] == pytest.approx(accuracies[0], abs=1e-12)  # 10 % of 4 clients: one
    assert metrics["client_accuracy_mean"] == pytest.approx(sum(accuracies) / 4, abs=1e-12)
    assert metrics["client_accuracy"] == pytest.approx(sum(c for c, _ in own.values()) / sum(n for _, n in own.values()),
                                                       abs=1e-12)
    assert metrics["client_eval_clients"] == 4
    result = summarize(cfg, server.history, wall_seconds=0.0, mlflow_run_id=None, run_dir=str(tmp_path))
    assert result.fairness["worst10_accuracy"] == metrics["worst10_accuracy"]
    assert result.fairness["personalized_worst10_accuracy"] is None  # fedavg has no personal models
    assert json.loads(json.dumps(result.to_json()))["fairness"]["client_accuracy_std"] == pytest.approx(
        metrics["client_accuracy_std"])


def test_off_by_default_and_silent_for_a_method_without_a_global_model(tmp_path):
    for overrides in (["algorithm.name=fedavg"], ["algorithm.name=local", "eval.per_client.enabled=true"]):
        cfg = config(tmp_path, *overrides)
        data = prepare_data(cfg)
        metrics = Server(cfg, data).run_round(in_process_calls(ClientHost(cfg, data, list(range(6)))))
        assert not {"client_accuracy", "worst10_accuracy", "client_eval_clients"} & set(metrics)


def test_more_clients_to_judge_than_there_are_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^configs/default.yaml: eval.per_client.sample = 7: more clients to "
                                          r"evaluate than data.num_clients = 6$"):
        config(tmp_path, "eval.per_client.sample=7")


# ------------------------------------------------------------------------------------------- compare
def comparison(figures: dict[str, list[tuple[float, float]]]) -> Comparison:
    """variant → per seed (worst10_accuracy, client_accuracy_std), as finished runs' rows and histories."""
    comp = Comparison()
    for variant, seeds in figures.items():
        for seed, (worst, spread) in enumerate(seeds):
            history = [{"round": 1, "accuracy": 0.5, "worst10_accuracy": worst, "client_accuracy_std": spread}]
            comp.histories.setdefault(variant, {})[seed] = history
            comp.rows.append({"variant": variant, "seed": seed, "worst10_accuracy": worst,
                              "client_accuracy_std": spread, "final_global_accuracy": 0.5, "bytes_sent": 1e6,
                              "wall_seconds": 1.0, "final_personalized_accuracy": None})
    return comp


def test_paired_on_a_fairness_figure_and_a_spread_where_lower_is_better():
    comp = comparison({"fedavg": [(0.20, 0.30), (0.30, 0.25), (0.10, 0.20)],
                       "qffl": [(0.30, 0.20), (0.35, 0.30), (0.25, 0.10)]})
    worst, spread = paired_rows(comp, "fedavg", ["worst10_accuracy", "client_accuracy_std"])
    assert (worst.variant, worst.metric, worst.lower_is_better) == ("qffl", "worst10_accuracy", False)
    assert worst.diffs == pytest.approx([0.10, 0.05, 0.15]) and worst.wins == 3
    assert spread.diffs == pytest.approx([-0.10, 0.05, -0.10]) and spread.lower_is_better
    assert spread.wins == 2  # lower wins: seeds 0 and 2
    from scipy.stats import ttest_1samp

    assert spread.p_value == pytest.approx(ttest_1samp([0.10, -0.05, 0.10], 0, alternative="greater").pvalue)
    text = format_paired([worst, spread], "fedavg", ["worst10_accuracy", "client_accuracy_std"])
    assert "+10.00 +5.00 +15.00" in text and "client_accuracy_std ↓" in text and "3/3" in text and "2/3" in text
    assert "no variant" not in text
    [bytes_row] = paired_rows(comp, "fedavg", ["bytes_sent"])  # a summary figure of the rows, in its own units
    assert bytes_row.lower_is_better and bytes_row.diffs == [0.0, 0.0, 0.0] and bytes_row.wins == 0
    missing = format_paired([], "fedavg", ["personalized_worst10_accuracy"])
    assert "personalized_worst10_accuracy: no variant and fedavg have it for a common seed" in missing


def test_the_table_shows_the_figures_chosen_as_columns():
    comp = comparison({"fedavg": [(0.20, 0.30), (0.30, 0.25)], "qffl": [(0.30, 0.20), (0.40, 0.30)]})
    table = {row["variant"]: row for row in summary_table(comp)}  # default: the fairness figures logged
    assert table["qffl"]["worst10_accuracy_mean"] == pytest.approx(0.35)
    assert table["qffl"]["worst10_accuracy_std"] == pytest.approx(math.sqrt(0.005))  # (±0.05)² · 2 / (2 − 1)
    assert table["fedavg"]["client_accuracy_std_mean"] == pytest.approx(0.275)
    header, fedavg, qffl, *_ = format_table(list(table.values())).splitlines()
    assert header.split()[-2:] == ["worst10_accuracy", "client_accuracy_std"]
    assert "35.00 ± 7.07 %" in qffl and "25.00 ± 7.07 %" in fedavg
    chosen = summary_table(comp, ["bytes_sent"])
    assert "worst10_accuracy_mean" not in chosen[0] and chosen[0]["bytes_sent_mean"] == 1e6
    assert format_table(chosen, ["bytes_sent"]).splitlines()[1].endswith("1e+06 ± 0")


@pytest.mark.parametrize("argv, line", [
    (["--baseline", "fedavg", "--metric", "worst10"],
     "error: --metric worst10: not a summary figure; figures: final_global_accuracy,"),
    (["--baseline", "fedavg", "--metric", "accuracy_worst:median"],
     "error: --metric accuracy_worst:median: expected KEY:AGG, AGG one of final, best, last5, top5, last5_sync"),
    (["--metric", "worst10_accuracy"], "error: --metric worst10_accuracy: the paired test needs --baseline VARIANT"),
    (["--baseline", "fedavg", "--metric", "worst10_accuracy"],
     "error: --metric worst10_accuracy: variant fedavg does not judge the global model client by client; add --set "
     "eval.per_client.enabled=true (docs/fairness.md)"),
    (["--columns", "client_accuracy_std"],
     "error: --columns client_accuracy_std: variant fedavg does not judge the global model client by client;"),
])
def test_a_figure_compare_cannot_show_is_refused_in_one_line(capsys, tmp_path, argv, line):
    from orchestrator.cli import main

    rc = main(["compare", "configs/default.yaml", "--algorithms", "fedavg,fedprox", *argv, "--out",
               str(tmp_path / "out"), "--address", "127.0.0.1:1", "--set", f"data.partitions_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith(line), err


@pytest.mark.ray
def test_compare_pairs_the_worst_decile_against_the_baseline(ray_session, workdir, tmp_path, capsys):
    from orchestrator.cli import main

    out = tmp_path / "out"
    rc = main(["compare", "configs/default.yaml", "--algorithms", "fedavg,fedprox", "--seeds", "0,1", "--quiet",
               "--baseline", "fedavg", "--metric", "worst10_accuracy", "--out", str(out),
               "--output-json", str(tmp_path / "table.json"),
               *[f"--set={o}" for o in workdir + ["data.num_clients=4", "train.rounds=2", "train.local_epochs=1",
                                                  "eval.per_client.enabled=true", "resources.clients_on=actors"]]])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    histories = json.loads((out / "histories.json").read_text())
    worst = {(v, int(s)): h[-1]["worst10_accuracy"] for v, seeds in histories.items() for s, h in seeds.items()}
    diffs = [worst[("fedprox", s)] - worst[("fedavg", s)] for s in (0, 1)]
    [paired] = json.loads((tmp_path / "table.json").read_text())["paired"]
    assert (paired["variant"], paired["accuracy"], paired["seeds"]) == ("fedprox", "worst10_accuracy", [0, 1])
    assert paired["diffs"] == pytest.approx(diffs)
    lines = printed.splitlines()
    assert "paired against fedavg (variant − fedavg, per seed on the same partition; accuracies in percentage " \
           "points):" in lines
    row = next(line for line in lines if line.startswith("fedprox ") and "worst10_accuracy" in line)
    assert " ".join(f"{100 * d:+.2f}" for d in diffs) in row
    header = next(line for line in lines if line.startswith("variant ") and "seeds" in line)
    assert "worst10_accuracy" in header  # the table shows the fairness columns the runs logged
    assert "worst10_accuracy" in (out / "report.html").read_text()
    import csv

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    with open(out / "runs.csv") as f:
        runs = [(r["variant"], int(r["seed"]), r["mlflow_run_id"]) for r in csv.DictReader(f)]
    for variant, seed, run_id in runs:  # each round's figure, and the run's summary
        rounds = client.get_metric_history(run_id, "worst10_accuracy")
        assert sorted({m.step for m in rounds}) == [1, 2]
        assert client.get_run(run_id).data.metrics["worst10_accuracy"] == pytest.approx(worst[(variant, seed)])


def test_a_sweep_may_optimise_a_fairness_figure_on_its_validation_split(tmp_path):
    from pipelines.sweep_config import ObjectiveConfig
    from pipelines.sweep_objective import check_objective, final_score, round_value

    history = [{"round": 1, "val_worst10_accuracy": 0.2, "val_client_accuracy_std": 0.3},
               {"round": 2, "val_worst10_accuracy": 0.4, "val_client_accuracy_std": 0.1}]
    worst = ObjectiveConfig(metric="worst10_accuracy", aggregate="best")
    assert round_value(worst, history, None) == 0.4 and final_score(worst, history, None).value == 0.4
    spread = ObjectiveConfig(metric="client_accuracy_std", direction="minimize")
    assert final_score(spread, history, None).value == 0.1
    check_objective(worst, config(tmp_path, "eval.per_client.enabled=true"), "s.yaml")
    check_objective(ObjectiveConfig(metric="personalized_worst10_accuracy"), config(tmp_path), "s.yaml")
    with pytest.raises(ConfigError, match=r"^s.yaml: objective.metric = worst10_accuracy needs "
                                          r"eval.per_client.enabled: true in the base experiment"):
        check_objective(worst, config(tmp_path), "s.yaml")
