"""Device handling that runs on the CPU too: moving nested client structures between devices, and the global
evaluation a GPU actor does in place of the coordinator (tests/test_gpu.py runs the same on a GPU)."""
from __future__ import annotations

import pytest
import torch

from orchestrator.clients.client_host import ClientHost
from orchestrator.clients.global_evaluation import accuracies_on_test_sets
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.server.federation import Server
from tasks.algorithms.base import ClientData, ClientUpdate, to_device


def test_to_device_moves_every_tensor_and_keeps_the_rest():
    update = ClientUpdate(3, 7, tensors={"w": torch.ones(2, 2)}, stats={"rows": [torch.zeros(3), (torch.ones(1), 5)]},
                          metrics={"train_loss": 0.5})
    moved = to_device(update, "meta")  # the meta device stands in for a GPU here: a real move, no data
    assert isinstance(moved, ClientUpdate) and (moved.client_id, moved.num_samples) == (3, 7)
    assert moved.tensors["w"].device.type == "meta" and moved.tensors["w"].shape == (2, 2)
    rows = moved.stats["rows"]
    assert isinstance(rows, list) and isinstance(rows[1], tuple) and rows[1][1] == 5
    assert {rows[0].device.type, rows[1][0].device.type} == {"meta"}
    assert moved.metrics == {"train_loss": 0.5}
    assert update.tensors["w"].device.type == "cpu"  # the original is untouched


def test_to_device_shares_tensors_already_there_and_moves_client_data():
    x = torch.randn(4, 1, 8, 8)
    data = ClientData(0, x, torch.arange(4), x[:2], torch.arange(2), num_classes=4)
    same = to_device(data, "cpu")
    assert same.x is x  # no copy where nothing moves
    moved = to_device(data, "meta")
    assert {moved.x.device.type, moved.y.device.type, moved.x_test.device.type} == {"meta"}
    assert moved.global_x_test is None and moved.num_classes == 4


@pytest.mark.parametrize("method", ["fedavg", "fednh"])
def test_a_client_host_evaluates_the_global_model_as_the_server_does(tmp_path, method):
    cfg = load_config("configs/default.yaml", [f"algorithm.name={method}", f"data.partitions_dir={tmp_path}"])
    data = prepare_data(cfg)
    server = Server(cfg, data)
    host = ClientHost(cfg, data, [0, 1])
    state = server.state
    here = accuracies_on_test_sets(server.algorithm, state, server.test_sets, cfg.eval.batch_size)
    assert here is not None and set(here) == set(data.test_sets())
    assert host.evaluate_global(state, cfg.eval.batch_size) == here


def test_no_global_model_means_no_global_accuracies(tmp_path):
    cfg = load_config("configs/default.yaml", ["algorithm.name=local", f"data.partitions_dir={tmp_path}"])
    host = ClientHost(cfg, prepare_data(cfg), [0])
    assert host.evaluate_global({}, 64) is None
