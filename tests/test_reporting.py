"""What a researcher reads: the compare table and its JSON, run summaries, progress lines, the plot, and the
MLflow records they come with (a real SQLite store, queried back through MlflowClient)."""
from __future__ import annotations

import io
import json

import pytest

from orchestrator.driver.round_loop import backfill_tracking
from orchestrator.driver.run_dir import RunLog
from orchestrator.reporting.plots import COLOURS, method_styles, plot_comparison, seed_curves, sync_rounds
from orchestrator.reporting.progress import Progress, clock
from orchestrator.reporting.results import headline, summary_metrics
from orchestrator.reporting.tracking import Tracker
from pipelines.compare import parent_metrics
from pipelines.comparison import Comparison, format_table, summary_table


def history(global_accs=None, personal_accs=None, bytes_per_round=100):
    rounds = len(global_accs or personal_accs)
    out = []
    for r in range(rounds):
        m = {"round": r + 1, "clients": 2, "bytes_up": bytes_per_round, "bytes_total": bytes_per_round * (r + 1)}
        if global_accs:
            m["accuracy"] = global_accs[r]
        if personal_accs:
            m["personalized_accuracy"] = personal_accs[r]
        out.append(m)
    return out


def comparison(runs: dict[str, list[list[dict]]]) -> Comparison:
    comp = Comparison()
    for variant, histories in runs.items():
        for seed, h in enumerate(histories):
            comp.histories.setdefault(variant, {})[seed] = h
            comp.rows.append({"variant": variant, "seed": seed, **summary_metrics(h), "wall_seconds": 1.0})
    return comp


# --------------------------------------------------------------------------- global vs personalized
def test_a_method_without_a_global_model_has_no_global_accuracy():
    local = history(personal_accs=[0.5, 0.9])
    assert headline(local[-1]) is None
    s = summary_metrics(local)
    assert s["final_global_accuracy"] is None and s["best_global_accuracy"] is None
    assert s["final_personalized_accuracy"] == 0.9
    both = summary_metrics(history([0.4, 0.6, 0.5], [0.7, 0.8, 0.75]))
    assert (both["final_global_accuracy"], both["best_global_accuracy"]) == (0.5, 0.6)
    assert (both["final_personalized_accuracy"], both["best_personalized_accuracy"]) == (0.75, 0.8)
    assert both["bytes_sent"] == 300


def test_table_never_puts_a_personalized_figure_under_the_global_heading():
    comp = comparison({"fedavg": [history([0.4, 0.8125])], "local": [history(personal_accs=[0.5, 0.9375])],
                       "fednh": [history([0.3, 0.6875], [0.6, 0.71875])]})
    table = {row["variant"]: row for row in summary_table(comp)}
    assert table["local"]["global_accuracy_mean"] is None and table["local"]["personalized_accuracy_mean"] == 0.9375
    assert table["fedavg"]["personalized_accuracy_mean"] is None
    text = format_table(summary_table(comp))
    header, *rows, legend = text.splitlines()
    seeds_end = header.index("seeds") + len("seeds")
    global_end = header.index("global accuracy") + len("global accuracy")
    personal_end = header.index("personalized accuracy") + len("personalized accuracy")
    cells = {line.split()[0]: (line[seeds_end:global_end].strip(), line[global_end:personal_end].strip())
             for line in rows}
    assert cells["local"] == ("–", "93.75 %")
    assert cells["fedavg"] == ("81.25 %", "–")
    assert cells["fednh"] == ("68.75 %", "71.88 %")
    assert "±" not in "\n".join(rows)  # one seed: no spread to show
    assert "MB sent" in legend and "personalized" in legend
    as_json = json.loads(json.dumps(summary_table(comp)))
    assert [r["global_accuracy_mean"] for r in as_json] == [0.8125, None, 0.6875]


def test_several_seeds_show_mean_and_std():
    comp = comparison({"fedavg": [history([0.5, 0.8]), history([0.5, 0.6])]})
    row = summary_table(comp)[0]
    # the sample standard deviation: √(((0.8 − 0.7)² + (0.6 − 0.7)²) / (2 − 1)) = 0.1414
    assert row["global_accuracy_mean"] == pytest.approx(0.7) and row["global_accuracy_std"] == pytest.approx(0.02 ** 0.5)
    assert "70.00 ± 14.14 %" in format_table([row])
    assert "sample standard deviation (n − 1)" in format_table([row])
    assert parent_metrics([row])["fedavg.global_accuracy_mean"] == pytest.approx(0.7)
    assert "fedavg.personalized_accuracy_mean" not in parent_metrics([row])
    assert parent_metrics([row | {"variant": "fedavg z=1"}])["fedavg z_1.global_accuracy_mean"] == pytest.approx(0.7)


# ------------------------------------------------------------------------------------------ progress
def test_progress_off_a_terminal_is_one_line_per_step_at_most_every_few_seconds():
    out = io.StringIO()
    shown = Progress(3, "rounds", stream=out, every=0.0, tty=False)
    for acc in ("10 %", "20 %", "30 %"):
        shown.advance(1, f"global {acc}")
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[:2] for line in lines] == [["rounds 1/3", "global 10 %"], ["rounds 2/3", "global 20 %"],
                                                       ["rounds 3/3", "global 30 %"]]
    assert "ETA" in lines[0]
    sparse = io.StringIO()
    shown = Progress(4, "runs", stream=sparse, every=3600.0, tty=False)
    for _ in range(4):
        shown.advance()
    assert [line.split("  ")[0] for line in sparse.getvalue().splitlines()] == ["runs 1/4", "runs 4/4"]
    assert clock(3725) == "1:02:05" and clock(7) == "0:07"


# ---------------------------------------------------------------------------------------------- plots
def test_every_method_gets_its_own_colour_and_line_style():
    names = [f"m{i}" for i in range(100)]
    styles = method_styles(names)
    pairs = {(s["color"], str(s["linestyle"]), s.get("marker")) for s in styles.values()}
    assert len(pairs) == 100
    assert len({styles[n]["color"] for n in names[:len(COLOURS)]}) == len(COLOURS)
    assert len({str(styles[n]["linestyle"]) for n in names[:7]}) == 7


def test_sync_markers_and_seed_alignment():
    lite = [{"round": r, "clients": 2, "bytes_up": 2000 if r % 5 == 0 else 20} for r in range(1, 11)]
    assert sync_rounds(lite) == [5, 10]
    assert sync_rounds(history([0.1, 0.2, 0.3])) == []
    rounds, values = seed_curves([history([0.1, 0.2]), history([0.3, 0.4, 0.5])], "accuracy")
    assert rounds == [1, 2] and values.tolist() == [[0.1, 0.2], [0.3, 0.4]]


def test_the_comparison_plot_has_a_panel_per_kind_of_accuracy(tmp_path):
    from PIL import Image

    curves = {"fedavg": {0: history([0.4, 0.6]), 1: history([0.5, 0.7])}, "local": [history(personal_accs=[0.5, 0.9])]}
    both = Image.open(plot_comparison(curves, tmp_path / "both.png", title="t"))
    one = Image.open(plot_comparison({"fedavg": history([0.4, 0.6])}, tmp_path / "one.png", title="t"))
    assert both.size[0] > 1.6 * one.size[0]  # two panels side by side, one legend


def test_a_plain_savefig_keeps_the_legend_inside_the_saved_figure(tmp_path):
    """`comp.plot().savefig(path)` and `run.plot().savefig(path)` save the whole figure, without the command
    line's tight bounding box: the legend (every method's name) must lie inside it, not past its right edge."""
    from PIL import Image

    from orchestrator.reporting.plots import comparison_figure

    curves = {"fedavg": {0: history([0.4, 0.6]), 1: history([0.5, 0.7])},
              "a_method_with_a_long_name": [history([0.3, 0.5], personal_accs=[0.5, 0.9])]}
    fig = comparison_figure(curves, "a title")
    fig.savefig(tmp_path / "plain.png", dpi=100)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()][:2] == ["fedavg", "a_method_with_a_long_name"]
    box, page = legend.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert all(box.x0 >= ax.get_window_extent().x1 for ax in fig.axes)  # beside the panels, not over the data
    assert Image.open(tmp_path / "plain.png").size == (round(page.width), round(page.height))


# ------------------------------------------------------------------------------------------- MLflow
def test_experiment_opens_in_the_model_training_view(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = Tracker(uri, "exp")
    tracker.start("r", {}, {})
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    tracker.log_table([{"variant": "a", "acc": 0.5}, {"variant": "b", "acc": None}], "summary_table.json")
    assert "summary_table.json" in {a.path for a in client.list_artifacts(tracker.run_id)}


def test_a_resumed_run_backfills_the_rounds_its_mlflow_history_lacks(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = Tracker(uri, "exp")
    tracker.start("r", {}, {})
    tracker.log_metrics({"round": 1, "accuracy": 0.1}, step=1)
    tracker.flush()  # rounds 2–4 were buffered when the run was killed: never written
    log = RunLog(str(tmp_path / "run"))
    log.write_metrics([{"round": r, "accuracy": r / 10} for r in range(1, 5)])
    tracked = backfill_tracking(tracker, log, resumed_at=3)  # checkpoint at round 3: round 4 is re-run
    assert tracked == {1, 2, 3}
    client = MlflowClient(tracking_uri=uri)
    assert sorted(m.step for m in client.get_metric_history(tracker.run_id, "accuracy")) == [1, 2, 3]
    assert [m.value for m in sorted(client.get_metric_history(tracker.run_id, "accuracy"), key=lambda m: m.step)] \
        == [0.1, 0.2, 0.3]


def test_the_title_says_what_is_compared():
    from orchestrator.experiment.config import load_config
    from orchestrator.reporting.plots import experiment_title

    cfg = load_config("configs/default.yaml", ["data.partition.kind=dirichlet", "data.partition.alpha=0.3",
                                               "data.num_clients=7"])
    assert experiment_title(cfg, [0, 1]) == f"{cfg.name}: digits, 7 clients, dirichlet α=0.3, seeds 0,1"
    assert experiment_title(cfg, [2], "fedavg") == f"{cfg.name}: fedavg on digits, 7 clients, dirichlet α=0.3, seed 2"
