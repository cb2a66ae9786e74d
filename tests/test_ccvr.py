"""CCVR (docs/methods/ccvr.md): the pooled class Gaussians and one calibration step by hand, and in a run the
calibrated model judged while training goes on from the uncalibrated one."""
from __future__ import annotations

import pytest
import torch

from orchestrator.experiment.config import CalibrationConfig, ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import run_in_process
from tasks.algorithms.ccvr import calibrate, class_gaussians, gaussian_stats
from tests.method_fixtures import tiny_method


def test_pooled_means_and_covariances_are_those_of_all_the_clients_features():
    h = torch.tensor([[1.0, 2.0], [3.0, 0.0], [2.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 1])
    identity = torch.nn.Identity()
    identity.features = lambda x: x  # a feature extractor that returns its input
    stats = [gaussian_stats(identity, h[:2], y[:2], 2), gaussian_stats(identity, h[2:], y[2:], 2)]
    counts, means, covariances = class_gaussians(stats)
    assert counts.tolist() == [3.0, 1.0]
    assert torch.allclose(means[0], torch.tensor([2.0, 4 / 3], dtype=torch.float64))
    # class 0: deviations (−1, 2/3), (1, −4/3), (0, 2/3); unbiased: Σ = dᵀd / 2
    assert torch.allclose(covariances[0], torch.tensor([[1.0, -1.0], [-1.0, 4 / 3]], dtype=torch.float64))
    assert torch.equal(covariances[1], torch.zeros(2, 2, dtype=torch.float64))  # one sample: no spread


def test_one_calibration_step_by_hand():
    """Only class 0 held, its features all μ = (1, 2) (Σ = 0, so draws are μ up to the 1e-5 jitter); a zero
    classifier has p = (½, ½): the step moves b by lr·(½, −½) and W's rows by ±lr·½·μ; the body is untouched."""
    method = tiny_method("fedavg")
    model = method.new_model()
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
    mu = torch.tensor([1.0, 2.0], dtype=torch.float64)
    stats = [{"counts": torch.tensor([4.0, 0.0], dtype=torch.float64),
              "sums": torch.stack([4 * mu, torch.zeros(2, dtype=torch.float64)]),
              "outer": torch.stack([4 * torch.outer(mu, mu), torch.zeros(2, 2, dtype=torch.float64)])}]
    lr = 0.5
    settings = CalibrationConfig(name="ccvr", samples_per_class=50, steps=1, lr=lr, batch_size=50)
    state = calibrate(model, stats, settings, torch.Generator().manual_seed(0))
    assert torch.allclose(state["classifier.bias"], torch.tensor([lr / 2, -lr / 2]), atol=1e-6)
    expected = torch.stack([lr / 2 * mu, -lr / 2 * mu]).float()
    assert torch.allclose(state["classifier.weight"], expected, atol=1e-3)
    for name, value in model.state_dict().items():
        if not name.startswith("classifier."):
            assert torch.equal(state[name], value), name


def test_a_run_judges_the_calibrated_model_and_trains_the_uncalibrated_one(tmp_path):
    base = ["data.num_clients=4", "train.rounds=2", f"data.partitions_dir={tmp_path}"]
    cfg = load_config("configs/default.yaml", base)
    data = prepare_data(cfg)
    plain = run_in_process(cfg, data)
    calibrated = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.calibration.name=ccvr"]), data)
    assert [m["accuracy_uncalibrated"] for m in calibrated] == [m["accuracy"] for m in plain]
    assert [m["train_loss"] for m in calibrated] == [m["train_loss"] for m in plain]
    assert any(m["accuracy"] != p["accuracy"] for m, p in zip(calibrated, plain))
    assert calibrated[-1]["bytes_calibration"] > 0
    again = run_in_process(load_config("configs/default.yaml", [*base, "algorithm.calibration.name=ccvr"]), data)
    assert again == calibrated


def test_calibration_needs_a_global_model():
    with pytest.raises(ConfigError, match="algorithm.calibration.*local has no global model"):
        load_config("configs/default.yaml", ["algorithm.name=local", "algorithm.calibration.name=ccvr"])


def test_calibration_of_creff_is_refused_in_one_line(capsys):
    """CReFF evaluates its body under the classifier it re-trains on the server (state["head"]), so a calibrated
    "model" would leave its accuracy equal to accuracy_uncalibrated: refused at config check (exit 2)."""
    from orchestrator.cli import main

    with pytest.raises(ConfigError, match="algorithm.calibration = 'ccvr': creff evaluates a global model of its own"):
        load_config("configs/default.yaml", ["algorithm.name=creff", "algorithm.calibration.name=ccvr"])
    load_config("configs/default.yaml", ["algorithm.name=creff"])  # without calibration it runs
    assert main(["config", "check", "configs/default.yaml", "--set", "algorithm.name=creff",
                 "--set", "algorithm.calibration.name=ccvr"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "CCVR would change nothing" in line
