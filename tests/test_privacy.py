"""The privacy block (docs/privacy.md): clipping and noise against hand computations on tiny tensors, the
adaptive clipping step, the accountant against autodp itself, a run's per-round ε, partial sums under DP, the
one-line refusals, and bitwise sameness of every method's history when the block does nothing."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from autodp.mechanism_zoo import GaussianMechanism
from autodp.transformer_zoo import AmplificationBySampling, Composition

from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.reporting.results import summary_metrics
from orchestrator.server.federation import run_in_process
from pipelines.comparison import format_table
from pipelines.sweep_config import ObjectiveConfig
from pipelines.sweep_trial import OverBudget, check_budget
from tasks.algorithms import ALGORITHMS, ClientUpdate
from tasks.privacy.accountant import model_epsilon, stats_epsilon
from tasks.privacy.mechanisms import (
    clip_rows,
    clipped_update,
    next_clip,
    released_class_stats,
    with_gaussian_noise,
)
from tasks.privacy.model_updates import WITHIN_CLIP, ServerModelPrivacy, private_client_update
from tasks.privacy.settings import AdaptiveClipping, ModelDP, StatsDP

TINY = ["tracking.enabled=false", "checkpoint.every=0", "data.dataset=synthetic", "data.synthetic.num_samples=90",
        "data.synthetic.size=4", "data.num_clients=3", "train.clients_per_round=2", "train.rounds=2",
        "train.local_steps=1", "train.batch_size=8", "data.partition.kind=iid", "model.hidden=[8]",
        "model.feature_dim=8", "algorithm.fedproto.homogeneous_model=true", "algorithm.fedsa.homogeneous_model=true",
        "eval.personalized_clients=1",
        # CReFF's defaults (100 features a class, 100 matching steps, 300 re-training passes) are its paper's, and
        # take over half a minute here; a few of each exercise the same code
        "algorithm.creff.num_features=4", "algorithm.creff.match_steps=2", "algorithm.creff.retrain_epochs=2",
        "algorithm.creff.grad_draws=2"]


def tiny(tmp_path, *overrides: str):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", *TINY, *overrides])
    return cfg, prepare_data(cfg)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------ mechanisms
def test_an_update_is_clipped_exactly_against_the_model_it_was_sent():
    reference = {"w": torch.tensor([1.0, 1.0]), "b": torch.tensor([0.0]), "steps": torch.tensor(3)}
    update = {"w": torch.tensor([4.0, 1.0]), "b": torch.tensor([4.0]), "steps": torch.tensor(7)}  # Δ = (3, 0 | 4)
    clipped, norm = clipped_update(update, reference, clip=1.0)
    assert norm == 5.0
    assert torch.allclose(clipped["w"], torch.tensor([1.6, 1.0])) and torch.allclose(clipped["b"], torch.tensor([0.8]))
    assert clipped["steps"].item() == 7  # integer buffers go as they are
    unchanged, _ = clipped_update(update, reference, clip=5.0)
    assert all(torch.equal(unchanged[k], update[k]) for k in update)


def test_feature_rows_are_clipped_to_the_bound_and_short_rows_kept():
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    assert torch.allclose(clip_rows(rows, 1.0), torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


def test_gaussian_noise_has_the_stated_standard_deviation():
    noised = with_gaussian_noise({"w": torch.zeros(40_000, dtype=torch.float64)}, 0.5, generator())["w"]
    assert abs(float(noised.std()) - 0.5) < 0.01 and abs(float(noised.mean())) < 0.01


def test_the_server_adds_z_times_c_over_m_to_the_uniform_mean():
    dp = ModelDP(clip=0.5, noise_multiplier=2.0)
    models = [{"w": torch.full((40_000,), float(v), dtype=torch.float64)} for v in (1.0, 2.0, 3.0, 6.0)]
    mean = ServerModelPrivacy(dp, seed=0).noised(
        {"w": torch.full((40_000,), 3.0, dtype=torch.float64)}, len(models), round_idx=0)["w"]
    assert abs(float(mean.mean()) - 3.0) < 0.01  # (1 + 2 + 3 + 6) / 4, not sample-weighted
    assert abs(float(mean.std()) - 2.0 * 0.5 / 4) < 0.005


def test_a_client_clips_and_reports_whether_it_was_within_the_norm():
    payload = {"model": {"w": torch.zeros(2)}}
    update = ClientUpdate(7, 10, tensors={"w": torch.tensor([3.0, 4.0])}, metrics={"train_loss": 1.0})
    out = private_client_update(update, payload, ModelDP(clip=1.0), seed=0, round_idx=0)
    assert torch.allclose(out.tensors["w"], torch.tensor([0.6, 0.8])) and out.metrics[WITHIN_CLIP] == 0.0
    local = private_client_update(update, payload, ModelDP(clip=10.0, local_noise_multiplier=1.0), seed=0, round_idx=0)
    again = private_client_update(update, payload, ModelDP(clip=10.0, local_noise_multiplier=1.0), seed=0, round_idx=0)
    assert local.metrics[WITHIN_CLIP] == 1.0 and not torch.equal(local.tensors["w"], update.tensors["w"])
    assert torch.equal(local.tensors["w"], again.tensors["w"])  # drawn from (seed, round, client)


def test_the_adaptive_norm_moves_geometrically_toward_the_quantile():
    rule = AdaptiveClipping(target_quantile=0.5, learning_rate=0.2, count_noise_multiplier=0.0)
    assert next_clip(1.0, [1.0, 1.0, 0.0, 0.0], rule, generator()) == 1.0
    assert next_clip(2.0, [1.0, 1.0, 1.0, 1.0], rule, generator()) == pytest.approx(2.0 * math.exp(-0.2 * 0.5))
    assert next_clip(2.0, [0.0, 0.0], rule, generator()) == pytest.approx(2.0 * math.exp(0.2 * 0.5))
    # the count's noise is paid from the total: z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)
    assert ModelDP(1.0, 1.0, adaptive=AdaptiveClipping(count_noise_multiplier=1.0)).update_noise_multiplier == \
        pytest.approx((1 - 0.25) ** -0.5)


def test_class_statistics_are_released_with_noise_of_the_stated_size():
    sums, counts = torch.zeros(4, 10_000, dtype=torch.float64), torch.full((4,), 1000.0, dtype=torch.float64)
    dp = StatsDP(clip=2.0, noise_multiplier=1.5)
    noisy_sums, noisy_counts = released_class_stats(sums, counts, dp, generator())
    assert abs(float(noisy_sums.std()) - 3.0) < 0.05
    assert torch.equal(noisy_counts, noisy_counts.round()) and not torch.equal(noisy_counts, counts)
    same_sums, same_counts = released_class_stats(sums + 1, counts, StatsDP(clip=2.0), generator())
    assert torch.equal(same_sums, sums + 1) and torch.equal(same_counts, counts)


# ------------------------------------------------------------------------------------------ accountant
def autodp_epsilon(sigma: float, q: float, rounds: int, delta: float) -> float:
    mechanism = GaussianMechanism(sigma=sigma)
    mechanism.neighboring = "replace_one"
    sampled = AmplificationBySampling(PoissonSampling=False)(mechanism, q)
    return Composition()([sampled], [rounds]).get_approxDP(delta)


def test_each_rounds_logged_epsilon_is_autodps_for_the_same_sampling_noise_and_rounds(tmp_path):
    cfg, data = tiny(tmp_path, "data.num_clients=3", "train.clients_per_round=2", "privacy.models.clip=1.0",
                     "privacy.models.noise_multiplier=1.5", "privacy.delta=0.001")
    history = run_in_process(cfg, data)
    for t, metrics in enumerate(history, start=1):
        # replace-one moves the sum of updates clipped to C by up to 2C: the mechanism's multiplier is z / 2
        assert metrics["dp_epsilon"] == pytest.approx(autodp_epsilon(1.5 / 2, 2 / 3, t, 0.001), rel=1e-9)
    assert history[1]["dp_epsilon"] > history[0]["dp_epsilon"]
    assert summary_metrics(history)["dp_epsilon"] == history[-1]["dp_epsilon"]


def test_statistics_epsilon_composes_a_gaussian_of_multiplier_sigma_over_root_two():
    mechanism = GaussianMechanism(sigma=2.0 / math.sqrt(2))
    assert stats_epsilon(2.0, 5, 1e-5) == pytest.approx(Composition()([mechanism], [5]).get_approxDP(1e-5), rel=1e-9)
    assert model_epsilon(0.0, 10, 5, 3, 1e-5) == math.inf


# ------------------------------------------------------------------------------------------ runs
def test_partial_sums_under_dp_agree_with_per_client_clipping(tmp_path):
    dp = ["privacy.models.clip=0.5", "privacy.models.noise_multiplier=0.5"]
    cfg, data = tiny(tmp_path, *dp, "resources.partial_sums=false")
    summed_cfg, _ = tiny(tmp_path, *dp, "resources.partial_sums=true")
    plain, summed = run_in_process(cfg, data), run_in_process(summed_cfg, data)
    for a, b in zip(plain, summed):
        assert a["dp_epsilon"] == b["dp_epsilon"] and a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6)


def test_the_vectorized_engine_with_partial_sums_clips_each_client_before_summing(tmp_path):
    dp = ["privacy.models.clip=0.05", "privacy.models.noise_multiplier=1.0", "privacy.models.adaptive.learning_rate=0.5",
          "privacy.models.adaptive.count_noise_multiplier=1.0", "train.rounds=3"]
    cfg, data = tiny(tmp_path, *dp, "train.engine=sequential", "resources.partial_sums=false")
    stacked, _ = tiny(tmp_path, *dp, "train.engine=vectorized", "resources.partial_sums=true")
    reference, vectorized = run_in_process(cfg, data), run_in_process(stacked, data)
    assert reference[-1]["dp_clip"] != 0.05  # the norm adapted
    for a, b in zip(reference, vectorized):  # unclipped sums would move the model far more than C = 0.05
        assert a["dp_clip"] == pytest.approx(b["dp_clip"], rel=1e-9)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6)


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_a_privacy_block_that_clips_nothing_and_adds_no_noise_changes_no_bit(tmp_path, name):
    cfg, data = tiny(tmp_path, f"algorithm.name={name}")
    inert, _ = tiny(tmp_path, f"algorithm.name={name}", "privacy.delta=0.5", "privacy.models.noise_multiplier=0",
                    "privacy.stats.noise_multiplier=0", "privacy.models.local_noise_multiplier=0")
    assert run_in_process(inert, data) == run_in_process(cfg, data)


@pytest.mark.parametrize("name, engine", [("fedproto", "sequential"), ("fedsa", "vectorized"),
                                          ("fedtgp", "sequential"), ("fedgh", "vectorized"), ("feddistill", "sequential")])
def test_clipping_at_an_unreachable_bound_without_noise_changes_no_bit_of_the_prototypes(tmp_path, name, engine):
    cfg, data = tiny(tmp_path, f"algorithm.name={name}", f"train.engine={engine}")
    clipped, _ = tiny(tmp_path, f"algorithm.name={name}", f"train.engine={engine}", "privacy.stats.clip=1e12")
    assert run_in_process(clipped, data) == run_in_process(cfg, data)


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("overrides, expected", [
    (["privacy.models.clip=1", "privacy.models.noise_multiplier=-1"],
     "privacy.models.noise_multiplier = -1: Input should be greater than or equal to 0"),
    (["privacy.delta=1"], "privacy.delta = 1: Input should be less than 1"),
    (["privacy.models.noise_multiplier=1"], "privacy.models.clip = None: noise or adaptive clipping needs a clipping norm"),
    (["algorithm.name=fedproto", "privacy.models.clip=1"],
     "algorithm.name = 'fedproto': fedproto sends per-class feature statistics: set privacy.stats.clip"),
    (["algorithm.name=feddebias", "privacy.models.clip=1"],
     "feddebias sends pseudo-data built from its inputs, which no privacy mechanism covers"),
    (["algorithm.name=fedfm_lite", "privacy.models.clip=1", "privacy.stats.clip=1"],
     "fedfm_lite sends its model every few rounds, against a model it was not sent that round"),
    (["privacy.models.clip=1", "privacy.models.noise_multiplier=2", "privacy.models.adaptive.learning_rate=0.2"],
     "privacy.models.adaptive.count_noise_multiplier = 0.5: must exceed noise_multiplier / 2 = 1"),
    (["algorithm.name=fedavg", "participation.mode=buffered", "privacy.models.clip=1"],
     "the privacy accountant assumes clients_per_round sampled uniformly without replacement"),
    (["participation.deadline=2", "privacy.models.clip=1"],
     "the privacy accountant assumes clients_per_round sampled uniformly without replacement"),
    # issue 36: an OverflowError in round 1, a ZeroDivisionError, and ε silently left out
    (["privacy.models.clip=1", "privacy.models.noise_multiplier=1e160"],
     "privacy.models.noise_multiplier = '1e160': 0 (no noise) or from 0.001 to 10000"),
    (["algorithm.name=fedproto", "privacy.stats.clip=1", "privacy.stats.noise_multiplier=1e-300"],
     "privacy.stats.noise_multiplier = '1e-300': 0 (no noise) or from 0.001 to 10000"),
    (["privacy.models.clip=1", "privacy.models.noise_multiplier=1e-300"],
     "privacy.models.noise_multiplier = '1e-300': 0 (no noise) or from 0.001 to 10000"),
    (["privacy.models.clip=1", "privacy.models.local_noise_multiplier=20000"],
     "privacy.models.local_noise_multiplier = 20000: 0 (no noise) or from 0.001 to 10000"),
    (["privacy.models.clip=1", "privacy.models.noise_multiplier=1", "privacy.models.adaptive.count_noise_multiplier=1e5"],
     "privacy.models.adaptive.count_noise_multiplier = '1e5': 0 (no noise) or from 0.001 to 10000"),
])
def test_bad_privacy_settings_are_one_line(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_config("configs/default.yaml", overrides)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_the_accountant_gives_a_finite_positive_epsilon_at_both_ends_of_the_allowed_noise():
    from tasks.privacy.settings import NOISE_RANGE

    for z in NOISE_RANGE:
        for epsilon in (model_epsilon(z, 10, 5, 3, 1e-5), stats_epsilon(z, 3, 1e-5)):
            assert 0 < epsilon < math.inf


# ------------------------------------------------------------------------------------------ reporting
def test_a_sweeps_budget_prunes_a_trial_over_it_and_one_without_noise():
    objective = ObjectiveConfig(max_epsilon=8.0)
    check_budget({"round": 1, "dp_epsilon": 7.9}, objective, last_round=3)
    with pytest.raises(OverBudget, match="dp_epsilon = 8.1 exceeds max_epsilon = 8"):
        check_budget({"round": 2, "dp_epsilon": 8.1}, objective, last_round=3)
    with pytest.raises(OverBudget, match="logs no dp_epsilon"):
        check_budget({"round": 3, "accuracy": 0.9}, objective, last_round=3)
    check_budget({"round": 3}, ObjectiveConfig(), last_round=3)  # no budget, nothing checked


def test_compares_table_shows_epsilon_only_where_a_variant_has_one():
    row = {"variant": "fedavg", "seeds": 2, "global_accuracy_mean": 0.5, "global_accuracy_std": 0.1,
           "personalized_accuracy_mean": None, "personalized_accuracy_std": None, "bytes_sent": 1e6}
    plain = format_table([{**row, "dp_epsilon": None, "dp_epsilon_stats": None}])
    private = format_table([{**row, "dp_epsilon": 3.21, "dp_epsilon_stats": None}]).splitlines()
    assert "ε" not in plain
    assert "ε models" in private[0] and "ε stats" not in private[0] and private[1].endswith("3.21")


@pytest.mark.ray
def test_a_runs_epsilon_reaches_mlflow_every_round_and_result_json(ray_session, workdir):
    import json

    from mlflow.tracking import MlflowClient

    from orchestrator.driver.run import run_experiment

    cfg = load_config("configs/default.yaml", [*TINY, *workdir, "tracking.enabled=true", "resources.num_actors=1", "privacy.models.clip=1.0",
                                               "privacy.models.noise_multiplier=2.0"])
    result = run_experiment(cfg, progress=False)
    logged = MlflowClient(tracking_uri=cfg.tracking.uri).get_metric_history(result.mlflow_run_id, "dp_epsilon")
    per_round = {m.step: m.value for m in logged if m.step > 0}  # step 0: the run's summary
    assert per_round == {m["round"]: m["dp_epsilon"] for m in result.history} and len(per_round) == 2
    written = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert written["dp_epsilon"] == result.history[-1]["dp_epsilon"] and written["dp_epsilon_stats"] is None
