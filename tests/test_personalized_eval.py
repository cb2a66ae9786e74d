"""Personalized evaluation on a seeded sample of clients (eval.personalized_clients): the same sample for every
method of a seed, the fairness spread over the sample, and the run records which clients it was."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import ConfigError, load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.reporting.results import run_params, summarize
from orchestrator.server.federation import Server, in_process_calls

SAMPLED = ["data.num_clients=6", "train.rounds=1", "train.local_epochs=1", "eval.personalized_clients=3"]


def config(tmp_path, *overrides: str):
    return load_config("configs/default.yaml", SAMPLED + [f"data.partitions_dir={tmp_path}", *overrides])


def test_every_method_of_a_seed_evaluates_the_same_sample(tmp_path):
    data = prepare_data(config(tmp_path))
    samples = {name: Server(config(tmp_path, f"algorithm.name={name}"), data).eval_clients
               for name in ("local", "fedproto", "fednh", "fedavg")}
    assert len(samples["local"]) == 3 and len(set(map(tuple, samples.values()))) == 1
    by_seed = {Server(config(tmp_path, f"seed={s}"), data).eval_clients == samples["local"] for s in range(4)}
    assert by_seed == {True, False}  # the sample is the seed's: another seed draws another one (here)
    assert Server(config(tmp_path, "eval.personalized_clients=null"), data).eval_clients == list(range(6))


def test_the_spread_is_over_the_clients_evaluated(tmp_path):
    cfg = config(tmp_path, "algorithm.name=local")
    data = prepare_data(cfg)
    host, server = ClientHost(cfg, data, list(range(6))), Server(cfg, data)
    metrics = server.run_round(in_process_calls(host))
    payload = server.algorithm.payload(server.state, server.round)
    own = {c: host.evaluate(payload, c, server.round)["acc"] for c in range(6)}
    accuracies = [own[c][0] / own[c][1] for c in server.eval_clients]
    assert metrics["personalized_clients"] == 3
    assert metrics["personalized_accuracy_client_std"] == pytest.approx(np.std(accuracies), abs=1e-12)
    assert metrics["personalized_accuracy_client_std"] != pytest.approx(np.std([a / n for a, n in own.values()]))
    correct, total = (sum(own[c][i] for c in server.eval_clients) for i in (0, 1))
    assert metrics["personalized_accuracy"] == pytest.approx(correct / total, abs=1e-12)


def test_the_run_records_which_clients_were_evaluated(tmp_path):
    cfg = config(tmp_path, "algorithm.name=local")
    ids = Server(cfg, prepare_data(cfg)).eval_clients
    record = ",".join(map(str, ids))
    assert run_params(cfg)["personalized_eval_clients"] == record  # an MLflow param
    result = summarize(cfg, [], wall_seconds=0.0, mlflow_run_id=None, run_dir=str(tmp_path))
    assert result.to_json()["personalized_eval_clients"] == record  # result.json
    assert run_params(config(tmp_path, "algorithm.name=local", "eval.personalized_clients=null"))[
        "personalized_eval_clients"] == "all"
    assert "personalized_eval_clients" not in run_params(config(tmp_path, "algorithm.name=fedavg"))


def test_more_clients_to_evaluate_than_there_are_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^configs/default.yaml: eval.personalized_clients = 7: more clients to evaluate than "
                                          r"data.num_clients = 6$"):
        config(tmp_path, "eval.personalized_clients=7")
