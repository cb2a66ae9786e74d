"""A method, a model and a dataset from outside Mooring: a package in a temporary directory, named in configs by
`module:attribute` references or given by an installed package's entry points, run by `mooring run`,
`compare` and `sweep` like a built-in, and bad references refused in one line."""
from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from orchestrator.experiment.config import ConfigError, load_config
from tests.outside_lab import DESIGN, METHOD, MY_PROX, forget_lab, lab_config, write_lab

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, mlflow_store_made):
    """A researcher's project directory: the package my_lab (a method, a model, a dataset) and a config naming them.
    Importable because it is the working directory, as `mooring` is run from it (the tests chdir there). Its
    MLflow store (lab.yaml's tracking.uri) is a copy of the session's, its tables made (tests/conftest.py)."""
    import shutil

    root = write_lab(tmp_path_factory.mktemp("lab"))
    shutil.copyfile(mlflow_store_made, root / "mlflow.db")
    return root


@contextlib.contextmanager
def working_directory(path: Path):
    before = os.getcwd()
    forget_lab()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
        if str(path) in sys.path:
            sys.path.remove(str(path))
        forget_lab()


def test_the_method_file_is_under_40_lines():
    assert len(METHOD.strip().splitlines()) < 40


def mooring_in(lab: Path, *argv: str) -> subprocess.CompletedProcess:
    """A fresh `mooring` process started in the project, as a user starts it: the console script, so nothing but
    the working directory makes my_lab importable (to the driver and to the Ray workers it starts)."""
    mooring = Path(sys.executable).parent / "mooring"
    result = subprocess.run([str(mooring), *argv], cwd=lab, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_an_outside_fedprox_runs_on_the_vectorised_engine_equal_to_the_built_in_one_next_to_fedavg(lab):
    mooring_in(lab, "compare", "lab.yaml", "--algorithms", f"fedavg,{MY_PROX},fedprox", "--quiet",
               "--set", "algorithm.fedprox.mu=0.5", "--set", "train.engine=vectorized", "--out", str(lab / "compare"))
    histories = json.loads((lab / "compare" / "histories.json").read_text())
    mine, fedprox, fedavg = (histories[v]["0"] for v in ("my_prox", "fedprox", "fedavg"))  # labelled by its name
    assert [{k: v for k, v in m.items() if "seconds" not in k} for m in mine] == \
        [{k: v for k, v in m.items() if "seconds" not in k} for m in fedprox]  # bitwise the built-in's history
    assert [m["accuracy"] for m in mine] != [m["accuracy"] for m in fedavg]
    assert mine[-1]["accuracy"] > 0.5  # five classes: it learned
    run_dir = Path(next(row for row in csv.DictReader((lab / "compare" / "runs.csv").open())
                        if row["variant"] == "my_prox")["run_dir"])
    assert run_dir.name.startswith("lab-my_prox-s0-")  # the method's own name, not the reference, in paths
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["algorithm"]["name"] == MY_PROX and config["algorithm"]["my_prox"] == {"mu": 0.5}
    assert config["train"]["engine"] == "vectorized"


SECOND_METHOD = '''"""A second method of the lab's, with a block of its own."""
from my_lab.method import MyProx, MyProxParams


class ScaledParams(MyProxParams):
    scale: float = 1.0


class Scaled(MyProx):
    name = "my_scaled"
    Params = ScaledParams
'''


def test_two_outside_methods_with_their_blocks_and_per_variant_settings_in_one_command(lab):
    """Each outside method's block set (one by --set before it is named, one by its variant), per-variant
    overrides and labels, and the paired differences against the baseline, in one `mooring compare`. A method named
    by reference is labelled by its class's `label` (here MyProx's `name`, my_prox), in the table and in MLflow,
    whose parent and child runs are named by what differs: the config, the variants, the seed, the overrides."""
    from mlflow.tracking import MlflowClient

    (lab / "my_lab" / "scaled.py").write_text(SECOND_METHOD)
    out_dir, as_json = lab / "two_outside", lab / "two_outside.json"
    result = mooring_in(lab, "compare", "lab.yaml", "--algorithms", MY_PROX, "--set", "algorithm.my_scaled.scale=2.0",
                        "--variant", "scaled_light=my_lab.scaled:Scaled algorithm.my_scaled.mu=0.001 "
                                     "train.optimizer.lr=0.05",
                        "--seeds", "0,1", "--baseline", MY_PROX, "--out", str(out_dir), "--output-json", str(as_json),
                        "--quiet")
    table = json.loads(as_json.read_text())
    assert [row["variant"] for row in table["variants"]] == ["my_prox", "scaled_light"]
    assert table["variants"][1]["settings"] == ("algorithm.name=my_lab.scaled:Scaled, algorithm.my_scaled.mu=0.001, "
                                                "train.optimizer.lr=0.05")
    rows = list(csv.DictReader((out_dir / "runs.csv").open()))
    finals = {(r["variant"], int(r["seed"])): float(r["final_global_accuracy"]) for r in rows}
    [paired] = table["paired"]
    assert paired["diffs"] == pytest.approx([finals[("scaled_light", s)] - finals[("my_prox", s)] for s in (0, 1)])
    assert paired["wins"] == sum(d > 0 for d in paired["diffs"])
    assert "paired against my_prox" in result.stdout  # --baseline named it by its reference
    assert "scaled_light: algorithm.name=my_lab.scaled:Scaled" in result.stdout
    run_dir = Path(next(r["run_dir"] for r in rows if r["variant"] == "scaled_light"))
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["algorithm"]["my_scaled"] == {"mu": 0.001, "scale": 2.0}
    assert config["train"]["optimizer"]["lr"] == 0.05
    page = (out_dir / "report.html").read_text()
    assert "Paired against my_prox" in page and "algorithm.my_scaled.mu=0.001" in page
    parent_id = re.search(r"MLflow parent run (\w+)", result.stdout).group(1)
    client = MlflowClient(f"sqlite:///{lab / 'mlflow.db'}")
    parent = client.get_run(parent_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    assert parent.info.run_name == "compare-lab my_prox,scaled_light scale=2.0"
    assert sorted(run.info.run_name for run in children) == [
        "lab-my_prox-s0 scale=2.0", "lab-my_prox-s1 scale=2.0",
        "lab-scaled_light-s0 scale=2.0 mu=0.001 lr=0.05", "lab-scaled_light-s1 scale=2.0 mu=0.001 lr=0.05"]

def test_mooring_sweep_searches_the_outside_method_s_own_ranges(lab):
    import optuna

    sweep = {"base": "lab.yaml", "algorithm": MY_PROX, "n_trials": 2, "storage": f"sqlite:///{lab / 'optuna.db'}",
             "sampler": {"name": "random", "seed": 0}}
    (lab / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    mooring_in(lab, "sweep", "sweep.yaml")
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{lab / 'optuna.db'}")
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 2 and all(set(t.params) == {"algorithm.my_prox.mu"} for t in complete)
    assert all(1e-3 <= t.params["algorithm.my_prox.mu"] <= 1.0 for t in complete)


@pytest.mark.parametrize("reference, problem", [
    ("no_such_lab.method:MyProx", "cannot import no_such_lab.method (No module named 'no_such_lab')"),
    ("my_lab.method:Missing", "my_lab.method has no Missing"),
    ("my_lab.method:MyProxParams", "not an Algorithm subclass (tasks.algorithms.base.Algorithm)"),
    ("my_lab.clash:Clash", "its name 'fedavg' is a built-in algorithm's; give the class another `name`"),
    ("my_lab.method", "unknown algorithm; allowed: "),
])
def test_a_bad_method_reference_is_one_line_naming_what_is_wrong(lab, reference, problem):
    (lab / "my_lab" / "clash.py").write_text("from tasks.algorithms.fedavg import FedAvg\n\n\nclass Clash(FedAvg):\n"
                                             "    name = 'fedavg'\n")
    with working_directory(lab), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", [f"algorithm.name={reference}"])
    [line] = str(e.value).splitlines()
    assert line.startswith(f"lab.yaml: algorithm.name = '{reference}': {problem}"), line


@pytest.mark.parametrize("key, value, problem", [
    ("model.name", "my_lab.parts:low_digits", "not a ModelEntry (tasks.models.base.ModelEntry)"),
    ("data.dataset", "my_lab.parts:WideParams.width", "my_lab.parts has no WideParams.width"),
])
def test_a_bad_model_or_dataset_reference_is_one_line(lab, key, value, problem):
    with working_directory(lab), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", [f"{key}={value}"])
    assert problem in str(e.value) and len(str(e.value).splitlines()) == 1


def test_an_outside_loader_that_returns_no_dataset_is_one_line(lab):
    from orchestrator.experiment.datasets import _loader_options
    from tasks.data.datasets import load_dataset
    from tasks.registry import PluginError

    (lab / "my_lab" / "nothing.py").write_text("def load(opts):\n    return None\n")
    with working_directory(lab):
        cfg = load_config("lab.yaml", ["data.dataset=my_lab.nothing:load"])
        with pytest.raises(PluginError) as e:
            load_dataset(_loader_options(cfg))
    assert str(e.value) == "the loader of dataset 'my_lab.nothing:load' returned NoneType, not an ArrayDataset"


def installed_distribution(site: Path, monkeypatch, name: str, group: str, entry_point: str) -> Path:
    """A distribution's metadata in `site`, put on sys.path as pip installs it, giving one entry point in `group`;
    its dist-info directory is returned, to rewrite the entry points."""
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entry_point}\n")
    monkeypatch.syspath_prepend(str(site))
    return dist


def test_an_installed_package_s_entry_points_name_its_method_and_may_not_take_a_built_in_s_name(lab, tmp_path,
                                                                                                monkeypatch):
    """A distribution's metadata on sys.path, as pip installs it: its entry points give `lab_prox`."""
    from tasks.algorithms import ALGORITHMS

    dist = installed_distribution(tmp_path, monkeypatch, "my-lab-plugins", "mooring.algorithms", f"lab_prox = {MY_PROX}")
    with working_directory(lab):
        cfg = load_config("lab.yaml", ["algorithm.name=lab_prox"])
    assert ALGORITHMS.get("lab_prox").__name__ == "MyProx" and cfg.algorithm.params_for().mu == 0.5
    assert "lab_prox" in ALGORITHMS.names()
    (dist / "entry_points.txt").write_text(f"[mooring.algorithms]\nfedavg = {MY_PROX}\n")
    with working_directory(lab), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", ["algorithm.name=fedprox"])
    assert f"entry point fedavg = {MY_PROX} (mooring.algorithms): 'fedavg' is a built-in algorithm's name" in str(e.value)


def test_a_method_that_returns_client_state_without_declaring_it_is_refused_not_dropped(lab):
    """On both engines (on Ray, the run stops with this line)."""
    from orchestrator.clients.client_cache import UndeclaredClientState
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import run_in_process

    (lab / "my_lab" / "forgetful.py").write_text(textwrap.dedent("""
        from my_lab.method import MyProx


        class Forgetful(MyProx):
            name = "forgetful"
            keeps_client_state = False

            def client_result(self, trained, train_loss, payload, data, client_state, ctx):
                update, _ = super().client_result(trained, train_loss, payload, data, client_state, ctx)
                return update, {"seen": data.num_samples}
    """))
    (lab / "forgetful.yaml").write_text(yaml.safe_dump(lab_config(lab, "my_lab.forgetful:Forgetful")))
    for engine in ("sequential", "vectorized"):
        with working_directory(lab):
            cfg = load_config("forgetful.yaml", [f"train.engine={engine}", "train.rounds=1"])
            with pytest.raises(UndeclaredClientState) as e:
                run_in_process(cfg, prepare_data(cfg))
        assert str(e.value) == ("forgetful returned a client state (seen) but declares keeps_client_state = False, "
                                "so it would be dropped; declare keeps_client_state = True to keep it"), engine


def test_a_method_that_only_adds_a_metric_keeps_no_client_state_and_its_metric_reaches_the_server(lab):
    """`client_metrics` sends a metric up beside the loss without the client state `client_result` implies: the
    clients are balanced over actors like FedAvg's, and the metric reaches `round_metrics` on both engines."""
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import run_in_process
    from tasks.algorithms import ALGORITHMS

    (lab / "my_lab" / "metered.py").write_text(textwrap.dedent("""
        from my_lab.method import MyProx


        class Metered(MyProx):
            name = "metered"

            def client_metrics(self, trained, train_loss, payload, data, client_state, ctx):
                return {"samples_seen": float(data.num_samples)}

            def round_metrics(self, state, updates, round_idx):
                return {"samples_seen": sum(u.metrics["samples_seen"] for u in updates)}
    """))
    (lab / "metered.yaml").write_text(yaml.safe_dump(lab_config(lab, "my_lab.metered:Metered")))
    for engine in ("sequential", "vectorized"):
        with working_directory(lab):
            cfg = load_config("metered.yaml", [f"train.engine={engine}", "train.rounds=2"])
            assert not ALGORITHMS.get(cfg.algorithm.name).capabilities().keeps_client_state
            data = prepare_data(cfg)
            history = run_in_process(cfg, data)
        from orchestrator.server.sampling import sample_clients

        sizes = [data.client_data(c).num_samples for c in range(data.num_clients)]
        sampled = [sample_clients(cfg.seed, t, data.num_clients, cfg.clients_per_round) for t in range(2)]
        assert [m["samples_seen"] for m in history] == [float(sum(sizes[c] for c in s)) for s in sampled], engine


def pytest_in(directory: Path, *argv: str) -> str:
    """A fresh `python -m pytest` in `directory`, as a user runs a new method's tests from there; its summary."""
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv], cwd=directory,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert test.returncode == 0, test.stdout[-3000:]
    return test.stdout


def test_mooring_new_method_writes_the_documented_method_and_a_test_of_its_loss_that_passes(tmp_path, capsys):
    from orchestrator import cli

    assert cli.main(["new", "method", "my_prox", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith(  # outside the working directory: a flat module, run from there
        f"from {tmp_path.resolve()}, name it as algorithm.name: my_prox:MyProx and test it with "
        "python -m pytest test_my_prox.py")
    assert (tmp_path / "my_prox.py").read_text() == METHOD  # docs/design.md's example is what the command writes
    assert "2 passed" in pytest_in(tmp_path, "test_my_prox.py")  # its loss by hand, both engines alike
    assert cli.main(["new", "method", "my_prox", "--dir", str(tmp_path)]) == 2  # nothing is overwritten
    assert capsys.readouterr().err.splitlines() == [
        f"error: mooring new method: {tmp_path / 'my_prox.py'}, {tmp_path / 'test_my_prox.py'} already exists; "
        "nothing was written"]


@pytest.mark.parametrize("template", ["--client", "--server"])
def test_the_client_and_server_templates_write_tests_that_pass_as_written(tmp_path, template):
    """A method that changes the client's loss, and one that changes the server's aggregation: each written test
    passes as it is, run as a user runs it (PyTorch's default threads: no OMP_NUM_THREADS, which this suite sets).
    How long they take is not asserted here (no timed assertions in tests)."""
    from orchestrator import cli

    assert cli.main(["new", "method", "my_method", template, "--dir", str(tmp_path)]) == 0
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_method.py"],
                          cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**env, "PYTHONPATH": str(ROOT)})
    assert test.returncode == 0 and "2 passed" in test.stdout, test.stdout[-3000:]
    written = (tmp_path / "my_method.py").read_text()
    assert ("def aggregate(" in written) == (template == "--server")
    assert ("def local_loss(" in written) == (template == "--client")


def test_a_new_method_below_the_working_directory_is_a_package_module_named_from_there(tmp_path, monkeypatch):
    from orchestrator.commands.new import Layout, layout

    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "__init__.py").write_text("# the lab's own\n")
    assert layout("m", tmp_path / "a" / "b", tmp_path) == Layout(
        "a.b.m", tmp_path.resolve(), (tmp_path / "a" / "__init__.py", tmp_path / "a" / "b" / "__init__.py"))
    assert layout("m", tmp_path / "done", tmp_path) == Layout("done.m", tmp_path.resolve())  # kept as it is
    for flat in (tmp_path, tmp_path / "my-lab", tmp_path / "a" / "class", tmp_path.parent):  # no package name
        assert layout("m", flat, tmp_path) == Layout("m", flat.resolve())
    monkeypatch.chdir(tmp_path)
    assert layout("m", Path("lab"), None) == Layout("lab.m", tmp_path.resolve(), (tmp_path / "lab" / "__init__.py",))


@pytest.mark.parametrize("name, problem", [
    ("fedavg", "fedavg is a built-in method's name; choose another"),
    ("2nd", "a method's name is a Python identifier (letters, digits, _)"),
    # issue 36: `class (Algorithm):`, and modules the method file would shadow
    ("_", "its class would be named '', which is not a Python class name; use letters and digits with _ between "
          "words (my_prox → MyProx)"),
    ("_2", "its class would be named '2', which is not a Python class name; use letters and digits with _ between "
           "words (my_prox → MyProx)"),
    ("none", "its class would be named 'None', which is not a Python class name; use letters and digits with _ "
             "between words (my_prox → MyProx)"),
    ("random", "random is a standard library module; random.py would shadow it wherever it is imported from; "
               "choose another"),
    ("os", "os is a standard library module; os.py would shadow it wherever it is imported from; choose another"),
    ("torch", "torch is an installed module ("),
    ("tasks", "tasks is an installed module ("),
])
def test_a_new_method_s_name_is_checked_in_one_line(tmp_path, capsys, name, problem):
    from orchestrator import cli

    assert cli.main(["new", "method", name, "--dir", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: mooring new method ") and (line.endswith(problem) or problem.endswith("(")
                                                                and problem in line), line
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------------- partition kinds
# docs/design.md's example of a partition kind, as it stands, then functions whose results are refused
SPLITS = '''
"""Partition kinds of the lab's own (tasks/data/partition_kinds.py: a SplitRequest in, one index array per client out)."""
import numpy as np

from tasks.data.partition_kinds import SplitRequest


''' + re.search(r"```python\n(def by_parity.*?)```", DESIGN.read_text(), re.S).group(1) + '''

def too_few(request):
    return [request.indices]


def twice(request):
    return [request.indices, request.indices[-1:]] + [[] for _ in range(request.num_clients - 2)]


def stranger(request):
    return [np.array([len(request.labels)])] + [[] for _ in range(request.num_clients - 1)]


def halves(request):
    return [request.indices / 2] + [[] for _ in range(request.num_clients - 1)]


NOT_A_FUNCTION = 3
'''
PARITY = "my_lab.splits:by_parity"


@pytest.fixture(scope="module")
def splits(lab):
    (lab / "my_lab" / "splits.py").write_text(SPLITS.lstrip())
    return lab


def test_a_partition_kind_of_one_s_own_splits_stores_and_shows_like_a_built_in(splits, capsys):
    from orchestrator import cli
    from orchestrator.experiment.datasets import partition_key, prepare_data

    with working_directory(splits):
        cfg = load_config("lab.yaml", [f"data.partition.kind={PARITY}"])
        data = prepare_data(cfg)
        again = prepare_data(cfg)  # read back from its Parquet file
        assert cli.main(["data", "show", "lab.yaml", "--set", f"data.partition.kind={PARITY}"]) == 0
    y = data.dataset.y_train
    for c in range(4):  # every sample of labels ≡ c (mod 4), train and own test split together
        held = np.sort(np.concatenate([data.partition.train[c], data.partition.test[c]]))
        assert held.tolist() == np.flatnonzero(y % 4 == c).tolist(), c
    assert again.partition_hash == data.partition_hash and again.partition.train[1].tolist() == \
        data.partition.train[1].tolist()
    assert (splits / "p" / f"partition-{partition_key(cfg)}.parquet").is_file()
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["1"]]
    counts = [int(v) for v in rows[0][4:]]  # client 1: labels 1 only
    assert counts[1] == len(data.partition.train[1]) and sum(counts) == counts[1]


@pytest.mark.parametrize("function, problem", [
    ("too_few", "returned 1 clients' samples for 4 clients"),
    ("twice", "is given to more than one client (or twice to one)"),
    ("stranger", "is not among the"),
    ("halves", "client 0's samples are not a 1-D array of integer indices"),
])
def test_what_a_partition_function_returns_is_checked_in_one_line(splits, function, problem):
    from tasks.data.partition import PartitionError, make_partition

    with working_directory(splits):
        cfg = load_config("lab.yaml", [f"data.partition.kind=my_lab.splits:{function}"])
    y = np.arange(40) % 5
    with pytest.raises(PartitionError) as e:
        make_partition(y, cfg.data, cfg.seed)
    [line] = str(e.value).splitlines()
    assert line.startswith(f"data.partition.kind = 'my_lab.splits:{function}': ") and problem in line, line


def test_a_partition_kind_comes_by_entry_point_and_may_not_take_a_built_in_s_name(splits, tmp_path, monkeypatch):
    dist = installed_distribution(tmp_path, monkeypatch, "my-lab-splits", "mooring.partitions", f"parity = {PARITY}")
    from tasks.data.partition import make_partition

    with working_directory(splits):
        cfg = load_config("lab.yaml", ["data.partition.kind=parity", "data.client_test_fraction=0"])
        partition = make_partition(np.arange(40) % 5, cfg.data, cfg.seed)
        with pytest.raises(ConfigError) as e:
            load_config("lab.yaml", ["data.partition.kind=my_lab.splits:NOT_A_FUNCTION"])
    assert [t.tolist() for t in partition.train] == [[i for i in range(40) if i % 5 % 4 == c] for c in range(4)]
    assert str(e.value).endswith("'my_lab.splits:NOT_A_FUNCTION': not a function (a partition kind is a function "
                                 "(SplitRequest) -> one index array per client)")
    (dist / "entry_points.txt").write_text(f"[mooring.partitions]\niid = {PARITY}\n")
    with working_directory(splits), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", ["data.partition.kind=another"])
    assert f"entry point iid = {PARITY} (mooring.partitions): 'iid' is a built-in partition kind's name" in str(e.value)


def test_a_round_failing_inside_a_call_of_several_keeps_the_rounds_before_it_and_checkpoints_nothing_after(lab):
    """The driver asks the coordinator for several rounds a call (resources.rounds_per_call = 3: rounds 1-3, then
    4-6 and the checkpoint due at 6). Round 5 fails in the middle of the second call: the run ends in one line
    naming round 5, metrics.jsonl keeps rounds 1-4, and the checkpoint asked for after the call is not written (it
    would hold the failed round's half-changed state)."""
    (lab / "my_lab" / "failing.py").write_text(textwrap.dedent('''
        from tasks.algorithms.fedavg import FedAvg


        class FailsInRound5(FedAvg):
            name = "fails_in_round_5"

            def aggregate(self, state, updates, round_idx):
                if round_idx == 4:
                    raise RuntimeError("the aggregate of round 5 fails")
                return super().aggregate(state, updates, round_idx)
    '''))
    config = lab_config(lab, "my_lab.failing:FailsInRound5")
    config["train"]["rounds"], config["checkpoint"]["every"] = 8, 6
    config["resources"] = {"rounds_per_call": 3, "clients_on": "coordinator"}
    (lab / "failing.yaml").write_text(yaml.safe_dump(config))
    from orchestrator.io.checkpoint import checkpoint_rounds
    mooring = Path(sys.executable).parent / "mooring"
    result = subprocess.run([str(mooring), "run", "failing.yaml", "--quiet"], cwd=lab, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert result.returncode != 0
    first, *frames = result.stderr.splitlines()  # the method's bug: its hook, then the traceback's last frames
    assert re.fullmatch(r"error: round 5 failed: fails_in_round_5's aggregate raised RuntimeError: the aggregate of "
                        r"round 5 fails \(the server, round 5\); .*", first), result.stderr[-2000:]
    assert frames[-1].endswith('in aggregate: raise RuntimeError("the aggregate of round 5 fails")'), frames
    run_dir = next((lab / "runs").glob("lab-fails_in_round_5-*"))
    rounds = [json.loads(line)["round"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rounds == [1, 2, 3, 4]
    assert checkpoint_rounds(str(run_dir)) == []


# ------------------------------------------- references that are not what they name, or whose module fails (issue 36)
@pytest.mark.parametrize("key, value, problem", [
    ("data.dataset", "builtins:exec", "not a dataset loader (a function (data options) -> ArrayDataset)"),
    ("data.dataset", "os:popen", "not a dataset loader (a function (data options) -> ArrayDataset): os.popen is the "
     "standard library's; name a function of your own"),
    ("data.dataset", "my_lab.parts:Wide", "not a dataset loader (a function (data options) -> ArrayDataset)"),
    ("data.partition.kind", "os:system", "not a function (a partition kind is a function (SplitRequest) -> one "
     "index array per client)"),
    ("data.partition.kind", "shutil:rmtree", "shutil.rmtree is the standard library's"),
    ("data.partition.kind", "my_lab.splits:two_arguments", "my_lab.splits.two_arguments takes (request, extra), "
     "not one argument"),
])
def test_a_reference_to_the_wrong_kind_of_function_is_refused_at_config_time(splits, key, value, problem):
    (splits / "my_lab" / "splits.py").write_text(SPLITS.lstrip() + "\n\ndef two_arguments(request, extra):\n"
                                                 "    return []\n")
    with working_directory(splits), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", [f"{key}={value}"])
    [line] = str(e.value).splitlines()
    assert line.startswith(f"lab.yaml: {key} = '{value}': ") and problem in line, line


@pytest.mark.parametrize("source, problem", [
    ("x = 1\nraise RuntimeError('no GPU here')\n", "cannot import my_lab.broken: RuntimeError: no GPU here "
     "(my_lab/broken.py, line 2)"),
    ("def f(:\n    pass\n", "cannot import my_lab.broken: SyntaxError: invalid syntax (my_lab/broken.py, line 1)"),
    ("import sys\nsys.exit(3)\n", "cannot import my_lab.broken: SystemExit: 3 (my_lab/broken.py, line 2)"),
    ("import my_lab.not_there\n", "cannot import my_lab.broken: ModuleNotFoundError: No module named "
     "'my_lab.not_there' (my_lab/broken.py, line 1)"),
])
def test_an_outside_module_that_fails_on_import_is_one_line_naming_it_the_exception_and_its_line(
        lab, source, problem):
    (lab / "my_lab" / "broken.py").write_text(source)
    with working_directory(lab), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", ["algorithm.name=my_lab.broken:Method"])
    [line] = str(e.value).splitlines()
    assert line.replace(str(lab) + "/", "") == f"lab.yaml: algorithm.name = 'my_lab.broken:Method': {problem}", line


def test_an_import_failing_inside_a_library_names_the_line_of_one_s_own_module(lab):
    (lab / "my_lab" / "broken.py").write_text("import json\n\nSETTINGS = json.loads('{not json')\n")
    with working_directory(lab), pytest.raises(ConfigError) as e:
        load_config("lab.yaml", ["data.dataset=my_lab.broken:load"])
    assert str(e.value).replace(str(lab) + "/", "").endswith(
        "cannot import my_lab.broken: JSONDecodeError: Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1) (my_lab/broken.py, line 3)")


def test_no_outside_code_resumes_a_run_directory_from_someone_else_without_running_its_modules(tmp_path, monkeypatch,
                                                                                              capsys):
    """A run directory received from someone else: its config names `helper:load`, and helper.py lies beside it.
    Resumed from there, the working directory is importable and helper.py would run; with --no-outside-code the
    reference is one line and nothing of it is imported (`mooring config check` too)."""
    from orchestrator import cli
    from tasks import registry

    received = tmp_path / "received-run"
    received.mkdir()
    ran = tmp_path / "helper-ran"
    (received / "helper.py").write_text(f"open({str(ran)!r}, 'w').close()\n\n\ndef load(opts):\n    return None\n")
    config = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    config["data"]["dataset"] = "helper:load"
    (received / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(received)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # never reached: the config is refused before Ray
    monkeypatch.setattr(registry.OutsideCode, "refused", False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        assert cli.main(["run", "--resume", str(received), "--no-outside-code"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "data.dataset = 'helper:load': a module:attribute reference runs outside " \
            "code, which --no-outside-code refuses; only built-in names and installed packages' entry points" in err
        assert cli.main(["config", "check", "config.yaml", "--no-outside-code"]) == 2
        assert "--no-outside-code refuses" in capsys.readouterr().err
        assert not ran.exists() and "helper" not in sys.modules
        monkeypatch.setattr(registry.OutsideCode, "refused", False)
        cli.main(["config", "check", "config.yaml"])  # without it, helper.py runs: what docs/how-to/runs.md warns about
        assert ran.exists()
    finally:
        sys.modules.pop("helper", None)


def test_mooring_new_method_stateful_writes_the_documented_scaffold_sized_method_whose_test_passes(
        tmp_path, monkeypatch, capsys):
    """In the package layout README recommends (`--dir my_lab`, run from the project), with and without --stateful:
    the printed reference names the method from there, and the written tests pass there."""
    from orchestrator import cli

    documented = re.search(r"### A method with state.*?```python\n(.*?)```", DESIGN.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["new", "method", "my_scaffold", "--stateful", "--dir", "my_lab"]) == 0
    assert cli.main(["new", "method", "my_prox", "--dir", "my_lab"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == ("wrote my_lab/my_scaffold.py and my_lab/test_my_scaffold.py, my_lab/__init__.py; from "
                          f"{tmp_path.resolve()}, name it as algorithm.name: my_lab.my_scaffold:MyScaffold and test it "
                          "with python -m pytest my_lab/test_my_scaffold.py")
    assert "algorithm.name: my_lab.my_prox:MyProx" in printed[1] and "__init__" not in printed[1]
    assert (tmp_path / "my_lab" / "my_scaffold.py").read_text() == documented
    with working_directory(tmp_path):  # the printed references resolve from the project
        from tasks.algorithms import ALGORITHMS

        for reference, name in (("my_lab.my_scaffold:MyScaffold", "my_scaffold"), ("my_lab.my_prox:MyProx", "my_prox")):
            assert ALGORITHMS.get(load_config(None, [f"algorithm.name={reference}"]).algorithm.name).name == name
    assert "4 passed" in pytest_in(tmp_path, "my_lab")  # by hand, and both engines alike, for each
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_lab"]  # the tests wrote nothing into the project
