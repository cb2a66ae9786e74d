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


@pytest.mark.parametrize("override, message", [
    (["train.roundz=5"], "configs/default.yaml: unknown key 'train.roundz' (value 5); did you mean 'train.rounds'?"),
    (["train.optimizer.lrr=0.1"],
     "configs/default.yaml: unknown key 'train.optimizer.lrr' (value 0.1); did you mean 'train.optimizer.lr'?"),
    (["tarin.rounds=1"], "configs/default.yaml: unknown key 'tarin' (value {'rounds': 1}); did you mean 'train'?"),
    (["algorithm.fedprox.muu=1"],
     "configs/default.yaml: algorithm.fedprox.muu = 1: unknown key; did you mean 'algorithm.fedprox.mu'?"),
])
def test_a_misspelt_key_is_answered_with_the_nearest_valid_one(override, message):
    assert error_of(override) == message


def test_a_misspelt_key_of_a_sweep_file_names_the_nearest_one(tmp_path):
    from pipelines.sweep_config import read_sweep_config

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": DEFAULT, "n_trails": 3,
                                    "params": {"train.optimizer.lr": {"type": "float", "low": 0.01, "high": 0.1}}}))
    with pytest.raises(ConfigError) as e:
        read_sweep_config(path)
    assert str(e.value) == f"{path}: unknown key 'n_trails' (value 3); did you mean 'n_trials'?"


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


# ------------------------------------------------- read strictly: each key once, each value of its own type
@pytest.mark.parametrize("text, key, first, second", [
    ("train:\n  rounds: 3\ntrain:\n  batch_size: 8\n", "train", "line 1, column 1", "line 3, column 1"),
    ("train: {rounds: 3, rounds: 4}\n", "rounds", "line 1, column 9", "line 1, column 20"),
    ("algorithm:\n  name: fedprox\n  fedprox:\n    mu: 0.1\n    mu: 0.2\n", "mu", "line 4, column 5",
     "line 5, column 5"),
    ("seed: 1\n'seed': 2\n", "seed", "line 1, column 1", "line 2, column 1"),  # quoting makes no other key
])
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path, capsys, text, key, first, second):
    from orchestrator.cli import main

    path = tmp_path / "twice.yaml"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"error: {path}: YAML refused: key '{key}' given twice, at {first} and at {second}; give each key once"


def test_a_key_given_twice_in_a_set_value_is_refused_and_a_merge_may_still_override(tmp_path):
    with pytest.raises(ConfigError) as refused:
        load_config(DEFAULT, ["train={rounds: 3, rounds: 4}"])
    assert str(refused.value) == ("--set train=...: value refused: key 'rounds' given twice, at line 1, column 2 "
                                  "and at line 1, column 13; give each key once")
    merged = tmp_path / "merged.yaml"
    merged.write_text("train:\n  <<: {rounds: 3, batch_size: 8}\n  rounds: 5\n")
    cfg = load_config(merged)
    assert (cfg.train.rounds, cfg.train.batch_size) == (5, 8)


@pytest.mark.parametrize("override, message", [
    ("train.rounds=true", "train.rounds = True: expected an integer, not a boolean (true/false)"),
    ("seed=false", "seed = False: expected an integer, not a boolean (true/false)"),
    ("train.clients_per_round=true", "train.clients_per_round = True: expected an integer, not a boolean "
                                     "(true/false)"),
    ("train.group_steps=true", "train.group_steps = True: expected an integer, not a boolean (true/false)"),
    ("train.optimizer.lr=true", "train.optimizer.lr = True: expected a number, not a boolean (true/false)"),
    ("algorithm.fedprox.mu=true", "algorithm.fedprox.mu = True: expected a number, not a boolean (true/false)"),
    ("model.hidden=[32, true]", "model.hidden.1 = True: expected an integer, not a boolean (true/false)"),
    ("model.feature_dim=yes", "model.feature_dim = True: expected an integer, not a boolean (true/false)"),
    ("participation.system.slow_classes=[1, false]",
     "participation.system.slow_classes.1 = False: expected an integer, not a boolean (true/false)"),
    ("train.drop_last=1", "train.drop_last = 1: expected true or false"),
    ("data.partition.cap=0.0", "data.partition.cap = 0.0: expected true or false"),
    ("tracking.enabled='yes'", "tracking.enabled = 'yes': expected true or false"),
    ("train.rounds=9223372036854775808", "train.rounds = 9223372036854775808: out of range: at most "
                                         "9223372036854775807"),
    ("model.hidden=[100000000000000000000]", "model.hidden.0 = 100000000000000000000: out of range: at most "
                                             "9223372036854775807"),
])
def test_a_boolean_is_no_number_a_number_no_boolean_and_integers_fit_64_bits(override, message):
    assert error_of([override]) == f"configs/default.yaml: {message}"


def test_numbers_and_booleans_of_their_own_type_are_read_as_before():
    cfg = load_config(DEFAULT, ["train.optimizer.lr=1e-3", "train.rounds=5.0", "train.drop_last=true",
                                "data.partition.alpha=1", "train.group_steps=auto", "model.hidden=[16, 8]"])
    assert (cfg.train.optimizer.lr, cfg.train.rounds, cfg.train.drop_last, cfg.data.partition.alpha) == (
        0.001, 5, True, 1.0)
    assert cfg.model.options["hidden"] == [16, 8]


def test_an_integer_too_long_to_print_is_one_line_from_a_file_a_set_and_the_api(tmp_path, capsys):
    import mooring
    from mooring.errors import MooringError
    from orchestrator.cli import main

    big = tmp_path / "big.yaml"
    big.write_text(f"seed: {'1' * 5000}\n")
    assert main(["config", "show", str(big)]) == 2
    assert main(["config", "check", DEFAULT, f"--set=train.rounds={'9' * 5000}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {big}: YAML refused: an integer of 5000 digits at line 1, column 7 (at most 100 digits are read)",
        "error: --set train.rounds=...: value refused: an integer of 5000 digits at line 1, column 1 (at most 100 "
        "digits are read)"]
    with pytest.raises(MooringError) as refused:
        mooring.config(DEFAULT, train={"rounds": 10**5000})
    assert str(refused.value) == ("configs/default.yaml: train.rounds = <an integer of about 5000 digits>: out of "
                                  "range: at most 9223372036854775807")
    with pytest.raises(MooringError) as refused:
        mooring.config(DEFAULT, seed=10**5000)
    assert str(refused.value) == ("configs/default.yaml: seed = <an integer of about 5000 digits>: Input should be "
                                  "less than or equal to 4294967295")
    with pytest.raises(MooringError, match=r"^configs/default.yaml: train.rounds = True: expected an integer"):
        mooring.config(DEFAULT, train={"rounds": True})


@pytest.mark.parametrize("model, option, value", [
    ("mlp", "feature_dim", "0"), ("mlp", "hidden", "[0]"), ("mlp", "hidden", "[64, -1]"),
    ("digits_cnn", "channels", "[0, 8]"), ("digits_cnn_bn", "feature_dim", "-1"), ("acar_cnn", "hidden", "0"),
    ("acar_cnn", "channels", "0"), ("acar_cnn", "feature_dim", "-5"), ("mixed_digits_cnn", "feature_dim", "0"),
    ("groupnorm_cnn", "groups", "0"), ("groupnorm_cnn", "channels", "[8, 0]"), ("resnet18_gn", "width", "0"),
    ("resnet18_gn", "groups", "0"), ("resnet18_gn", "feature_dim", "0"), ("fedsa_digits_1", "feature_dim", "0"),
    ("htfe_cnn", "feature_dim", "-1"),
])
def test_a_layer_of_no_width_is_refused_by_config_check(capsys, model, option, value):
    from orchestrator.cli import main

    assert main(["config", "check", DEFAULT, f"--set=model={{name: {model}, {option}: {value}}}"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"error: {DEFAULT}: model\.{option}(\.\d)? = -?\d+: Input should be greater than or equal "
                        r"to 1", line), line


def test_a_width_refused_before_the_model_is_built():
    from tasks.algorithms.dann import DANNParams
    from tasks.models import build_model

    with pytest.raises(ValueError, match="feature_dim"):
        build_model("mlp", (64,), 10, {"feature_dim": 0}, init="he_normal")  # was a ZeroDivisionError
    with pytest.raises(ValueError, match="width"):
        DANNParams(width=0)
