"""The pipelines read their input strictly: the Python API's empty method lists and zero workers, `--set` under
`mooring table --tune`, report-only runs whose saved histories lack a method, tuned values from another tuning,
--no-outside-code on every command that reads a config, and a non-finite loss under privacy noise naming the
noise. Each bad input is one line and exit 2, before anything runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

import mooring
from orchestrator.cli import main as mooring_cli
from orchestrator.experiment.config import load_config
from pipelines.table_config import DEFAULT_BUDGET, TableFile, load_table_file, resolve_budget

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "default.yaml")
NOWHERE = "127.0.0.1:1"  # a Ray address never reached: every refusal here comes before Ray


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert line.startswith("error: "), line
    return line.removeprefix("error: ")


# ------------------------------------------------------------------------------------------ the Python API
@pytest.mark.parametrize("call, line", [
    (lambda: mooring.compare(CONFIG, []), "methods []: empty; give at least one algorithm name (or leave methods "
                                          "out for the config's own algorithm)"),
    (lambda: mooring.compare(CONFIG, {}), "methods {}: empty; give at least one algorithm name (or leave methods "
                                          "out for the config's own algorithm)"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], parallel=0), "parallel 0: runs at once must be a whole number, "
                                                              "at least 1 (leave it out for as many as the CPUs hold)"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], parallel=-2), "parallel -2: runs at once must be a whole number, "
                                                               "at least 1 (leave it out for as many as the CPUs hold)"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], parallel=True), "parallel True: runs at once must be a whole "
                                                                 "number, at least 1 (leave it out for as many as the "
                                                                 "CPUs hold)"),
    (lambda: mooring.compare(CONFIG, ["fedavg"], parallel=1.5), "parallel 1.5: runs at once must be a whole number, "
                                                                "at least 1 (leave it out for as many as the CPUs "
                                                                "hold)"),
])
def test_an_empty_method_list_and_no_workers_are_refused_by_the_api(call, line):
    with pytest.raises(mooring.MooringError) as e:
        call()
    assert str(e.value) == line and e.value.kind == "ConfigError"


@pytest.mark.parametrize("command", [["compare", CONFIG, "--algorithms", "fedavg"], ["table", "TABLE"]])
@pytest.mark.parametrize("parallel", ["0", "-1"])
def test_parallel_below_one_is_refused_on_the_command_line(capsys, tmp_path, command, parallel):
    command = [str(write_table(tmp_path, tiny_table())) if c == "TABLE" else c for c in command]
    assert mooring_cli([*command, "--parallel", parallel, "--address", NOWHERE]) == 2
    assert one_error_line(capsys) == (f"--parallel {parallel}: runs at once must be a whole number, at least 1 "
                                      "(leave it out for as many as the CPUs hold)")


# ------------------------------------------------------------------------------------------ table files
def tiny_table(**changes) -> dict:
    raw = {
        "paper": "tiny", "title": "Tiny", "source": "by hand", "metric": "accuracy:final", "seeds": [0],
        "experiment": {"name": "tiny", "data": {"num_clients": 4}, "train": {"rounds": 2}},
        "settings": {"s": {}},
        "rows": {"a": {"label": "A", "method": "fedavg", "tuned_by": "none"},
                 "b": {"label": "B", "method": "fedprox", "params": {"mu": 0.1}, "tuned_by": "the paper"}},
        "tables": [{"id": "t1", "title": "Table 1", "paper": {"a": ["70.0"], "b": ["60.0"]},
                    "columns": [{"name": "acc", "setting": "s"}]}],
        "tuning": {"setting": "s", "trials": 2, "overrides": {"train.rounds": 10}},
    }
    return raw | changes


def write_table(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def tuned_values(tuning: dict, rows=("b",), cli: list[str] | None = None) -> dict:
    return {"tuning": tuning, **({"set": cli} if cli else {}), "rows": {
        r: {"params": {"mu": 0.02}, "searched": {"mu": "0.0001..1 log"}, "metric": "accuracy:final", "trials": 2,
            "best_validation": 0.5, "study": f"tiny-tune-{r}", "date": "2026-11-26"} for r in rows}}


def test_the_set_of_a_tune_wins_over_the_tunings_own_overrides():
    from pipelines.table_tuning import tuning_config
    from pipelines.tables import setting_run

    spec = TableFile(**tiny_table())
    plan = resolve_budget(spec, DEFAULT_BUDGET, "tiny.yaml")
    run = setting_run(spec, plan, "s", ["b"], ["train.rounds=3"], "tiny.yaml")
    cfg = tuning_config(run.base, run.variants["b"], spec.tuning, {"train.rounds": 3})
    assert cfg.train.rounds == 3  # not the tuning's 10: the trials run as the command line says
    assert cfg.data.validation_fraction == spec.tuning.validation_fraction
    assert tuning_config(run.base, run.variants["b"], spec.tuning).train.rounds == 10  # without --set, the tuning's


def test_the_shipped_tuned_values_come_from_their_tables_tuning():
    for path in sorted((ROOT / "configs" / "tables").glob("*.yaml")):
        if not path.name.endswith(".tuned.yaml"):
            spec = load_table_file(str(path))
            assert spec.tuning_drift == {}, path
            resolve_budget(spec, DEFAULT_BUDGET, str(path))  # not refused


@pytest.mark.parametrize("recorded, problem", [
    ({"setting": "s", "trials": 5, "overrides": {"train.rounds": 10}}, "tuning.trials is 5 there, 2 in the table"),
    ({"setting": "s", "trials": 2}, "tuning.overrides is {} there, {'train.rounds': 10} in the table"),
    ({"setting": "s", "trials": 2, "overrides": {"train.rounds": 10}, "validation_fraction": 0.3},
     "tuning.validation_fraction is 0.3 there, 0.2 in the table"),
])
def test_tuned_values_from_another_tuning_are_refused_in_one_line(capsys, tmp_path, recorded, problem):
    path = write_table(tmp_path, tiny_table())
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_values(recorded)))
    for extra in (["--check"], ["--report-only", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "t.md")]):
        assert mooring_cli(["table", str(path), *extra]) == 2
        line = one_error_line(capsys)
        assert line == (f"{tmp_path / 'tiny.tuned.yaml'}: {problem}: its values were not tuned the way this table "
                        "tunes; run `mooring table --tune` again (or restore the table's tuning)")
    # the same values, recorded under the table's own tuning, are used
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_values(tiny_table()["tuning"])))
    spec = load_table_file(str(path))
    assert resolve_budget(spec, DEFAULT_BUDGET, str(path)).tuned["b"].params == {"mu": 0.02}


def test_a_tune_after_the_tuning_changed_resumes_only_where_the_studies_ran_the_same_way(capsys, tmp_path):
    from pipelines.tables import check_studies_current

    path = write_table(tmp_path, tiny_table())
    results = tmp_path / "results"
    (results / "tuning").mkdir(parents=True)
    (results / "tuning" / "optuna.db").write_bytes(b"")
    more_trials = {"setting": "s", "trials": 1, "overrides": {"train.rounds": 10}}
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_values(more_trials)))
    check_studies_current(load_table_file(str(path)), [], results)  # more trials: what resuming is for
    other_rounds = {"setting": "s", "trials": 2, "overrides": {"train.rounds": 4}}
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_values(other_rounds)))
    argv = ["table", str(path), "--tune", "--results", str(results), "--address", NOWHERE]
    assert mooring_cli(argv) == 2
    assert one_error_line(capsys) == (
        "--tune: the tuned values' tuning.overrides is {'train.rounds': 4} there, {'train.rounds': 10} in the table, "
        f"and the studies in {results / 'tuning' / 'optuna.db'} scored their trials that way: remove that file to "
        "tune afresh (or tune as before)")
    (tmp_path / "tiny.tuned.yaml").write_text(yaml.safe_dump(tuned_values(tiny_table()["tuning"],
                                                                         cli=["train.rounds=3"])))
    assert mooring_cli(argv) == 2  # the same tuning, but its trials ran under another --set
    assert "its trials ran with --set train.rounds=3, this --tune with (none)" in one_error_line(capsys)
    assert not (tmp_path / "tiny.tuned.yaml").read_text().count("rounds: 4")  # the file is left as it was


# ------------------------------------------------------------------------------------ report-only holes
def test_table_report_only_reports_a_row_without_saved_histories_as_not_finished(capsys, tmp_path):
    path = write_table(tmp_path, tiny_table())
    results = tmp_path / "r"
    (results / "s").mkdir(parents=True)
    (results / "s" / "histories.json").write_text(json.dumps({"a": {"0": [{"round": 1, "accuracy": 0.5}]}}))
    argv = ["table", str(path), "--report-only", "--results", str(results), "--out", str(tmp_path / "t.md")]
    assert mooring_cli(argv) == 0  # what has finished is reported; the row that has not says so, never a number
    assert "--report-only: not finished, reported as such: s: b (seeds 0)" in capsys.readouterr().err
    assert "no run finished" in (tmp_path / "t.md").read_text()


def claims_config(tmp_path: Path) -> Path:
    raw = yaml.safe_load(Path(CONFIG).read_text())
    raw["name"] = "tinyclaims"
    raw["claims"] = {"title": "Tiny", "seeds": [0, 1], "settings": {"s": {}},
                     "methods": {"fedavg": {"algorithm.name": "fedavg"}, "fedprox": {"algorithm.name": "fedprox"},
                                 "moon": {"algorithm.name": "moon"}},
                     "checks": [{"statement": "FedProx beats FedAvg", "setting": "s", "method": "fedprox",
                                 "baseline": "fedavg"}]}
    path = tmp_path / "tinyclaims.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("saved, missing, held", [
    ({"fedavg": {"0": [{"accuracy": 0.5}]}}, "fedprox, moon", "fedavg"),
    ({"fedavg": {"0": [{"accuracy": 0.5}]}, "fedprox": {}, "moon": {"0": [{"accuracy": 0.4}]}}, "fedprox",
     "fedavg, moon"),
])
def test_claims_report_only_refuses_saved_histories_that_lack_a_method(capsys, tmp_path, saved, missing, held):
    path = claims_config(tmp_path)
    results = tmp_path / "r"
    (results / "tinyclaims" / "s").mkdir(parents=True)
    (results / "tinyclaims" / "s" / "histories.json").write_text(json.dumps(saved))
    argv = ["claims", str(path), "--report-only", "--results", str(results), "--out", str(tmp_path / "claims.md")]
    assert mooring_cli(argv) == 2
    assert one_error_line(capsys) == (f"--report-only: {results / 'tinyclaims' / 's' / 'histories.json'}: no runs "
                                      f"of {missing} (it holds {held}); run the claims again to write them")
    assert not (tmp_path / "claims.md").exists() and not (results / "tinyclaims" / "verdicts.json").exists()
    complete = {m: {"0": [{"accuracy": 0.5}], "1": [{"accuracy": 0.6}]} for m in ("fedavg", "fedprox", "moon")}
    (results / "tinyclaims" / "s" / "histories.json").write_text(json.dumps(complete))
    assert mooring_cli(argv) == 0  # every method there: the report is written
    assert "| FedProx beats FedAvg | s | fedprox − fedavg |" in (tmp_path / "claims.md").read_text()


# ----------------------------------------------------------------------------------- --no-outside-code
@pytest.fixture
def received(tmp_path, monkeypatch):
    """A directory from someone else, the working directory: its config names `helper:load`, and helper.py, which
    would leave a file behind if it ran, lies beside it."""
    from tasks import registry

    where = tmp_path / "received"
    where.mkdir()
    ran = tmp_path / "helper-ran"
    (where / "helper.py").write_text(f"open({str(ran)!r}, 'w').close()\n\n\ndef load(opts):\n    return None\n\n\n"
                                     "Method = load\n")
    config = yaml.safe_load(Path(CONFIG).read_text())
    config["data"]["dataset"] = "helper:load"
    (where / "config.yaml").write_text(yaml.safe_dump(config))
    (where / "sweep.yaml").write_text(yaml.safe_dump({
        "base": "config.yaml", "params": {"algorithm.fedprox.mu": {"type": "float", "low": 0.01, "high": 1.0}},
        "overrides": {"algorithm.name": "fedprox"}, "objective": {"metric": "accuracy", "aggregate": "final"},
        "n_trials": 2}))
    table = tiny_table()
    table["experiment"]["data"]["dataset"] = "helper:load"
    (where / "table.yaml").write_text(yaml.safe_dump(table))
    table = tiny_table()
    table["rows"]["b"]["method"] = "helper:Method"
    (where / "rowtable.yaml").write_text(yaml.safe_dump(table))
    monkeypatch.chdir(where)
    monkeypatch.setattr(registry.OutsideCode, "refused", False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield ran
    sys.modules.pop("helper", None)


REFUSED = ("a module:attribute reference runs outside code, which --no-outside-code refuses; only built-in names "
           "and installed packages' entry points")


@pytest.mark.parametrize("argv, names", [
    (["compare", "config.yaml", "--algorithms", "fedavg", "--address", NOWHERE], "data.dataset = 'helper:load'"),
    (["compare", CONFIG, "--algorithms", "fedavg,helper:Method", "--address", NOWHERE], "--algorithms: helper:Method"),
    (["sweep", "sweep.yaml", "--address", NOWHERE], "data.dataset = 'helper:load'"),
    (["table", "table.yaml", "--check"], "data.dataset = 'helper:load'"),
    (["table", "rowtable.yaml", "--check"], "rows.b.method: helper:Method"),
    (["claims", "config.yaml", "--report-only"], "data.dataset = 'helper:load'"),
    (["data", "show", "config.yaml"], "data.dataset = 'helper:load'"),
    (["submit", "--address", "http://127.0.0.1:1", "--no-wait", "--", "compare", "config.yaml"],
     "data.dataset = 'helper:load'"),
])
def test_no_outside_code_refuses_a_received_configs_modules_in_every_command(capsys, received, argv, names):
    inner = argv.index("--") + 1 if "--" in argv else 0
    flagged = argv[:inner + 2] + ["--no-outside-code"] + argv[inner + 2:] if inner else [*argv, "--no-outside-code"]
    assert mooring_cli(flagged) == 2
    line = one_error_line(capsys)
    assert names in line and REFUSED in line, line
    assert not received.exists() and "helper" not in sys.modules  # nothing of it ran


def test_without_no_outside_code_a_received_config_runs_its_module(capsys, received):
    mooring_cli(["table", "rowtable.yaml", "--check"])  # what the flag is for: here helper.py runs
    capsys.readouterr()
    assert received.exists()


# ------------------------------------------------------------------------------------ noise-aware hint
def test_a_non_finite_loss_under_privacy_noise_names_the_noise(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.experiment.method_settings import nonfinite_loss_advice
    from orchestrator.server.federation import NonFiniteLoss, run_in_process

    cfg = load_config(CONFIG, ["data.num_clients=3", "train.rounds=3", "privacy.models.clip=1",
                               "privacy.models.noise_multiplier=10000", f"data.partitions_dir={tmp_path}"])
    with pytest.raises(NonFiniteLoss) as e:
        run_in_process(cfg, prepare_data(cfg))
    [line] = str(e.value).splitlines()
    assert ("privacy.models.noise_multiplier is 10000 with privacy.models.clip 1 (noise of std multiplier × clip on "
            "the updates): lower the noise multiplier or the clip (or lower train.optimizer.lr)") in line
    local = load_config(CONFIG, ["privacy.models.clip=0.5", "privacy.models.local_noise_multiplier=20"])
    assert nonfinite_loss_advice(local).startswith("privacy.models.local_noise_multiplier is 20 with "
                                                   "privacy.models.clip 0.5")
    assert nonfinite_loss_advice(load_config(CONFIG, ["privacy.models.clip=1"])) == \
        "lower train.optimizer.lr (or set train.grad_clip)"  # clipping alone adds no noise


# ------------------------------------------------------------------------------- --set honoured or refused
@pytest.mark.parametrize("argv, line", [
    (["compare", CONFIG, "--algorithms", "fedavg,fedprox", "--set", "algorithm.name=moon", "--address", NOWHERE],
     "--set algorithm.name: variant fedavg sets algorithm.name itself ('fedavg'), which would win over it; set it "
     "there, or leave it out"),
    (["compare", CONFIG, "--variant", "p=fedprox algorithm.fedprox.mu=0.1", "--set", "algorithm.fedprox={mu: 1}",
      "--address", NOWHERE],
     "--set algorithm.fedprox: variant p sets algorithm.fedprox.mu itself (0.1), which would win over it; set it "
     "there, or leave it out"),
    (["claims", "CLAIMS", "--set", "algorithm.name=moon", "--report-only"],
     "--set algorithm.name: tinyclaims: method fedavg sets algorithm.name itself ('fedavg'), which would win over "
     "it; set it there, or leave it out"),
    (["sweep", str(ROOT / "configs" / "sweeps" / "dirichlet_alpha_digits.yaml"), "--set", "algorithm.fedprox.mu=0.5"],
     "--set algorithm.fedprox.mu=0.5: the sweep searches algorithm.fedprox.mu, so every trial sets its own value; "
     "remove it from --set (or from the sweep's params)"),
])
def test_a_set_that_the_runs_would_not_see_is_refused_in_one_line(capsys, tmp_path, argv, line):
    argv = [str(claims_config(tmp_path)) if a == "CLAIMS" else a for a in argv]
    assert mooring_cli(argv) == 2
    assert one_error_line(capsys) == line


def test_the_api_refuses_overrides_a_method_would_override():
    with pytest.raises(mooring.MooringError) as e:
        mooring.compare(CONFIG, {"a": {"algorithm.name": "fedprox", "algorithm.fedprox.mu": 0.1}},
                        algorithm={"fedprox": {"mu": 0.3}})
    assert str(e.value) == ("overrides algorithm.fedprox.mu: methods a sets algorithm.fedprox.mu itself (0.1), which "
                            "would win over it; set it there, or leave it out")


def test_a_set_that_agrees_with_every_variant_or_touches_none_is_kept():
    from pipelines.compare import refuse_shadowed

    variants = {"variant fedprox": {"algorithm.name": "fedprox"}}
    refuse_shadowed({"algorithm.name": "fedprox", "train.rounds": 3, "algorithm.namex": 1}, variants)
