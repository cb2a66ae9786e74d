"""The issue-38 baselines' server and client states survive a checkpoint: a run stopped after two rounds, its server
snapshot and client states written and read back as checkpoints hold them, continues to the uninterrupted history."""
from __future__ import annotations

import pytest

from orchestrator.clients.client_host import ClientHost
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from orchestrator.io.storage import torch_bytes, torch_load_safe
from orchestrator.server.federation import Server, in_process_calls

VARIANTS = {
    "scaffold": ["algorithm.name=scaffold"],  # client c_i, server c
    "feddyn": ["algorithm.name=feddyn"],  # client gradient state, server h
    "fedbn": ["algorithm.name=fedbn", "model={name: digits_cnn_bn, channels: [4]}"],  # client BatchNorm
    "fedproc": ["algorithm.name=fedproc"],  # server prototypes
    "fedavgm": ["algorithm.name=fedavgm"],  # server velocity
    "fedavg+yogi": ["algorithm.server_optimizer.name=yogi"],  # the server optimiser's moments
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_resumed_run_continues_to_the_uninterrupted_history(tmp_path, variant):
    cfg = load_config("configs/default.yaml", [f"data.partitions_dir={tmp_path}", "data.num_clients=6",
                                               "train.fraction=0.5", "train.local_epochs=1", "train.rounds=4",
                                               *VARIANTS[variant]])
    data = prepare_data(cfg)
    ids = list(range(data.num_clients))

    def rounds(host, server, n):
        for _ in range(n):
            server.run_round(in_process_calls(host))

    straight = Server(cfg, data)
    rounds(ClientHost(cfg, data, ids), straight, 4)
    host, server = ClientHost(cfg, data, ids), Server(cfg, data)
    rounds(host, server, 2)
    snapshot = torch_load_safe(torch_bytes(server.snapshot()))
    states = torch_load_safe(torch_bytes(host.client_states()))
    resumed = Server(cfg, data)
    resumed.restore(snapshot)
    rounds(ClientHost(cfg, data, ids, client_states=states), resumed, 2)
    assert resumed.history == straight.history
