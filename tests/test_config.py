"""The config schema: defaults, overrides, and one clear line for every kind of bad input."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.experiment.config import ConfigError, build_config, load_config, read_yaml, with_overrides

DEFAULT = "configs/default.yaml"


def error_of(overrides: list[str], path: str = DEFAULT) -> str:
    with pytest.raises(ConfigError, match=r"^\S+: ") as e:  # every message starts with its source
        load_config(path, overrides)
    return str(e.value)


def test_default_config_is_the_embedded_digits_experiment():
    cfg = load_config(DEFAULT)
    assert (cfg.data.dataset, cfg.data.num_clients, cfg.data.partition.kind, cfg.data.partition.alpha) == (
        "digits", 10, "dirichlet", 0.1)


def test_dotted_overrides_reach_nested_fields_with_yaml_types():
    cfg = load_config(DEFAULT, ["train.rounds=5", "data.partition.alpha=0.5", "seed=3", "model.hidden=[32, 16]"])
    assert (cfg.train.rounds, cfg.data.partition.alpha, cfg.seed, cfg.model.options["hidden"]) == (5, 0.5, 3, [32, 16])


def test_algorithm_blocks_are_validated_but_only_the_named_one_is_used():
    cfg = load_config(DEFAULT, ["algorithm.fedprox.mu=0.3", "algorithm.name=fedavg"])
    assert cfg.algorithm.params_for("fedprox").mu == 0.3
    assert cfg.algorithm.params_for().model_dump() == {}
    switched = with_overrides(cfg, {"algorithm.name": "fedprox"})
    assert switched.algorithm.params_for().mu == 0.3
    assert load_config(DEFAULT, ["algorithm.name=fedprox"]).algorithm.params_for().mu == 0.01  # paper default


@pytest.mark.parametrize("override, message", [
    (["data.partition.alpha=0"], "configs/default.yaml: data.partition.alpha = 0: Input should be greater than 0"),
    (["train.fraction=1.5"], "configs/default.yaml: train.fraction = 1.5: Input should be less than or equal to 1"),
    (["train.rounds=-1"], "configs/default.yaml: train.rounds = -1: Input should be greater than or equal to 1"),
    # the cases (#14): each was a traceback or wrongly accepted
    (["train.rounds=0"], "configs/default.yaml: train.rounds = 0: Input should be greater than or equal to 1"),
    (["seed=-1"], "configs/default.yaml: seed = -1: Input should be greater than or equal to 0"),
    (["seed=100000000000000000000"],
     "configs/default.yaml: seed = 100000000000000000000: Input should be less than or equal to 4294967295"),
    (["data.split_seed=-3"], "configs/default.yaml: data.split_seed = -3: Input should be greater than or equal to 0"),
    (["train.optimizer.lr=.inf"], "configs/default.yaml: train.optimizer.lr = inf: Input should be a finite number"),
    (["data.partition.alpha=.inf"],
     "configs/default.yaml: data.partition.alpha = inf: Input should be a finite number"),
    (["algorithm.fedprox.mu=.nan"], "configs/default.yaml: algorithm.fedprox.mu = nan: Input should be a finite number"),
    (["name=../../escaped"], "configs/default.yaml: name = '../../escaped': must be a name, not a path: 1-128 "
                             "letters, digits, '.', '_', '+' or '-', starting with a letter or digit"),
    (["train.clients_per_round=11"],
     "configs/default.yaml: train.clients_per_round = 11: more clients per round than data.num_clients = 10"),
    (["train.bogus=1"], "configs/default.yaml: unknown key 'train.bogus' (value 1); check the spelling against "
                        "`mooring config show`"),
    (["seed=abc"], "configs/default.yaml: seed = 'abc': Input should be a valid integer, unable to parse string as "
                   "an integer"),
    (["data.dataset=imagenet"], "configs/default.yaml: data.dataset = 'imagenet': unknown dataset; allowed: digits, "
                                "digits_28, synthetic, mnist, fmnist, emnist, cifar10, cifar100, shakespeare, "
                                "leaf_femnist, leaf_shakespeare, leaf_sent140, or module:function"),
    (["algorithm.fedprox.mu=-1"],
     "configs/default.yaml: algorithm.fedprox.mu = -1: Input should be greater than or equal to 0"),
    (["model.bogus=1"], "configs/default.yaml: model.bogus = 1: unknown key"),
])
def test_bad_values_get_one_line_naming_field_value_and_what_is_allowed(override, message):
    assert error_of(override) == message


def test_unknown_algorithm_and_model_names_list_the_allowed_ones():
    from tasks.algorithms import ALGORITHMS
    from tasks.models import MODELS

    assert error_of(["algorithm.name=fedxx"]) == (
        f"configs/default.yaml: algorithm.name = 'fedxx': unknown algorithm; allowed: {', '.join(ALGORITHMS.names())}, "
        "or module:attribute")
    assert error_of(["model.name=zz"]) == (
        f"configs/default.yaml: model.name = 'zz': unknown model; allowed: {', '.join(MODELS.names())}, "
        "or module:attribute")


def test_yaml_syntax_error_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  rounds: [1,\n")
    assert error_of([], str(bad)).startswith(f"{bad}: YAML syntax error at line 3, column 1")
    assert error_of([], str(tmp_path / "none.yaml")) == f"{tmp_path / 'none.yaml'}: config file not found"


def test_file_that_is_not_utf8_or_carries_a_python_tag_is_one_line(tmp_path):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert error_of([], str(latin)) == f"{latin}: not UTF-8 text (byte 0xe9 at offset 9)"
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text('seed: !!python/object/apply:os.system ["touch pwned"]\n')
    assert error_of([], str(tagged)).startswith(f"{tagged}: refused YAML tag at line 1, column 7")
    assert not (tmp_path / "pwned").exists()


def test_cli_prints_one_line_and_exits_2_without_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "config", "show", DEFAULT, "--set",
                          "data.partition.alpha=-1"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: configs/default.yaml: data.partition.alpha = -1: Input should be greater than 0"]
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------ property-based: malformed configs
SECTIONS = ["data", "model", "algorithm", "train", "eval", "resources", "tracking", "checkpoint"]
junk = st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=5), st.booleans(), st.none(),
                 st.lists(st.integers(), max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=st.sampled_from(SECTIONS), key=st.text(min_size=1, max_size=8), value=junk)
def test_any_malformed_config_is_a_config_error_or_valid(section, key, value):
    raw = yaml.safe_load(open(DEFAULT))
    raw.setdefault(section, {})[key] = value
    try:
        cfg = build_config(raw, "x.yaml")
    except ConfigError as e:
        text = str(e)
        assert text.startswith("x.yaml: ") and "\n" not in text
    else:  # accepted only as a known field of the section (or an algorithm's block, a model's option)
        assert key in cfg.to_dict()[section]


@settings(max_examples=100, deadline=None)
@given(field=st.sampled_from(["train.rounds", "train.batch_size", "data.num_clients", "data.partition.alpha",
                              "train.fraction", "eval.every", "resources.cpus_per_actor"]),
       value=st.one_of(st.integers(-100, -1), st.text(alphabet="xyz", min_size=1, max_size=3)))
def test_out_of_range_or_mistyped_numbers_name_their_field(field, value):
    message = error_of([f"{field}={value}"])
    assert message.startswith(f"configs/default.yaml: {field} = ") and "\n" not in message


@pytest.mark.parametrize("text", ["[" * 10_000 + "]" * 10_000, "seed: " + "{a: " * 10_000 + "1" + "}" * 10_000])
def test_yaml_nested_past_the_limit_is_one_line(tmp_path, capsys, text):
    from orchestrator.cli import main

    deep = tmp_path / "deep.yaml"
    deep.write_text(text)
    assert main(["config", "show", str(deep)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"error: {deep}: YAML refused: nested more than 100 levels deep at line 1, column \d+ "
                        r"\(at most 100 levels are read\)", line)
    with pytest.raises(ConfigError) as refused:
        load_config(DEFAULT, [f"seed={'[' * 10_000}"])
    assert str(refused.value) == ("--set seed=...: value refused: nested more than 100 levels deep at line 1, "
                                  "column 101 (at most 100 levels are read)")


def test_an_alias_bomb_is_one_line_without_expanding_it(tmp_path):
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text("\n".join(lines) + "\n")  # 9⁹ strings once expanded
    assert error_of([], str(bomb)) == (f"{bomb}: YAML refused: its aliases expand to more than 100,000 values (at "
                                       "most 100,000 are read: an alias bomb?)")


def test_anchors_and_aliases_within_the_limits_are_read(tmp_path):
    shared = tmp_path / "shared.yaml"
    shared.write_text("data: &d {num_clients: 3}\nx: *d\ny: " + "[" * 98 + "]" * 98 + "\n")
    assert read_yaml(shared)["x"] == {"num_clients": 3}
