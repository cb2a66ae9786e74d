"""Attacks and robust aggregation (tasks/robust, orchestrator/server/robust_round.py): each aggregator and each
attack against a hand computation on tiny tensors, the server's round applying them, the refusals, and one small
`mooring compare` attacked and defended on both engines."""
from __future__ import annotations

import json
import math
import re
from typing import ClassVar

import pytest
import torch

from orchestrator.experiment.config import load_config
from tasks.algorithms import Algorithm, ClientUpdate
from tasks.robust import aggregators as agg
from tasks.robust import attacks


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def close(a: torch.Tensor, b, tol: float = 1e-9) -> bool:
    return torch.allclose(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=0)


# ------------------------------------------------------------------------------------------ aggregators
def test_mean_weighs_by_the_weights():
    assert close(agg.mean(t([[1, 2], [3, 4], [5, 0]]), t([1, 1, 2])), [14 / 4, 6 / 4])


def test_median_is_coordinate_wise_and_averages_the_middle_two_of_an_even_count():
    assert close(agg.median(t([[1, 5], [2, -1], [9, 0]])), [2, 0])
    assert close(agg.median(t([[1], [2], [3], [10]])), [2.5])


def test_trimmed_mean_cuts_floor_beta_n_from_each_end():
    assert close(agg.trimmed_mean(t([[1], [2], [3], [10]]), 0.25), [2.5])  # b = 1: (2 + 3) / 2
    assert close(agg.trimmed_mean(t([[100, 1], [1, 2], [2, 3], [3, 4], [4, -50]]), 0.2), [3, 2])  # b = 1
    assert close(agg.trimmed_mean(t([[1], [2], [9]]), 0.1), [4])  # b = ⌊0.3⌋ = 0: the mean
    assert agg.trimmed_count(2, 0.49) == 0 and agg.trimmed_count(10, 0.3) == 3


def test_krum_and_multi_krum_pick_the_updates_of_lowest_score():
    points = t([[0], [1], [2], [10]])
    # f = 0, n - f - 2 = 2 nearest: scores 1+4, 1+1, 1+4, 64+81
    assert agg.krum_select(points, f=0, m=4) == [1, 0, 2, 3]
    assert close(agg.krum(points, f=0, m=1), [1])
    assert close(agg.krum(points, f=0, m=2), [0.5])
    # f = 1: one nearest each: scores 1, 1, 1, 64; f is lowered to n - 3 where it exceeds it
    assert agg.krum_select(points, f=1, m=4) == [0, 1, 2, 3]
    assert agg.krum_fit(4, 5) == 1


def test_geometric_median_takes_smoothed_weiszfeld_steps_from_the_weighted_mean():
    deltas, weights = t([[0], [4]]), t([1, 3])
    # v0 = 3; β = (1/4)/3, (3/4)/1; v1 = (4·3/4) / (1/12 + 3/4) = 3.6
    assert close(agg.geometric_median(deltas, weights, iterations=1), [3.6])
    assert abs(float(agg.geometric_median(deltas, weights, iterations=50, tol=0)[0]) - 4) < 1e-3  # the weighted median
    # a point that meets v exactly counts at distance ν, not 0
    assert torch.isfinite(agg.geometric_median(t([[1], [1], [1]]), t([1, 1, 1]))).all()


def test_centered_clipping_clips_around_the_center():
    deltas = t([[3, 4], [0, 0.5]])
    once = agg.centered_clipping(deltas, torch.zeros(2, dtype=torch.float64), tau=1.0, iterations=1)
    assert close(once, [0.3, 0.65])  # ([0.6, 0.8] + [0, 0.5]) / 2
    d1, d2 = t([3 - 0.3, 4 - 0.65]), t([-0.3, 0.5 - 0.65])
    expected = t([0.3, 0.65]) + (d1 / math.sqrt(2.7 ** 2 + 3.35 ** 2) + d2) / 2  # d2 is within τ
    assert close(agg.centered_clipping(deltas, torch.zeros(2, dtype=torch.float64), 1.0, 2), expected)
    assert close(agg.centered_clipping(t([[1, 0]]), t([1, 0]), 1.0, 3), [1, 0])  # at the center: no move


def test_norm_bound_clips_each_update_then_takes_the_weighted_mean():
    assert close(agg.norm_bound(t([[3, 4], [0, 0.5]]), t([1, 3]), 1.0), [0.6 / 4, (0.8 + 1.5) / 4])


def test_bucketing_averages_shuffled_buckets_of_s():
    deltas, weights = t([[1], [2], [3], [4], [5]]), t([1, 1, 1, 1, 2])
    order = torch.randperm(5, generator=torch.Generator().manual_seed(7)).tolist()
    means, totals = agg.buckets(deltas, weights, 2, torch.Generator().manual_seed(7))
    expected = []
    for group in (order[0:2], order[2:4], order[4:]):
        w = [float(weights[i]) for i in group]
        expected.append(sum(float(deltas[i, 0]) * wi for i, wi in zip(group, w)) / sum(w))
    assert close(means[:, 0], expected) and close(totals, [sum(float(weights[i]) for i in g)
                                                           for g in (order[0:2], order[2:4], order[4:])])
    one, total = agg.buckets(deltas, weights, 5, torch.Generator().manual_seed(0))
    assert close(one, [[20 / 6]]) and close(total, [6])


def test_unweighted_aggregators_ignore_the_weights():
    deltas = t([[0], [1], [5]])
    assert close(agg.aggregate("median", deltas, t([100, 1, 1])), [1])
    assert close(agg.aggregate("mean", deltas, t([1, 1, 2])), [11 / 4])
    with pytest.raises(ValueError, match="unknown aggregator"):
        agg.aggregate("mode", deltas, t([1, 1, 1]))


# ------------------------------------------------------------------------------------------ attacks
def test_sign_flip_and_gaussian():
    assert close(attacks.sign_flip(t([1, -2]), 5.0), [-5, 10])
    noise = attacks.gaussian(t([0, 0, 0]), 2.0, torch.Generator().manual_seed(3))
    assert close(noise, torch.randn(3, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2)


def test_alie_z_follows_baruch_et_al_and_the_update_is_mu_minus_z_sigma():
    # n = 10, f = 2: s = ⌊6⌋ − 2 = 4, z = Φ⁻¹(6/10)
    assert abs(attacks.alie_z(10, 2) - 0.2533471031357997) < 1e-9
    assert close(attacks.alie(t([[0, 1], [2, 1]]), 3, 1, z=1.0), [1 - math.sqrt(2), 1])
    assert close(attacks.alie(t([[0], [2]]), 10, 2), [1 - 0.2533471031357997 * math.sqrt(2)])


def test_ipm_is_minus_epsilon_times_the_honest_mean():
    assert close(attacks.ipm(t([[1, 2], [3, 4]]), 0.5), [-1, -1.5])


def test_mimic_copies_the_honest_update_furthest_along_the_direction_of_most_variance_then_keeps_it():
    mimic = attacks.Mimic(warmup=1, seed=0)
    honest = t([[1, 0], [-1, 0], [0, 0.1]])
    copied = mimic(honest, [4, 5, 6])
    assert abs(float(mimic.state["z"][0])) > 0.99  # the x axis, where the honest updates spread
    first = mimic.state["target"]
    assert first in (4, 5) and close(copied, honest[[4, 5, 6].index(first)])
    later = t([[7, 7], [8, 8], [9, 9]])
    assert close(mimic(later, [4, 5, 6]), later[[4, 5, 6].index(first)])  # after the warm-up: the same client
    assert close(mimic(t([[3, 3]]), [9]), [3, 3])  # that client not sampled: the round's own choice


def test_label_flipping_and_the_backdoor_trigger():
    assert attacks.flipped_labels(torch.tensor([0, 1, 9]), 10).tolist() == [9, 8, 0]
    x = attacks.with_trigger(torch.zeros(1, 1, 4, 4), 2, 1.0)
    assert x[0, 0, 2:, 2:].eq(1).all() and float(x.sum()) == 4
    assert attacks.with_trigger(torch.zeros(2, 9), 2, 3.0)[:, -4:].eq(3).all()
    xs, ys = attacks.backdoored(torch.zeros(4, 1, 4, 4), torch.tensor([1, 2, 3, 4]), 7, 2, 1.0, 0.5,
                                torch.Generator().manual_seed(0))
    chosen = ys.eq(7)
    assert int(chosen.sum()) == 2 and xs[chosen].sum(dim=(1, 2, 3)).eq(4).all() and xs[~chosen].eq(0).all()


def test_attack_success_counts_non_target_samples_classified_as_the_target():
    assert attacks.attack_success(torch.tensor([3, 3, 1, 3]), torch.tensor([3, 0, 1, 2]), 3) == (2, 3)


def test_malicious_clients_fixed_per_seed_or_drawn_per_round():
    fixed = attacks.fixed_malicious(0, 10, 0.2)
    assert len(fixed) == 2 and fixed == attacks.fixed_malicious(0, 10, 0.2)
    assert len({attacks.fixed_malicious(s, 10, 0.2) for s in range(5)}) > 1
    picked = attacks.round_malicious(0, 3, [2, 4, 6, 8, 9], 0.4)
    assert len(picked) == 2 and picked <= {2, 4, 6, 8, 9}
    assert attacks.malicious_count(0.25, 10) == 3 and attacks.malicious_count(0.0, 10) == 0


# ------------------------------------------------------------------------------------------ the server's round
def robust_round(sets: list[str], num_clients: int = 3):
    from orchestrator.server.robust_round import RobustRound

    cfg = load_config("configs/default.yaml", [f"data.num_clients={num_clients}", *sets])
    return RobustRound(cfg, num_clients)


def updates_of(rows: list[list[float]]) -> list[ClientUpdate]:
    return [ClientUpdate(i, 10 * (i + 1), {"w": torch.tensor(r), "steps": torch.tensor(5)}, {}, {})
            for i, r in enumerate(rows)]


def test_the_round_poisons_the_malicious_updates_and_puts_the_robust_aggregate_in_every_update():
    reference = {"w": torch.tensor([1.0, 1.0]), "steps": torch.tensor(0)}
    rr = robust_round(["threat.attack=sign_flip", "threat.scale=2", "threat.fraction=0.34"])
    [bad] = rr.malicious(0, [0, 1, 2])
    updates = updates_of([[2.0, 1.0], [3.0, 1.0], [1.0, 4.0]])
    attacked, metrics = rr.apply(updates, reference, [1.0, 1.0, 1.0], 0)
    assert metrics == {"threat_clients": 1}
    for u, before in zip(attacked, updates):
        expected = reference["w"] - 2 * (before.tensors["w"] - reference["w"]) if u.client_id == bad \
            else before.tensors["w"]
        assert torch.equal(u.tensors["w"], expected) and torch.equal(u.tensors["steps"], torch.tensor(5))

    rr = robust_round(["algorithm.aggregator=median"])
    defended, metrics = rr.apply(updates, reference, [10.0, 20.0, 30.0], 0)
    assert metrics == {}
    for u in defended:  # Δ = [1, 0], [2, 0], [0, 3]: median [1, 0]
        assert torch.equal(u.tensors["w"], torch.tensor([2.0, 1.0]))
    assert torch.equal(updates[2].tensors["w"], torch.tensor([1.0, 4.0]))  # the updates given are left as they were


def test_centered_clipping_carries_its_center_across_rounds_and_checkpoints():
    reference = {"w": torch.tensor([0.0])}
    rr = robust_round(["algorithm.aggregator.name=centered_clipping", "algorithm.aggregator.tau=1",
                       "algorithm.aggregator.iterations=1"])
    rr.apply(updates_of([[5.0], [5.0], [5.0]]), reference, [1.0] * 3, 0)
    assert close(rr.snapshot()["center"], [1.0])
    second, _ = rr.apply(updates_of([[5.0], [5.0], [5.0]]), reference, [1.0] * 3, 1)
    assert torch.equal(second[0].tensors["w"], torch.tensor([2.0]))
    restored = robust_round(["algorithm.aggregator.name=centered_clipping"])
    restored.restore(rr.snapshot())
    assert close(restored.center, [2.0])


def test_data_poisoning_changes_only_the_malicious_clients_training_split():
    from tasks.robust.attacks import poisoned_data
    from tasks.types import ClientData

    cfg = load_config("configs/default.yaml", ["threat.attack=label_flip"])
    shard = ClientData(3, torch.zeros(2, 4), torch.tensor([0, 2]), torch.zeros(1, 4), torch.tensor([1]), 10)
    flipped = poisoned_data(shard, cfg.threat, 10, 0, frozenset({3}))
    assert flipped.y.tolist() == [9, 7] and flipped.y_test.tolist() == [1]
    assert poisoned_data(shard, cfg.threat, 10, 0, frozenset({2})) is shard


def test_an_attacked_and_defended_run_in_one_process_reports_the_threat_and_the_backdoor(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import Server, run_in_process

    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.num_clients=4", "train.rounds=1", "train.local_epochs=1",
                                               "threat.attack=backdoor", "threat.fraction=0.5",
                                               "algorithm.aggregator=trimmed_mean"])
    [metrics] = run_in_process(cfg, prepare_data(cfg))
    assert metrics["threat_clients"] == 2 and 0 <= metrics["attack_success_rate"] <= 1
    assert Server(cfg, prepare_data(cfg)).summed is False


class Recording(Algorithm):
    """A method from outside Mooring, with an aggregate of its own: it keeps the updates it is given."""

    name = "recording"
    seen: ClassVar[list[list[ClientUpdate]]] = []

    def aggregate(self, state, updates, round_idx):
        Recording.seen.append(updates)
        return super().aggregate(state, updates, round_idx)


def test_an_outside_method_is_attacked_unchanged(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import Server, run_in_process

    base = [f"data.partitions_dir={tmp_path}", "data.num_clients=3", "train.rounds=1", "train.local_epochs=1",
            "algorithm.name=tests.test_robust:Recording"]
    seen = {}
    for label, sets in (("honest", []), ("attacked", ["threat.attack=sign_flip", "threat.fraction=0.34"])):
        Recording.seen.clear()
        cfg = load_config("configs/default.yaml", base + sets)
        history = run_in_process(cfg, prepare_data(cfg))
        [seen[label]] = Recording.seen
    [bad] = attacks.fixed_malicious(0, 3, 0.34)
    assert history[0]["threat_clients"] == 1
    cfg = load_config("configs/default.yaml", base)
    theta = Server(cfg, prepare_data(cfg)).state["model"]  # the model round 1 starts from
    for honest, attacked in zip(seen["honest"], seen["attacked"]):
        for key, value in honest.tensors.items():
            if attacked.client_id == bad and torch.is_floating_point(value):
                # sign flip at scale 1: θ − (θ_k − θ), the malicious client's model moved against its update
                assert torch.allclose(attacked.tensors[key], 2 * theta[key] - value, atol=1e-6, rtol=0)
                assert not torch.equal(attacked.tensors[key], value) or value.equal(theta[key])
            else:
                assert torch.equal(attacked.tensors[key], value)


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("sets, line", [
    (["algorithm.aggregator=median", "algorithm.name=local"],
     "algorithm.aggregator = 'median': local has no global model whose updates it could aggregate"),
    (["threat.attack=ipm", "algorithm.name=fedproto"],
     "threat.attack = 'ipm': fedproto has no global model whose updates could be poisoned"),
    (["algorithm.aggregator=krum", "algorithm.aggregator.f=4"],
     "algorithm.aggregator.f = 4: Krum assumes 2f + 2 < n, and a round aggregates n = 10 updates"),
    (["threat.attack=label_flip", "threat.selection=per_round"],
     "threat.selection = 'per_round': label_flip poisons the malicious clients' own data"),
    (["algorithm.aggregator=geomed", "privacy.models.clip=1", "privacy.models.noise_multiplier=1"],
     "algorithm.aggregator = 'geomed': privacy.models.noise_multiplier calibrates the server's noise"),
    (["algorithm.aggregator=median", "participation.mode=buffered"],
     "algorithm.aggregator = 'median': buffered aggregation folds each update in as it arrives"),
    (["algorithm.aggregator=mode"], "algorithm.aggregator.name = 'mode': Input should be 'mean'"),
    (["algorithm.aggregator=median", "algorithm.name=qffl"],
     "algorithm.aggregator = 'median': qffl: its step weighs each client's update by its loss to the power q"),
    (["algorithm.aggregator=trimmed_mean", "algorithm.name=fednova"],
     "algorithm.aggregator = 'trimmed_mean': fednova: it averages each client's update divided by its own step"),
    (["algorithm.aggregator=krum", "algorithm.name=groupdro"],
     "algorithm.aggregator = 'krum': groupdro: it averages the clients' models with weights that grow"),
])
def test_unsound_or_impossible_settings_are_refused_in_one_line(capsys, sets, line):
    from orchestrator.cli import main

    assert main(["config", "show", "configs/default.yaml", *[a for s in sets for a in ("--set", s)]]) == 2
    out, err = capsys.readouterr()
    [only] = err.splitlines()
    assert out == "" and only.startswith(f"error: configs/default.yaml: {line}"), only


def test_local_noise_composes_with_a_robust_aggregator_and_bare_names_take_settings():
    cfg = load_config("configs/default.yaml", ["algorithm.aggregator=krum", "algorithm.aggregator.m=3",
                                               "privacy.models.clip=1", "privacy.models.local_noise_multiplier=0.1"])
    assert cfg.algorithm.aggregator.name == "krum" and cfg.algorithm.aggregator.m == 3


def test_partial_sums_are_off_and_the_run_says_so_only_where_updates_are_read():
    from orchestrator.server.robust_round import robustness_note

    plain = load_config("configs/default.yaml", ["algorithm.aggregator=mean"])
    assert not plain.reads_each_update and robustness_note(plain) == ""
    poisoned = load_config("configs/default.yaml", ["threat.attack=label_flip"])
    assert not poisoned.reads_each_update
    bucketed = load_config("configs/default.yaml", ["algorithm.aggregator.bucketing=2", "threat.attack=alie"])
    assert bucketed.reads_each_update
    assert robustness_note(bucketed) == (
        "algorithm.aggregator=mean and threat.attack=alie read each client's update, so the clients send their "
        "updates rather than partial sums (resources.partial_sums is off for this run)")


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.ray
def test_compare_attacks_and_defends_a_built_in_method_on_both_engines(ray_session, workdir, tmp_path, capsys):
    from orchestrator.cli import main

    sets = [*workdir, "data.num_clients=4", "train.rounds=2", "train.local_epochs=1", "threat.attack=sign_flip",
            "threat.scale=5", "threat.fraction=0.25", "algorithm.aggregator=median"]
    rc = main(["compare", "configs/default.yaml", *[a for s in sets for a in ("--set", s)],
               "--variant", "seq=fedavg train.engine=sequential", "--variant", "vec=fedavg train.engine=vectorized",
               "--out", str(tmp_path / "out"), "--output-json", str(tmp_path / "table.json"), "--quiet",
               "--address", ray_session.get_runtime_context().gcs_address])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert (out + err).count("note: algorithm.aggregator=median and threat.attack=sign_flip read each client's update") == 1
    table = json.loads((tmp_path / "table.json").read_text())
    assert {row["variant"] for row in table} == {"seq", "vec"}, table
    histories = json.loads((tmp_path / "out" / "histories.json").read_text())
    for variant in ("seq", "vec"):
        rounds = histories[variant]["0"]
        assert [r["threat_clients"] for r in rounds] == [1, 1] and all("accuracy" in r for r in rounds)


def test_a_backdoor_target_outside_the_classes_is_refused_before_any_run(capsys, tmp_path):
    from orchestrator.cli import main

    rc = main(["compare", "configs/default.yaml", "--algorithms", "fedavg", "--set", "threat.attack=backdoor",
               "--set", "threat.target=10", "--set", f"checkpoint.dir={tmp_path / 'runs'}",
               "--out", str(tmp_path / "out"), "--address", "127.0.0.1:1"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.splitlines() == [
        "error: variant fedavg: threat.target = 10: the data has 10 classes (0 .. 9)"], err
    assert not (tmp_path / "out").exists()  # before Ray: the address is never tried


def test_a_mean_driven_off_by_attackers_stops_with_advice_to_defend(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import NonFiniteLoss, run_in_process

    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.num_clients=4",
                                               "train.rounds=3", "train.local_epochs=1", "threat.attack=sign_flip",
                                               "threat.scale=1e30"])
    with pytest.raises(NonFiniteLoss, match=r"threat.attack=sign_flip\) may have driven the mean off: set "
                                            r"algorithm.aggregator"):
        run_in_process(cfg, prepare_data(cfg))


def test_a_backdoor_s_success_rate_is_in_the_run_s_summary_beside_its_accuracy():
    from orchestrator.reporting.results import summary_metrics

    history = [{"accuracy": 0.5, "attack_success_rate": 0.9}, {"accuracy": 0.6, "attack_success_rate": 0.8}]
    summary = summary_metrics(history)
    assert summary["final_global_accuracy"] == 0.6 and summary["attack_success_rate"] == 0.8
    assert "attack_success_rate" not in summary_metrics([{"accuracy": 0.6}])


def test_a_robust_aggregator_composes_with_local_noise_and_a_server_optimiser(tmp_path):
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.federation import run_in_process

    base = [f"data.partitions_dir={tmp_path}", "data.num_clients=4", "train.rounds=2", "train.local_epochs=1",
            "algorithm.aggregator=median", "threat.attack=ipm"]
    for sets in (["privacy.models.clip=1", "privacy.models.local_noise_multiplier=0.01"],
                 ["algorithm.server_optimizer.name=adam"]):
        cfg = load_config("configs/default.yaml", base + sets)
        history = run_in_process(cfg, prepare_data(cfg))
        assert [m["threat_clients"] for m in history] == [1, 1] and all(0 <= m["accuracy"] <= 1 for m in history)


@pytest.mark.parametrize("started, resumed, change", [
    ([], ["threat.attack=alie"], 'threat null → "alie"'),
    (["algorithm.aggregator=median"], [], 'algorithm.aggregator "median" → null'),
    (["algorithm.aggregator=krum"], ["algorithm.aggregator=krum", "algorithm.aggregator.m=2"],
     "algorithm.aggregator.m 1 → 2"),
])
def test_a_resume_may_not_add_drop_or_change_an_attack_or_an_aggregator(tmp_path, started, resumed, change):
    from orchestrator.driver import resume_config
    from orchestrator.experiment.config import ConfigError

    (tmp_path / "checkpoints").mkdir()
    resume_config.record(str(tmp_path), load_config("configs/default.yaml", started))
    with pytest.raises(ConfigError, match=re.escape(change)):
        resume_config.check_unchanged(str(tmp_path), load_config("configs/default.yaml", resumed))
    resume_config.check_unchanged(str(tmp_path), load_config("configs/default.yaml", started))
