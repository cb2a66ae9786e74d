"""`mooring table`: the table files validate, Kendall's τ and the report match hand computations on tiny tables,
bad input is one line, the paper budget says what data to put where and starts each method, and one tiny table
runs end to end through the real compare."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from orchestrator.cli import main as mooring
from pipelines.comparison import Comparison
from pipelines.table_config import DEFAULT_BUDGET, TableFile, load_table_file, paper_number, resolve_budget
from pipelines.table_report import Measured, kendall_tau, measured, render_report
from pipelines.tables import built_methods, plan_settings, reproduce_command, table_cells

ROOT = Path(__file__).resolve().parents[1]
# the table files; a <paper>.tuned.yaml beside one is its tuned values, validated with it (load_table_file)
TABLE_FILES = sorted(p for p in (ROOT / "configs" / "tables").glob("*.yaml") if not p.name.endswith(".tuned.yaml"))

# the shape of every paper table (rows × columns) as docs/methods/<paper>.md §7/§8 prints it
PAPER_SHAPES = {
    ("fedfm", "table3"): (8, 9), ("fedfm", "table4"): (8, 7),
    ("fedfa", "table2"): (8, 9), ("fedfa", "table1"): (8, 5),
    ("feddebias", "table10"): (9, 6),
    ("fednh", "table1"): (10, 18), ("fednh", "table2"): (9, 3),
    ("fedsa", "table1"): (8, 6), ("fedsa", "table2"): (8, 4), ("fedsa", "table3"): (8, 3),
}


# ------------------------------------------------------------------------------ hand computations
def test_kendall_tau_by_hand():
    # one discordant pair of six: (5 − 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # a tie in the paper's column: τ-b = (C − D) / √((n0 − n1)(n0 − n2)) = 2 / √(2 · 3)
    assert kendall_tau([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau([70.0], [80.0]) is None  # one row: no order
    assert kendall_tau([1, 2, 3], [5, 5, 5]) is None  # Mooring's side constant: undefined


def test_a_cells_numbers_are_the_mean_and_the_sample_std_over_seeds():
    m = measured([0.9, 0.8, None], [], 100.0)
    assert (m.mean, m.std, m.seeds) == (pytest.approx(85.0), pytest.approx(math.sqrt(50.0)), 2)  # ddof = 1
    assert measured([0.5], [], 100.0) == Measured(50.0, None, None, 1)
    assert measured([None, float("nan")], [], 100.0) is None
    assert measured([0.8, 0.6], [0.1, 0.3], 100.0).spread == pytest.approx(20.0)


@pytest.mark.parametrize(("text", "value", "spread"), [
    ("66.69±0.69", 66.69, 0.69), ("84.08 ± 6.80", 84.08, 6.80), ("82.66(2.83)", 82.66, 2.83),
    ("11,182", 11182.0, None), ("828 (1.0X)", 828.0, None), ("22.90 ± 0.30 (†)", 22.90, 0.30),
    ("—", None, None), ("", None, None), (82.47, 82.47, None)])
def test_paper_numbers_are_read_as_printed(text, value, spread):
    number = paper_number(text)
    assert (number.value, number.spread, number.text) == (value, spread, str(text).strip())


def tiny_spec(**changes) -> dict:
    """Two built rows and one not built, one column run and one not expressible."""
    raw = {
        "paper": "tiny", "title": "Tiny", "source": "by hand", "metric": "accuracy:final", "seeds": [0, 1],
        "experiment": {"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2}},
        "settings": {"s": {"data.partition.alpha": 0.5}},
        "rows": {"a": {"label": "A", "method": "fedavg", "tuned_by": "none"},
                 "b": {"label": "B", "method": "fedprox", "params": {"mu": 0.1}, "tuned_by": "the paper"},
                 "c": {"label": "C", "method": "no_such_method_yet", "tuned_by": "later"}},
        "tables": [{"id": "t1", "title": "Table 1", "paper": {"a": ["70.0±1.0", "5"], "b": ["60.0", "6"],
                                                              "c": ["65.0", "—"]},
                    "columns": [{"name": "acc", "setting": "s"}, {"name": "cost", "not_expressible": "a cost"}]}],
    }
    return raw | changes


def test_the_report_by_hand():
    spec = TableFile(**tiny_spec())
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    built = built_methods(spec)
    assert built == {"fedavg", "fedprox"}
    runs = plan_settings(spec, plan, built, [], "tiny.yaml")
    assert [(r.setting, list(r.variants)) for r in runs] == [("s", ["a", "b"])]
    assert runs[0].variants["b"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.1}
    history = {"a": {0: [{"accuracy": 0.5}, {"accuracy": 0.9}], 1: [{"accuracy": 0.8}]},
               "b": {0: [{"accuracy": 0.95}], 1: [{"accuracy": 0.95}]}}
    cells = table_cells(spec, plan, built, {"s": Comparison(histories=history)})
    text = render_report(spec, plan, cells, built, {r.setting: r.base for r in runs}, "mooring table tiny.yaml",
                         "tiny.yaml", [])
    assert "| method | acc | cost |" in text
    assert "| A | 70.0±1.0 / **85.00 ± 7.07** | 5 / – |" in text
    assert "| B | 60.0 / **95.00 ± 0.00** | 6 / – |" in text
    assert "| C | 65.0 / not built | — / – |" in text
    assert "| Kendall's τ | -1.00 (2 rows) | – |" in text  # the paper has A above B, Mooring B above A
    assert "- cost: not expressible: a cost" in text
    assert "Not built: C." in text
    assert "| B | `fedprox` | mu = 0.1 | the paper | built |" in text
    assert "| C | `no_such_method_yet` | the method's defaults | later | not built |" in text
    assert "- `s`: digits, model `mlp`, 4 clients (fraction 1 a round), 2 rounds" in text
    assert "mooring table tiny.yaml" in text


def test_a_rows_overrides_in_their_order_the_command_line_last():
    raw = tiny_spec(settings={"s": {"data.partition.alpha": 0.5, "algorithm.{algorithm}.mu": 0.2}})
    raw["rows"]["b"] |= {"overrides": {"train.rounds": 3}, "per_setting": {"s": {"algorithm.fedprox.mu": 0.3}}}
    raw["rows"]["a"]["method"] = "fedprox"
    spec = TableFile(**raw)
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    [run] = plan_settings(spec, plan, built_methods(spec), [], "tiny.yaml")
    assert run.base.data.partition.alpha == 0.5  # the setting's own keys go on the base
    assert run.variants["a"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.2}  # {algorithm}: its method
    assert run.variants["b"] == {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.3,
                                 "train.rounds": 3}  # per_setting after the row's params and the setting's keys
    assert spec.rows["b"].params == {"mu": 0.1}  # the file's values untouched
    [run] = plan_settings(spec, plan, built_methods(spec), ["algorithm.fedprox.mu=0.4"], "tiny.yaml")
    assert run.variants["b"]["algorithm.fedprox.mu"] == 0.4  # --set wins over every row's own values
    assert run.base.algorithm.params_for("fedprox").mu == 0.4


def test_the_reproduce_command_names_the_budget_seeds_overrides_and_the_report_written():
    from argparse import Namespace

    args = Namespace(config="configs/tables/x.yaml", budget="short", seeds="0,1", overrides=["train.rounds=3"],
                     out="docs/tables/x.md")
    assert reproduce_command(args, "docs/tables/x.short.md") == (
        "mooring table configs/tables/x.yaml --budget short --seeds 0,1 --set train.rounds=3 --out docs/tables/x.md")
    args = Namespace(config="configs/tables/x.yaml", budget=DEFAULT_BUDGET, seeds=None, overrides=[], out=None)
    assert reproduce_command(args, "docs/tables/x.md") == "mooring table configs/tables/x.yaml"


# -------------------------------------------------------------------------------------- table files
@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_validates_at_every_budget(path):
    spec = load_table_file(str(path))
    assert spec.paper == path.stem
    shapes = {(spec.paper, t.id): (len(t.paper), len(t.columns)) for t in spec.tables}
    assert shapes == {k: v for k, v in PAPER_SHAPES.items() if k[0] == spec.paper}
    used = {row for t in spec.tables for row in t.paper}
    assert used == set(spec.rows)  # every row is in some table, and no table names a row the file lacks
    for row in spec.rows.values():
        assert row.tuned_by.strip()
    built = built_methods(spec)
    for budget in [DEFAULT_BUDGET, *spec.budgets]:
        plan = resolve_budget(spec, budget, str(path))
        runs = plan_settings(spec, plan, built, [], str(path))  # every built row's config, params included
        assert all(r.variants for r in runs), f"{budget}: a setting with no row to run"


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_starts_at_its_digits_budget(path, capsys, workdir):
    """--check draws every seed's partition and builds every built method on the data, as a run would start."""
    assert mooring(["table", str(path), "--check", *(a for o in workdir for a in ("--set", o))]) == 0
    assert "every built method starts on them" in capsys.readouterr().out


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_every_table_file_names_the_papers_protocol_as_a_budget(path):
    spec = load_table_file(str(path))
    plan = resolve_budget(spec, "paper", str(path))
    datasets = {cfg.data.dataset for cfg in (r.base for r in plan_settings(spec, plan, set(), [], str(path)))}
    assert datasets and "digits" not in datasets


def write_spec(tmp_path: Path, raw: dict) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return str(path)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda r: r["tables"][0]["paper"].update(b=["60.0"]), "table t1: row 'b' has 1 numbers for 2 columns"),
    (lambda r: r["tables"][0]["paper"].update(z=["1", "2"]), "table t1: row 'z' is not in `rows`"),
    (lambda r: r["tables"][0]["paper"].update(b=["sixty", "6"]), "row 'b': 'sixty' is not a number"),
    (lambda r: r["tables"][0]["columns"][0].update(setting="nowhere"), "unknown setting 'nowhere'"),
    (lambda r: r["tables"][0]["columns"][1].update(setting="s"), "give either `setting` or `not_expressible`"),
    (lambda r: r["rows"]["b"]["params"].update(mu=-1), "algorithm.fedprox.mu = -1"),
    (lambda r: r["experiment"]["train"].update(rounds=0), "experiment: train.rounds = 0"),
    (lambda r: r["settings"].update({"a/b": {}}), "setting 'a/b': a setting's name becomes part of its runs' names"),
    (lambda r: r["rows"]["a"].update(per_setting={"t": {}}), "rows.a.per_setting: unknown setting 't'"),
])
def test_a_bad_table_file_is_one_line_and_exit_2(tmp_path, capsys, change, problem):
    raw = tiny_spec()
    change(raw)
    assert mooring(["table", write_spec(tmp_path, raw), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and problem in err and err.count("\n") == 1


@pytest.mark.parametrize(("extra", "problem"), [
    (["--out", "{tmp}"], "--out {tmp}: a directory; give the path of a file"),
    (["--out", "{tmp}/no/such/dir/t.md"], "--out {tmp}/no/such/dir/t.md: directory {tmp}/no/such/dir does not exist"),
    (["--report-only", "--out", "{tmp}/t.md", "--results", "{tmp}/none"],
     "--report-only: no saved results at {tmp}/none/s/histories.json; run the table first"),
])
def test_a_bad_output_or_missing_results_is_one_line_before_any_run(tmp_path, capsys, extra, problem):
    args = [a.format(tmp=tmp_path) for a in extra]
    assert mooring(["table", write_spec(tmp_path, tiny_spec()), *args, "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert problem.format(tmp=tmp_path) in err and err.count("\n") == 1
    assert not (tmp_path / "t.md").exists()


def test_an_unknown_budget_is_one_line(tmp_path, capsys):
    assert mooring(["table", write_spec(tmp_path, tiny_spec()), "--budget", "huge", "--check"]) == 2
    assert "--budget 'huge': not a budget of this file; allowed: digits" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the paper budget
def test_the_paper_budget_names_what_to_put_where(tmp_path, capsys):
    args = ["table", "configs/tables/fedfm.yaml", "--budget", "paper", "--check", "--set", f"data.root={tmp_path}",
            "--set", f"checkpoint.dir={tmp_path / 'runs'}", "--set", f"data.partitions_dir={tmp_path / 'p'}"]
    assert mooring(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"cifar10: no data in {tmp_path / 'cifar-10-batches-py'}; expected data_batch_1, data_batch_2, "
            "data_batch_3, data_batch_4, data_batch_5, test_batch, batches.meta") in err
    assert f"cifar100: no data in {tmp_path / 'cifar-100-python'}; expected train, test, meta" in err


def write_fake_data(root: Path, per_class: int) -> None:
    """MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 in torchvision's layout: `per_class` random images of every
    class in the training files (CIFAR-100: a fifth of it), a few in the test files."""
    from tests.test_torchvision_sets import cifar_images, write_idx, write_pickle

    for folder in ("MNIST", "FashionMNIST"):
        for prefix, count in (("train", per_class), ("t10k", 2)):
            labels = np.repeat(np.arange(10), count)
            write_idx(root / folder / "raw" / f"{prefix}-images-idx3-ubyte",
                      np.random.default_rng(count).integers(0, 256, size=(len(labels), 28, 28)))
            write_idx(root / folder / "raw" / f"{prefix}-labels-idx1-ubyte", labels)
    labels = [c for c in range(10) for _ in range(per_class)]
    images = cifar_images(10, len(labels))
    for i in range(5):
        write_pickle(root / "cifar-10-batches-py" / f"data_batch_{i + 1}",
                     {"data": images[i::5], "labels": labels[i::5]})
    write_pickle(root / "cifar-10-batches-py" / "test_batch", {"data": cifar_images(11, 10), "labels": list(range(10))})
    write_pickle(root / "cifar-10-batches-py" / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    labels = [c for c in range(100) for _ in range(per_class // 5)]
    write_pickle(root / "cifar-100-python" / "train", {"data": cifar_images(100, len(labels)), "fine_labels": labels,
                                                       "coarse_labels": [c // 5 for c in labels]})
    write_pickle(root / "cifar-100-python" / "test", {"data": cifar_images(101, 100), "fine_labels": list(range(100)),
                                                      "coarse_labels": [c // 5 for c in range(100)]})
    write_pickle(root / "cifar-100-python" / "meta", {"fine_label_names": [f"f{i}" for i in range(100)],
                                                      "coarse_label_names": [f"c{i}" for i in range(20)]})


@pytest.fixture(scope="module")
def data_on_disk(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_fake_data(root, per_class=200)
    return root


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_with_the_data_on_disk_the_paper_budget_starts_every_built_method(path, data_on_disk, tmp_path, capsys):
    spec = load_table_file(str(path))
    # the files hold a twenty-fifth of the real training sets, too few for the Dirichlet draws over 100 clients:
    # 20 clients here (the real sizes draw the paper's federations: the test below)
    args = ["table", str(path), "--budget", "paper", "--check", "--set", f"data.root={data_on_disk}",
            "--set", f"checkpoint.dir={tmp_path / 'runs'}", "--set", f"data.partitions_dir={tmp_path / 'p'}",
            "--set", "data.num_clients=20"]
    assert mooring(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "budget paper: the data are on disk, every seed's partition can be drawn and every built method " \
           "starts on them" in out
    not_built = sorted({r.label for r in spec.rows.values() if r.method not in built_methods(spec)})
    assert f"not built: {', '.join(not_built)}" in out


TRAINING_SET_SIZES = {"mnist": (60000, 10), "fmnist": (60000, 10), "cifar10": (50000, 10), "cifar100": (50000, 100)}


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.stem)
def test_the_paper_budgets_partitions_draw_on_the_real_training_sets_sizes(path):
    from tasks.data.partition import make_partition

    spec = load_table_file(str(path))
    plan = resolve_budget(spec, "paper", str(path))
    for run in plan_settings(spec, plan, set(), [], str(path)):
        size, classes = TRAINING_SET_SIZES[run.base.data.dataset]
        labels = np.repeat(np.arange(classes), size // classes)
        part = make_partition(labels, run.base.data, 0)
        assert len(part.train) == run.base.data.num_clients
        assert min(len(t) + len(v) for t, v in zip(part.train, part.test)) >= run.base.data.partition.min_size


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.ray
def test_a_tiny_table_runs_end_to_end(ray_session, workdir, tmp_path):
    raw = tiny_spec(experiment={"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2},
                                "eval": {"diagnostics": False}, "checkpoint": {"every": 0}})
    path, out, results = write_spec(tmp_path, raw), tmp_path / "tiny.md", tmp_path / "results"
    args = ["table", path, "--out", str(out), "--results", str(results), "--parallel", "2",
            "--address", ray_session.get_runtime_context().gcs_address, *(a for o in workdir for a in ("--set", o))]
    assert mooring(args) == 0
    report = out.read_text()
    comp = Comparison(histories={v: {int(s): h for s, h in by_seed.items()} for v, by_seed in
                                 json.loads((results / "s" / "histories.json").read_text()).items()})
    assert sorted(comp.histories) == ["a", "b"] and sorted(comp.histories["a"]) == [0, 1]
    for row, label, paper in (("a", "A", "70.0±1.0"), ("b", "B", "60.0")):
        m = measured(list(comp.values(row, "accuracy:final").values()), [], 100.0)
        assert f"| {label} | {paper} / **{m.mean:.2f} ± {m.std:.2f}** |" in report
    assert "| C | 65.0 / not built |" in report and "| Kendall's τ |" in report
    assert ("mooring table " + path + " --set " + workdir[0]) in report
    assert mooring([*args, "--report-only"]) == 0  # rewritten from the saved histories, the same
    assert out.read_text() == report


# ------------------------------------------------------------------------------------------ tuning
def tuned_file(rows: dict) -> dict:
    return {"tuning": {"setting": "s", "trials": 2}, "rows": {
        r: {"params": p, "searched": {k: "0.001..1 log" for k in p}, "metric": "accuracy:final", "trials": 2,
            "best_validation": 0.5, "study": f"tiny-tune-{r}", "date": "2026-11-26"} for r, p in rows.items()}}


def test_tuned_values_replace_the_rows_params_in_the_digits_budget_only(tmp_path):
    raw = tiny_spec(tuning={"setting": "s", "trials": 2}, budgets={"paper": {
        "description": "p", "settings": {"p": {}}, "columns": {"t1/acc": "p"}}})
    path = write_spec(tmp_path, raw)
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_file({"b": {"mu": 0.02}})))
    spec = load_table_file(path)
    digits = resolve_budget(spec, DEFAULT_BUDGET, path)
    [run] = plan_settings(spec, digits, built_methods(spec), [], path)
    assert run.variants["b"]["algorithm.fedprox.mu"] == 0.02  # the tuned value, not the file's 0.1
    assert spec.rows["b"].params == {"mu": 0.1}
    [paper_run] = plan_settings(spec, resolve_budget(spec, "paper", path), built_methods(spec), [], path)
    assert paper_run.variants["b"]["algorithm.fedprox.mu"] == 0.1  # tuned on the digits: not the paper's budget
    raw["budgets"]["short"] = {"description": "fewer rounds", "overrides": {"train.rounds": 1}, "tuned": True,
                               "settings": {"s": {}}, "columns": {"t1/acc": "s"}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    spec = load_table_file(path)
    [short_run] = plan_settings(spec, resolve_budget(spec, "short", path), built_methods(spec), [], path)
    assert short_run.variants["b"]["algorithm.fedprox.mu"] == 0.02  # a shorter digits budget that asks for them
    cells = table_cells(spec, digits, built_methods(spec), {"s": Comparison(histories={})})
    text = render_report(spec, digits, cells, built_methods(spec), {"s": run.base}, "mooring table tiny.yaml", path, [])
    assert ("| B | `fedprox` | mu = 0.02 | `--tune`: 2 trials (completed and pruned not recorded) over mu in "
            "0.001..1 log on a validation split (study tiny-tune-b, 2026-11-26); best validation accuracy:final 0.5; "
            "**only 2 trials** (fewer than 20) |") in text
    assert "tuned rows (`mooring table --tune`): 2 Optuna trials" in text


@pytest.mark.parametrize(("tuned", "problem"), [
    (tuned_file({"zz": {"mu": 0.02}}), "rows.zz: no such row in the table file"),
    ({"tuning": {}, "rows": {"b": {"params": {}}}}, "rows.b.searched"),
])
def test_a_bad_tuned_values_file_is_one_line(tmp_path, capsys, tuned, problem):
    path = write_spec(tmp_path, tiny_spec())
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned))
    assert mooring(["table", path, "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and "tiny.tuned.yaml" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(("change", "problem"), [
    (lambda r: r.update(tuning={"setting": "nope"}), "tuning.setting: unknown setting 'nope'; allowed: s"),
    (lambda r: r["rows"]["b"].update(tune=["nu"]), "rows.b.tune: nu not searchable for fedprox; searchable: mu"),
    (lambda r: r.pop("tuning"), "--tune needs a `tuning:` block"),
])
def test_bad_tuning_is_one_line_before_any_trial(tmp_path, capsys, change, problem):
    raw = tiny_spec(tuning={"setting": "s"})
    change(raw)
    assert mooring(["table", write_spec(tmp_path, raw), "--tune", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1
    assert not (tmp_path / "tiny.tuned.yaml").exists()


@pytest.mark.ray
def test_tune_writes_each_rows_choice_and_the_table_then_runs_with_it(ray_session, workdir, tmp_path, capsys):
    raw = tiny_spec(experiment={"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2},
                                "eval": {"diagnostics": False}, "checkpoint": {"every": 0}},
                    tuning={"setting": "s", "trials": 2, "validation_fraction": 0.25,
                            "overrides": {"train.rounds": 3}})
    path, results = write_spec(tmp_path, raw), tmp_path / "results"
    overrides = [*workdir, "train.rounds=1"]  # the command line's rounds win over the tuning's
    args = ["table", path, "--results", str(results), "--parallel", "1", "--address", ray_session.get_runtime_context().gcs_address,
            *(a for o in overrides for a in ("--set", o))]
    assert mooring([*args, "--tune"]) == 0
    tuned = yaml.safe_load((tmp_path / "tiny.tuned.yaml").read_text())
    assert list(tuned["rows"]) == ["b"]  # fedavg has nothing to search; C is not built
    assert tuned["set"] == overrides and yaml.safe_load((results / "tuning" / "b.base.yaml").read_text())[
        "train"]["rounds"] == 1
    row = tuned["rows"]["b"]
    assert row["trials"] == 2 and row["metric"] == "accuracy:final" and 0 <= row["best_validation"] <= 1
    assert set(row["params"]) == {"mu"} and row["searched"] == {"mu": "0.0001..1 log"}
    import optuna
    study = optuna.load_study(study_name="tiny-tune-b", storage=f"sqlite:///{results / 'tuning' / 'optuna.db'}")
    assert study.trials[0].params == {"algorithm.fedprox.mu": 0.1}  # the row's own value first
    assert all(len(t.intermediate_values) <= 1 for t in study.trials)  # one round each, as --set says
    assert row["params"]["mu"] == study.best_trial.params["algorithm.fedprox.mu"]
    capsys.readouterr()
    assert mooring([*args, "--tune"]) == 0  # run again: the studies are complete, nothing new is tried
    assert len(optuna.load_study(study_name="tiny-tune-b", storage=study._storage).trials) == 2
    spec = load_table_file(path)
    [run] = plan_settings(spec, resolve_budget(spec, DEFAULT_BUDGET, path), built_methods(spec), [], path)
    assert run.variants["b"]["algorithm.fedprox.mu"] == row["params"]["mu"]


def test_the_reproduce_command_names_a_report_written_elsewhere():
    from argparse import Namespace

    from pipelines.tables import reproduce_command

    args = Namespace(config="configs/tables/fedfm.yaml", budget="short", seeds="0,1,2", overrides=[],
                     out="docs/tables/fedfm.md")
    assert reproduce_command(args, "docs/tables/fedfm.short.md") == \
        "mooring table configs/tables/fedfm.yaml --budget short --seeds 0,1,2 --out docs/tables/fedfm.md"
    assert reproduce_command(Namespace(**{**vars(args), "out": "docs/tables/fedfm.short.md"}),
                             "docs/tables/fedfm.short.md").endswith("--seeds 0,1,2")  # the default: not named
