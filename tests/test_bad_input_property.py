"""Property: whatever the config file and the --set overrides, `mooring config check` (load, validate, check
the output directories) exits 0, or exits 2 with one line on stderr; never a traceback, and nothing that
existed before is changed. Configs and overrides are generated from the schema: every field of the default
config with wrong types, out-of-range and non-finite numbers, unknown keys, paths into files, /proc and
outside the run base, and config files that are not UTF-8 or not YAML.

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
