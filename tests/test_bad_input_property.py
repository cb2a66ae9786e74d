"""Property: whatever the config file and the --set overrides, `mooring config check` (load, validate, check
the output directories) exits 0, or exits 2 with one line on stderr; never a traceback, and nothing that
existed before is changed. Configs and overrides are generated from the schema: every field of the default
config with wrong types, out-of-range and non-finite numbers, unknown keys, paths into files, /proc and
outside the run base, and config files that are not UTF-8 or not YAML. Sweep files likewise, through `mooring
sweep FILE --best`: search spaces from one point to 10³⁰ (counted, never listed), study and file names, limits.

CASES examples run in `make test` (MOORING_PROPERTY_CASES to change it); the README reports the number."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.config import flatten, load_config

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
