"""Property: whatever the config file and the --set overrides, `mooring config check` (load, validate, check
the output directories) exits 0, or exits 2 with one line on stderr; never a traceback, and nothing that
existed before is changed. Configs and overrides are generated from the schema: every field of the default
config with wrong types, out-of-range and non-finite numbers, unknown keys, paths into files, /proc and
outside the run base, and config files that are not UTF-8 or not YAML. Sweep files likewise, through `mooring
sweep FILE --best`: search spaces from one point to 10³⁰ (counted, never listed), study and file names, limits.

The same for the files a config points at (issue 36): availability and system traces and outside modules through
`config check`, and LEAF files through their loaders (a refusal's exception must be one the CLI reports with exit 2).

CASES examples run in `make test` (MOORING_PROPERTY_CASES to change it), a quarter of that for each kind of file;
docs/how-to/configure.md, "Bad input", reports the numbers."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.experiment.config import flatten, load_config

CASES = int(os.environ.get("MOORING_PROPERTY_CASES", "200"))
DEFAULT = "configs/default.yaml"
FIELDS = sorted(flatten(load_config(DEFAULT).to_dict()))
PRE_EXISTING = Path(tempfile.mkdtemp(prefix="mooring-pre-existing-"))
(PRE_EXISTING / "a-file").write_text("must stay as it is\n")
(PRE_EXISTING / "dir").mkdir()
(PRE_EXISTING / "dir" / "inside").write_bytes(b"\x00\x01")


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


numbers = st.one_of(
    st.integers(), st.integers(min_value=2**32 - 2, max_value=10**30), st.integers(max_value=0),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([".inf", "-.inf", ".nan", "1e400", "-0"]))
wrong_types = st.one_of(st.text(max_size=12), st.booleans(), st.just("null"), st.just("[1, 2]"),
                        st.just("{a: 1}"), st.just("[[]"), st.just("'unterminated"))
paths = st.sampled_from([str(PRE_EXISTING / "a-file"), str(PRE_EXISTING / "a-file" / "below"), "/proc/mooring",
                         "/proc", "../../escaped", "/", str(PRE_EXISTING / "dir"), "", "s3://", "\x00"])
names = st.one_of(st.sampled_from(["../../escaped", "a/b", ".", "..", "", "-x", "x" * 200, "ok-name"]),
                  st.text(max_size=10))
keys = st.one_of(st.sampled_from(FIELDS), st.sampled_from(FIELDS).map(lambda k: k + ".extra"),
                 st.sampled_from(["bogus", "train.bogus", "algorithm.nope.mu", "model.nope", "data..x", ".", "=",
                                  "claims.title"]),
                 st.text(alphabet="abcdefghij._", min_size=1, max_size=12))


def as_text(value) -> str:
    return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix(
        "\n...").strip()


@st.composite
def override(draw) -> str:
    key = draw(keys)
    if key.endswith(("dir", "root")):
        value = draw(st.one_of(paths, wrong_types))
    elif key == "name":
        value = draw(names)
    else:
        value = draw(st.one_of(numbers, wrong_types, paths))
    return f"{key}={as_text(value)}"


config_files = st.one_of(
    st.none(),  # the default config
    st.binary(max_size=40),  # not UTF-8, or not YAML, or not a mapping
    st.dictionaries(st.sampled_from(["seed", "name", "train", "data", "bogus"]),
                    st.one_of(numbers, wrong_types, st.dictionaries(st.sampled_from(FIELDS), numbers, max_size=2)),
                    max_size=3).map(lambda d: yaml.safe_dump(d).encode()),
    st.sampled_from([b"seed: !!python/object/apply:os.system ['touch pwned']\n", b"\xff\xfe\x00", b"- 1\n",
                     b"train: {rounds: [1,\n"]),
)


def check(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    return code, capsys.readouterr().err


@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(overrides=st.lists(override(), max_size=3), config=config_files)
def test_any_config_and_overrides_validate_or_fail_in_one_line(overrides, config, capsys):
    before = tree_digest(PRE_EXISTING)
    path = DEFAULT
    if config is not None:
        path = str(PRE_EXISTING.parent / f"{PRE_EXISTING.name}-config.yaml")
        Path(path).write_bytes(config)
    code, err = check(["config", "check", path, *[f"--set={o}" for o in overrides]], capsys)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert tree_digest(PRE_EXISTING) == before
    assert not Path("pwned").exists()


# ------------------------------------------------------- traces, LEAF files and outside modules (issue 36)
# Files a user hands Mooring besides the config, generated the same way: each is read by `config check` (traces,
# outside modules) or by its loader (LEAF), and must be accepted, or refused in one line with exit 2.
FILE_CASES = max(10, CASES // 4)
FILES = Path(tempfile.mkdtemp(prefix="mooring-property-files-"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8)
damaged_documents = st.one_of(
    st.binary(max_size=30), st.sampled_from(["[" * 100_000, '{"a": ' + "[" * 3000, "", "{", "\ufeff{}", "1" * 5000]))
trace_numbers = st.one_of(st.integers(-5, 50), st.integers(min_value=10**308, max_value=10**330), st.floats(),
                          st.booleans(), st.text(max_size=2), st.none())
client_keys = st.one_of(st.integers(-2, 12).map(str), st.sampled_from(["1" + "0" * 40, "x", "", " 3", "1.5", "٣"]))
availability_traces = st.one_of(
    st.dictionaries(client_keys, st.lists(st.lists(trace_numbers, max_size=3), max_size=3), max_size=4).map(json.dumps),
    json_values.map(json.dumps), damaged_documents)
system_rows = st.lists(st.tuples(st.one_of(st.integers(-1, 12), st.text(max_size=3)),
                                 trace_numbers, trace_numbers), max_size=12)
system_traces = st.one_of(
    system_rows.map(lambda rows: "client,speed,bandwidth\n" + "".join(f"{c},{s},{b}\n" for c, s, b in rows)),
    st.sampled_from(["client,speed,bandwidth\n0,1," + "1" * 200_000 + "\n", "client,speed\n0,1\n",
                     'client,speed,bandwidth\n0,"1\n', "client,speed,bandwidth\n0,1,\x002\n"]),
    damaged_documents)


def write_file(name: str, content: str | bytes) -> Path:
    path = FILES / name
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return path


def check_one_line_or_valid(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err


@settings(max_examples=FILE_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
@given(availability=st.one_of(st.none(), availability_traces), system=st.one_of(st.none(), system_traces))
def test_any_participation_trace_is_read_or_refused_in_one_line(availability, system, capsys):
    overrides = []
    if availability is not None:
        overrides += ["participation.availability.kind=trace",
                      f"participation.availability.trace={write_file('availability.json', availability)}"]
    if system is not None:
        overrides.append(f"participation.system.trace={write_file('system.csv', system)}")
    check_one_line_or_valid(*check(["config", "check", DEFAULT, *[f"--set={o}" for o in overrides]], capsys))


pixels = st.sampled_from([[0.5] * 784, [0.5] * 3, "to be ", [[0.5] * 784], None, [2.0] * 784, [float("nan")] * 784,
                          ["1", "date", "so happy"], []])
labels = st.one_of(st.integers(-2, 90), st.sampled_from([[1], "a", "ab", 1.0, True, None]))
user_records = st.one_of(st.fixed_dictionaries({"x": st.lists(pixels, max_size=2), "y": st.lists(labels, max_size=2)}),
                         json_values)
user_names = st.one_of(st.sampled_from(["a", "b", "0"]), st.sampled_from([0, ["a"], {"u": 1}, None]))


@st.composite
def leaf_documents(draw) -> str | bytes:
    """A LEAF file: well formed in parts, its counts, users, records, samples and labels drawn to disagree."""
    if draw(st.integers(0, 9)) == 0:
        return draw(damaged_documents)
    users = draw(st.lists(user_names, max_size=3) | json_values)
    doc = {"users": users,
           "num_samples": draw(st.lists(st.integers(-1, 3) | st.booleans() | st.floats(0, 3), max_size=3) | json_values),
           "user_data": draw(st.dictionaries(st.sampled_from(["a", "b", "0"]), user_records, max_size=3) | json_values)}
    for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=1)):
        del doc[key]
    return json.dumps(doc)


@settings(max_examples=FILE_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dataset=st.sampled_from(["femnist", "shakespeare", "sent140"]), train=leaf_documents(),
       test=st.one_of(leaf_documents(), st.just(None)))
def test_any_leaf_file_is_loaded_or_refused_in_one_line(dataset, train, test):
    from types import SimpleNamespace

    from orchestrator.cli import known_errors, report_known_error
    from tasks.data import leaf

    root = Path(tempfile.mkdtemp(dir=FILES))
    for split, content in (("train", train), ("test", test or json.dumps(
            {"users": ["a"], "num_samples": [0], "user_data": {"a": {"x": [], "y": []}}}))):
        (root / dataset / "data" / split).mkdir(parents=True)
        path = root / dataset / "data" / split / "part_0.json"
        path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    opts = SimpleNamespace(root=str(root), text=SimpleNamespace(seq_len=5))
    try:
        loaded = getattr(leaf, f"load_leaf_{dataset}")(opts)
    except known_errors() as e:
        assert len(str(e).splitlines()) == 1 and str(e).startswith(str(root)), str(e)
        assert report_known_error(e) == 2
    else:
        assert len(loaded.y_train) == len(loaded.owners) and loaded.x_train.shape[0] == len(loaded.y_train)


MODULE_BODIES = ["raise RuntimeError('no GPU here')", "raise KeyError('cc')", "def f(:\n    pass", "x = (",
                 "import sys\nsys.exit(3)", "raise SystemExit('bye')", "import no_such_module_of_mooring_tests",
                 "def f():\n    return f()\nf()", "1 / 0", "def load(opts):\n    return 1",
                 "def load(opts, extra):\n    pass", "class load:\n    pass", "load = 3", "load = print",
                 "from os import system as load", "load = lambda opts: None", "from shutil import rmtree as load",
                 "from tasks.algorithms.fedavg import FedAvg as load", "from tasks.models.cnn import *"]
STDLIB_REFERENCES = ["builtins:exec", "builtins:eval", "os:system", "os:popen", "shutil:rmtree", "subprocess:call",
                     "pickle:loads", "importlib:import_module", "os:path", "os"]
modules_written = iter(range(10**9))


@settings(max_examples=FILE_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["data.dataset", "data.partition.kind", "algorithm.name", "model.name"]),
       bodies=st.lists(st.sampled_from(MODULE_BODIES), min_size=1, max_size=2),
       stdlib=st.one_of(st.none(), st.sampled_from(STDLIB_REFERENCES)))
def test_any_outside_module_or_reference_is_used_or_refused_in_one_line(key, bodies, stdlib, capsys):
    import importlib
    import sys

    name = f"mooring_property_lab_{next(modules_written)}"
    (FILES / f"{name}.py").write_text("\n".join(bodies) + "\n")
    importlib.invalidate_caches()
    sys.path.insert(0, str(FILES))
    try:
        reference = stdlib or f"{name}:load"
        check_one_line_or_valid(*check(["config", "check", DEFAULT, f"--set={key}={reference}"], capsys))
    finally:
        sys.path.remove(str(FILES))
# ------------------------------------------------------------------------------------------- sweep files
# `mooring sweep FILE --best` loads and checks the whole sweep file (base, search space, study name, grid size,
# limits) and then asks the storage for a study that does not exist: exit 1 with one line for a valid file, exit 2
# with one line for a bad one. A grid of 10¹⁸ points or a range of 10³⁰ integers must be counted, never listed.
SWEEP_CASES = max(20, CASES // 4)
SWEEP_SCRATCH = Path(tempfile.mkdtemp(prefix="mooring-sweep-property-"))
INT_PATHS, FLOAT_PATHS = ["seed", "train.rounds", "train.local_epochs"], ["train.optimizer.lr", "data.partition.alpha"]
bounds = st.one_of(st.integers(min_value=-3, max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
                   wrong_types)
# valid ranges, from one value to 10³⁰ of them, so that grids of every size are counted; and anything
int_params = st.fixed_dictionaries({"type": st.just("int"), "low": st.integers(1, 3), "high": st.integers(4, 10**30)},
                                   optional={"step": st.integers(1, 10**6)})
float_params = st.fixed_dictionaries({"type": st.just("float"), "low": st.floats(1e-4, 0.1),
                                      "high": st.floats(0.2, 1.0)},
                                     optional={"step": st.floats(1e-15, 0.5), "log": st.booleans(),
                                               "grid": st.lists(st.floats(0.1, 0.2), min_size=1, max_size=3)})
categorical_params = st.fixed_dictionaries({"type": st.just("categorical"),
                                            "choices": st.lists(st.integers(1, 9), min_size=1, max_size=4,
                                                                unique=True)})
any_params = st.fixed_dictionaries(
    {"type": st.sampled_from(["float", "int", "categorical", "uniform"]), "low": bounds, "high": bounds},
    optional={"log": st.booleans(), "step": bounds, "grid": st.lists(bounds, max_size=3),
              "choices": st.lists(st.one_of(bounds, st.text(max_size=5)), max_size=3)})
valid_spaces = st.lists(st.sampled_from(INT_PATHS + FLOAT_PATHS), min_size=1, max_size=3, unique=True).flatmap(
    lambda paths: st.fixed_dictionaries({p: st.one_of(int_params if p in INT_PATHS else float_params,
                                                      categorical_params) for p in paths}))
any_spaces = st.dictionaries(st.sampled_from([*INT_PATHS, *FLOAT_PATHS, "algorithm.fedavg.x", "bogus"]), any_params,
                             max_size=3)
samplers = st.one_of(st.fixed_dictionaries({"name": st.just("grid")},
                                           optional={"points": st.one_of(st.integers(2, 10**12), bounds)}),
                     st.sampled_from([{"name": "tpe"}, {"name": "random"}, {"name": "nope"}]))
sweep_files = st.fixed_dictionaries(
    {"params": st.one_of(valid_spaces, any_spaces), "sampler": samplers},
    optional={"study": names, **{key: st.one_of(st.integers(1, 50), bounds) for key in
                                 ("n_trials", "max_failures", "parallel")}})


@settings(max_examples=SWEEP_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
@given(body=sweep_files, file_name=st.one_of(st.just("sweep"), st.sampled_from(["my sweep", "ü", "-x", "a" * 130])),
       study=st.one_of(st.none(), st.just(None), names), max_failures=st.one_of(st.none(), st.integers(-2, 10**20)))
def test_any_sweep_file_loads_or_fails_in_one_line(body, file_name, study, max_failures, capsys):
    before = tree_digest(PRE_EXISTING)
    path = SWEEP_SCRATCH / f"{file_name}.yaml"
    path.write_text(yaml.safe_dump({"base": str(Path(DEFAULT).absolute()),
                                    "overrides": {"checkpoint.dir": str(SWEEP_SCRATCH / "runs")},
                                    "storage": f"sqlite:///{SWEEP_SCRATCH / 'optuna.db'}", **body}))
    argv = ["sweep", str(path), "--best", *([f"--study={study}"] if study is not None else []),
            *([f"--max-failures={max_failures}"] if max_failures is not None else [])]
    code, err = check(argv, capsys)
    lines = err.strip().splitlines()
    assert code in (1, 2) and "Traceback" not in err, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert code == 2 or "no study" in lines[0], err
    assert tree_digest(PRE_EXISTING) == before
