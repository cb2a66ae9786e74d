"""The Python API (mooring/): configs from a file with dotted or keyword overrides, bad input as one
MooringError line, histories as DataFrames equal to the command line's, and the tutorial notebook executed cell
by cell (docs/tutorials/notebook.ipynb)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import mooring
from mooring.results import history_frame
from orchestrator.docs.notebook import execute, read_cells
from orchestrator.experiment.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "default.yaml")
NOTEBOOK = ROOT / "docs" / "tutorials" / "notebook.ipynb"
# a tiny federation: four clients, two rounds, the clients inside the coordinator (no client actors to start)
TINY = {"data.num_clients": 4, "train.rounds": 2, "resources.clients_on": "coordinator"}


# ------------------------------------------------------------------------------------------ configs
def test_dotted_and_keyword_overrides_give_the_same_config():
    dotted = mooring.config(CONFIG, {"algorithm.name": "fedprox", "train.rounds": 5, "seed": 3})
    keywords = mooring.config(CONFIG, algorithm={"name": "fedprox"}, train={"rounds": 5}, seed=3)
    assert dotted == keywords == load_config(CONFIG, ["algorithm.name=fedprox", "train.rounds=5", "seed=3"])
    assert dotted.train.rounds == 5 and dotted.train.local_epochs == 2  # the file's other keys kept


def test_a_keyword_section_merges_and_a_dotted_value_replaces():
    merged = mooring.config(CONFIG, algorithm={"fedfm": {"lam": 2.0}})
    assert (merged.algorithm.fedfm["lam"], merged.algorithm.fedfm["warmup_rounds"]) == (2.0, 4)
    replaced = mooring.config(CONFIG, {"algorithm.fedfm": {"lam": 2.0}})
    assert replaced.algorithm.fedfm == {"lam": 2.0}  # as `--set algorithm.fedfm={lam: 2.0}` does


def test_a_config_may_be_a_mapping_a_built_config_or_the_defaults():
    built = mooring.config(CONFIG)
    assert mooring.config(built, {"train.rounds": 7}).train.rounds == 7
    assert mooring.config(built.to_dict()) == built
    assert mooring.config() == load_config(None)


@pytest.mark.parametrize("call, overrides", [
    (lambda: mooring.config(CONFIG, {"train.rounds": 0}), ["train.rounds=0"]),
    (lambda: mooring.config(CONFIG, train={"roundz": 3}), ["train.roundz=3"]),
    (lambda: mooring.config(CONFIG, {"algorithm.name": "fedavgg"}), ["algorithm.name=fedavgg"]),
])
def test_bad_input_is_the_command_line_s_line(call, overrides):
    with pytest.raises(ConfigError) as cli:
        load_config(CONFIG, overrides)
    with pytest.raises(mooring.MooringError) as api:
        call()
    assert str(api.value) == str(cli.value) and api.value.kind == "ConfigError"
    assert api.value.__cause__ is None and api.value.__suppress_context__  # no chained traceback
    assert api.value._render_traceback_() == [f"MooringError: {cli.value}"]  # what Jupyter shows: one line


@pytest.mark.parametrize("call, line", [
    (lambda: mooring.config("no/such.yaml"), "no/such.yaml: config file not found"),
    (lambda: mooring.config(CONFIG, {"train.rounds": 2}, train={"rounds": 3}),
     "train.rounds: given both in the overrides and as a keyword argument; give it once"),
    (lambda: mooring.config(CONFIG, ["train.rounds=2"]),
     "overrides ['train.rounds=2']: expected a mapping of dotted keys to values, for example {'train.rounds': 5}"),
    (lambda: mooring.config(CONFIG, {"train..rounds": 2}),
     "override key 'train..rounds': must be a dotted path such as data.partition.alpha"),
    (lambda: mooring.config(CONFIG, {"seed.x": 1}), "seed.x=...: 'seed' is a value, not a section"),
    (lambda: mooring.config(42), "config 42: expected a YAML file's path, a mapping of sections, an ExperimentConfig "
                                 "or None (the defaults)"),
    (lambda: mooring.compare(CONFIG, "fedavg"), "methods 'fedavg': expected a list of algorithm names, for example "
                                                "['fedavg', 'fedprox'], or a mapping of labels to overrides"),
    (lambda: mooring.compare(CONFIG, ["fedavg", "fedavg"]), "methods: fedavg is given more than once; give each once"),
    (lambda: mooring.compare(CONFIG, {"a": "fedavg"}), "methods a: expected a mapping of dotted keys to values, for "
                                                       "example {'algorithm.name': 'fedprox', 'algorithm.fedprox.mu': 0.1}"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], seeds=[0, 0]), "seeds: 0 is given more than once; give each once"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], seeds="0,1"), "seeds '0,1': expected a list of integers, for "
                                                               "example [0, 1, 2]"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], baseline="fedprox"),
     "baseline fedprox: not a variant of this comparison; variants: fedavg"),
])
def test_bad_api_input_is_one_line_before_anything_runs(call, line):
    with pytest.raises(mooring.MooringError) as e:
        call()
    assert str(e.value) == line


def test_an_unknown_method_is_refused_as_the_command_line_refuses_it():
    with pytest.raises(mooring.MooringError, match=r"^methods fedx: fedx: unknown algorithm; allowed: .*fedavg, "):
        mooring.compare(CONFIG, ["fedavg", "fedx"])


# ------------------------------------------------------------------------------------------ histories
def test_a_history_is_a_frame_of_one_row_per_round_by_hand():
    frame = history_frame([{"round": 1, "train_loss": 2.0, "accuracy": None},
                           {"round": 2, "train_loss": 1.5, "accuracy": 0.5, "bytes_total": 10}])
    assert frame.index.name == "round" and list(frame.index) == [1, 2]
    assert list(frame.columns) == ["train_loss", "accuracy", "bytes_total"]
    assert frame.loc[2, "accuracy"] == 0.5 and math.isnan(frame.loc[1, "accuracy"])
    assert math.isnan(frame.loc[1, "bytes_total"])
    assert history_frame([]).empty and history_frame([]).index.name == "round"


def same_value(a, b) -> bool:
    missing = (a is None or (isinstance(a, float) and math.isnan(a)), b is None or (isinstance(b, float) and math.isnan(b)))
    return all(missing) or (not any(missing) and a == b)


@pytest.mark.ray
def test_a_run_s_history_is_the_command_line_s_for_the_same_config_and_seed(ray_session, workdir, tmp_path, capsys):
    from orchestrator.cli import main

    settings = TINY | {"algorithm.name": "fedprox", "seed": 1} | dict(o.split("=", 1) for o in workdir)
    out = tmp_path / "cli.json"
    sets = [w for key, value in settings.items() for w in ("--set", f"{key}={value}")]
    assert main(["run", CONFIG, *sets, "--quiet", "--output-json", str(out)]) == 0
    cli = json.loads(out.read_text())

    run = mooring.run(CONFIG, settings, progress=False)
    assert run.history.shape[0] == 2 and list(run.history.index) == [1, 2]
    assert {"train_loss", "accuracy", "bytes_total"} <= set(run.history.columns)
    for row in cli["history"]:
        for key, value in row.items():
            if key != "round":
                assert same_value(run.history.loc[row["round"], key], value), (row["round"], key)
    assert run.summary["final_global_accuracy"] == cli["final_accuracy"] == run.history["accuracy"].iloc[-1]
    assert (run.summary["algorithm"], run.summary["seed"], run.summary["rounds"]) == ("fedprox", 1, 2)
    assert run.run_dir != cli["run_dir"] and Path(run.run_dir, "result.json").is_file()
    figure = run.plot()
    assert figure.get_suptitle().startswith(f"{run.config.name}: fedprox on digits")  # the title names the method
    axes = figure.axes
    assert len(axes) == 1  # FedProx has a global model only: one panel, one line (the accuracy in %)
    assert list(axes[0].lines[0].get_ydata()) == pytest.approx(list(100 * run.history["accuracy"]))


# ------------------------------------------------------------------------------------------ the notebook
def code_cells(path: Path) -> list[tuple[list[str], str]]:
    """(tags, source) of each code cell, in order."""
    return [(cell.tags, cell.source) for cell in read_cells(path) if cell.kind == "code"]


def test_the_notebook_is_plain_python_with_one_parameters_cell():
    cells = code_cells(NOTEBOOK)
    assert [tags for tags, _ in cells].count(["parameters"]) == 1
    assert not [line for _, source in cells for line in source.splitlines() if line.lstrip().startswith(("%", "!"))]


@pytest.mark.ray
def test_the_tutorial_notebook_runs_and_its_results_are_read(ray_session, workdir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever the notebook writes where it runs lands here
    settings = TINY | dict(o.split("=", 1) for o in workdir)
    cells, ns = execute(NOTEBOOK, f"CONFIG = {CONFIG!r}\nSETTINGS = {settings!r}\nSEEDS = [0]\n"
                                  f"OUT = {str(tmp_path / 'out')!r}\n")
    run, comp = ns["run"], ns["comp"]
    assert run.history.shape[0] == 2 and run.summary["algorithm"] == "fedprox"
    assert list(comp.table.index) == ["fedavg", "fedprox"] and set(comp.table["seeds"]) == {1}
    assert comp.history.shape[0] == 2 * 2 and comp.history.index.names == ["variant", "seed", "round"]
    fedprox = comp.run_history("fedprox")
    assert comp.table.loc["fedprox", "global_accuracy_mean"] == fedprox["accuracy"].iloc[-1]
    # the same config and seed as the notebook's single run: the same history
    pd.testing.assert_series_equal(fedprox["accuracy"], run.history["accuracy"])
    assert list(ns["accuracy"].columns) == ["fedavg", "fedprox"] and ns["accuracy"].shape == (2, 2)
    assert (tmp_path / "out" / "report.html").is_file()
    code = [cell for cell in cells if cell.kind == "code"]
    assert "unknown algorithm" in code[-1].printed  # the last cell printed the one-line error
    assert code[2].value is run and list(code[3].value.columns) == ["clients", "train_loss", "accuracy", "bytes_total"]


def test_seeds_default_to_the_config_s_and_numpy_integers_are_integers():
    import numpy as np

    from mooring.api import _seeds

    assert _seeds(None, 5) == [5] and _seeds(np.arange(2), 5) == [0, 1] and _seeds(range(3), 5) == [0, 1, 2]
    assert all(type(s) is int for s in _seeds(np.arange(2), 5))
