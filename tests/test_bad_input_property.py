"""Property: whatever the config file and the --set overrides, `mooring config check` (load, validate, check
the output directories) exits 0, or exits 2 with one line on stderr; never a traceback, and nothing that
existed before is changed. Configs and overrides are generated from the schema: every field of the default
config with wrong types, out-of-range and non-finite numbers, unknown keys, paths into files, /proc and
outside the run base, and config files that are not UTF-8 or not YAML. Sweep files likewise, through `mooring
sweep FILE --best`: search spaces from one point to 10³⁰ (counted, never listed), study and file names, limits.

The same for the files a config points at (issue 36): availability and system traces and outside modules through
`config check`, and LEAF files through their loaders (a refusal's exception must be one the CLI reports with exit 2).

Read strictly: each bad setting of a kind once taken for something else (a boolean for a number, an
integer past 64 bits or too long to print, a layer of no width, a key given twice, a trace naming a client twice or
outside the federation, besides wrong types and unknown keys) is exit 2 with one line naming it, through --set or a
file, and the Python API raises the same line; good values give the same config through --set, a file and the API.

CASES examples run in `make test` (MOORING_PROPERTY_CASES to change it), a quarter of that for each kind of file
and half (at least 60) for each strict check; docs/how-to/configure.md, "Bad input", reports the numbers."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
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


# ------------------------------------------------------------------------------------ read strictly
# Every bad value of a kind Mooring once took for something else is refused, with exit 2 and one line naming the
# key (or the YAML line); a good value reaches the same config through --set, a YAML file and the Python API.
# Typed fields are read off the default config; model options and traces are generated per model and per trace.
STRICT_CASES = max(60, CASES // 2)
STRICT_FILES = Path(tempfile.mkdtemp(prefix="mooring-strict-"))
DEFAULT_VALUES = flatten(load_config(DEFAULT).to_dict())
INT_FIELDS = sorted(k for k, v in DEFAULT_VALUES.items() if type(v) is int)
FLOAT_FIELDS = sorted(k for k, v in DEFAULT_VALUES.items() if type(v) is float)
BOOL_FIELDS = sorted(k for k, v in DEFAULT_VALUES.items() if type(v) is bool)
# every width of a built-in model, and the model's other options set to fit it
WIDTHS = [("mlp", "feature_dim", ""), ("mlp", "hidden", "list"), ("digits_cnn", "channels", "list"),
          ("digits_cnn_bn", "feature_dim", ""), ("acar_cnn", "hidden", ""), ("acar_cnn", "channels", ""),
          ("acar_cnn", "feature_dim", ""), ("mixed_digits_cnn", "feature_dim", ""), ("groupnorm_cnn", "groups", ""),
          ("groupnorm_cnn", "channels", "list"), ("resnet18_gn", "width", ""), ("resnet18_gn", "groups", ""),
          ("resnet18_gn", "feature_dim", ""), ("vgg11", "width", ""), ("htfe_resnet10", "width", ""),
          ("htfe_cnn", "feature_dim", ""), ("fedsa_digits_2", "feature_dim", ""), ("char_rnn", "hidden", ""),
          ("char_rnn", "embed_dim", "")]
YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "inf", "nan", "infinity"}


def as_yaml(value) -> str:
    """`value` as one line of YAML that reads back as `value` (a string quoted where YAML would read another type)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip().removesuffix(
        "...").strip()


def nested(key: str, text: str) -> str:
    """A YAML document setting the dotted `key` to the YAML `text`, one block per level."""
    *sections, leaf = key.split(".")
    return "".join(f"{'  ' * i}{s}:\n" for i, s in enumerate(sections)) + f"{'  ' * len(sections)}{leaf}: {text}\n"


letters = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(
    lambda s: s not in YAML_WORDS)
unknown_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).map(lambda s: "zz" + s)


@st.composite
def bad_input(draw) -> dict:
    """A bad setting: {kind, key, text (its YAML), value (the Python value, when it has one), expect (what the line
    must say)}; or a whole file (kind "file"), or a trace."""
    kind = draw(st.sampled_from(["bool_for_number", "number_for_bool", "past_64_bits", "too_long", "no_width",
                                 "wrong_type", "unknown_key", "twice", "system_trace", "availability_trace"]))
    if kind == "bool_for_number":
        key, value = draw(st.sampled_from(INT_FIELDS + FLOAT_FIELDS)), draw(st.booleans())
        return dict(kind=kind, key=key, value=value, expect=f"{key} = {value}: expected ")
    if kind == "number_for_bool":
        key = draw(st.sampled_from(BOOL_FIELDS))
        value = draw(st.one_of(st.integers(-2, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                               st.sampled_from(["yes", "no", "true", "0", "on", "1"])))
        return dict(kind=kind, key=key, value=value, expect=f"{key} = {value!r}: expected true or false")
    if kind == "past_64_bits":
        key = draw(st.sampled_from(INT_FIELDS))
        value = draw(st.integers(2**63, 10**99)) * draw(st.sampled_from([1, -1]))
        return dict(kind=kind, key=key, value=value, expect=f"{key} = {value}: ")
    if kind == "too_long":
        key, digits = draw(st.sampled_from(INT_FIELDS + FLOAT_FIELDS)), draw(st.integers(101, 6000))
        return dict(kind=kind, key=key, text=draw(st.sampled_from(["", "-"])) + "7" * digits,
                    expect=f"an integer of {digits} digits at line ")
    if kind == "no_width":
        model, option, shape = draw(st.sampled_from(WIDTHS))
        width = draw(st.integers(-10**6, 0))
        value = draw(st.lists(st.integers(1, 64), min_size=1, max_size=2)) + [width] if shape == "list" else width
        return dict(kind=kind, key="model", value={"name": model, option: value},
                    expect=f"model.{option}{f'.{len(value) - 1}' if shape else ''} = {width}: Input should be greater "
                           "than or equal to ")
    if kind == "wrong_type":
        key = draw(st.sampled_from(INT_FIELDS + FLOAT_FIELDS))
        value = draw(st.one_of(letters, st.lists(st.integers(0, 9), min_size=1, max_size=3),
                               st.dictionaries(letters, st.integers(0, 9), min_size=1, max_size=2)))
        return dict(kind=kind, key=key, value=value, expect=key)
    if kind == "unknown_key":
        section = draw(st.sampled_from(sorted({k.rsplit(".", 1)[0] for k in DEFAULT_VALUES if "." in k}) + [""]))
        key = ".".join(p for p in (section, draw(unknown_names)) if p)
        return dict(kind=kind, key=key, value=draw(st.integers(0, 9)), expect=key)
    if kind == "twice":  # a key repeated at some level of a field's path, in a file
        path = draw(st.sampled_from(sorted(DEFAULT_VALUES))).split(".")
        level = draw(st.integers(0, len(path) - 1))
        head = "".join(f"{'  ' * i}{s}:\n" for i, s in enumerate(path[:level]))
        once = nested(".".join(path[level:]), as_yaml(DEFAULT_VALUES[".".join(path)]))
        body = "".join("  " * level + line + "\n" for line in once.splitlines())
        return dict(kind=kind, document=head + body + body, expect=f"key '{path[level]}' given twice, at line ")
    clients = list(range(10))  # the default federation's
    if kind == "system_trace":
        extra = draw(st.one_of(st.integers(10, 10**6), st.sampled_from(clients)))
        rows = draw(st.permutations(clients)) + [extra]
        expect = "participation.system.trace = " + (f"'{{path}}': client {extra} is not in the federation"
                                                      if extra >= 10 else f"'{{path}}': line {len(rows) + 1}: client "
                                                      f"{extra} has a row already")
        return dict(kind=kind, trace="client,speed,bandwidth\n" + "".join(f"{c},1.5,100\n" for c in rows),
                    expect=expect)
    twice = draw(st.sampled_from(clients))
    spelled = draw(st.sampled_from([f"0{twice}", f"00{twice}", str(twice)]))
    body = ", ".join([f'"{twice}": [[0, 5]]', f'"{spelled}": [[6, 9]]'])
    expect = ("key" if spelled == str(twice) else f"client {twice} is listed") + " "
    return dict(kind=kind, trace="{" + body + "}", expect=f"participation.availability.trace = '{{path}}': {expect}")


@settings(max_examples=STRICT_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
@given(bad=bad_input(), via=st.sampled_from(["set", "file"]), action=st.sampled_from(["check", "show"]))
def test_each_bad_setting_is_one_line_naming_it_and_exit_2(bad, via, action, capsys):
    import mooring
    from mooring.errors import MooringError

    path, expect, argv = DEFAULT, bad["expect"], []
    if "trace" in bad:
        trace = STRICT_FILES / ("system.csv" if bad["kind"] == "system_trace" else "availability.json")
        trace.write_text(bad["trace"])
        key = "participation.system.trace" if bad["kind"] == "system_trace" else "participation.availability.trace"
        argv = [f"--set={key}={trace}"] + (["--set=participation.availability.kind=trace"]
                                            if "availability" in key else [])
        expect = expect.replace("{path}", str(trace))
    elif "document" in bad or via == "file":
        path = str(STRICT_FILES / "config.yaml")
        text = bad.get("document") or nested(bad["key"], bad["text"] if "text" in bad else as_yaml(bad["value"]))
        Path(path).write_text(text)
    else:
        argv = [f"--set={bad['key']}={bad['text'] if 'text' in bad else as_yaml(bad['value'])}"]
    code, err = check(["config", action, path, *argv], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert expect in lines[0], (expect, lines[0])
    if "value" in bad and via == "set":  # the Python API says the same
        with pytest.raises(MooringError) as refused:
            mooring.config(DEFAULT, {bad["key"]: bad["value"]})
        assert lines[0] == f"error: {refused.value}"


GOOD_VALUES = {
    "seed": st.integers(0, 2**32 - 1),
    "name": st.from_regex(r"[A-Za-z][A-Za-z0-9._+-]{0,20}", fullmatch=True),
    "data.num_clients": st.integers(2, 500),
    "data.test_fraction": st.floats(0, 0.9),
    "data.pad": st.integers(0, 4),
    "data.partition.alpha": st.floats(1e-3, 1e3),
    "data.partition.min_size": st.integers(0, 50),
    "data.partition.cap": st.booleans(),
    "data.partition.select": st.sampled_from(["largest", "random", "first"]),
    "model.hidden": st.lists(st.integers(1, 512), max_size=3),
    "model.feature_dim": st.integers(1, 512),
    "model.final_relu": st.booleans(),
    "algorithm.fedprox.mu": st.floats(0, 10),
    "train.rounds": st.integers(1, 10**12),
    "train.batch_size": st.integers(1, 4096),
    "train.local_epochs": st.integers(1, 20),
    "train.fraction": st.floats(0.01, 1.0),
    "train.drop_last": st.booleans(),
    "train.optimizer.lr": st.floats(1e-6, 10),
    "train.optimizer.momentum": st.floats(0, 0.99),
    "train.group_steps": st.one_of(st.just("auto"), st.integers(1, 10**6)),
    "train.grad_clip": st.one_of(st.none(), st.floats(1e-3, 100)),
    "eval.every": st.integers(1, 100),
    "eval.batch_size": st.integers(1, 10**5),
    "resources.cpus_per_actor": st.floats(0.1, 16),
    "resources.resident_clients": st.one_of(st.none(), st.integers(1, 10**6)),
    "checkpoint.every": st.one_of(st.just("auto"), st.integers(0, 1000)),
    "participation.system.slow_classes": st.lists(st.integers(0, 9), max_size=3),
}


def merged(raw: dict, key: str, value) -> None:
    *sections, leaf = key.split(".")
    for s in sections:
        raw = raw.setdefault(s, {})
    raw[leaf] = value


@settings(max_examples=STRICT_CASES, deadline=None)
@given(values=st.lists(st.sampled_from(sorted(GOOD_VALUES)), min_size=1, max_size=5, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({k: GOOD_VALUES[k] for k in keys})))
def test_each_good_setting_reads_the_same_from_set_a_file_and_the_api(values):
    import mooring
    from orchestrator.experiment.config import read_yaml

    by_set = load_config(DEFAULT, [f"{k}={as_yaml(v)}" for k, v in values.items()])
    raw = read_yaml(DEFAULT)
    for key, value in values.items():
        merged(raw, key, value)
    path = STRICT_FILES / "good.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    by_file = load_config(path)
    by_api = mooring.config(DEFAULT, values)
    assert by_set == by_file == by_api
    read = flatten(by_file.to_dict())
    assert {k: read[k] for k in values} == values
