"""A checkpoint's history as JSON lines (orchestrator/io/history_codec.py): each round encoded once, read back as it
was; a history JSON would change is kept as a list; text that is not JSON lines is refused."""
from __future__ import annotations

import math

import pytest
import torch

from orchestrator.io import storage
from orchestrator.io.history_codec import HistoryText, decoded, exact_in_json


def test_a_growing_history_is_encoded_a_round_at_a_time_and_read_back_as_it_was():
    history = [{"round": 1, "accuracy": 0.1 + 0.2, "clients": 3, "train_loss": None, "ok": True,
                "per_domain": {"a": [1.5, -0.0]}}]
    text = HistoryText()
    first = text.of(history)
    assert first == '{"round": 1, "accuracy": 0.30000000000000004, "clients": 3, "train_loss": null, "ok": true, ' \
                    '"per_domain": {"a": [1.5, -0.0]}}'
    history.append({"round": 2, "accuracy": float("nan"), "bytes_total": 2**62})
    held = text.of(history)
    assert held.startswith(first + "\n") and len(text.lines) == 2
    back = decoded(held)
    assert back[0] == history[0] and back[1]["bytes_total"] == 2**62 and math.isnan(back[1]["accuracy"])
    assert type(back[0]["clients"]) is int and math.copysign(1, back[0]["per_domain"]["a"][1]) == -1
    # as a checkpoint stores it: one string through torch.save, loaded with weights_only
    assert decoded(storage.torch_load_safe(storage.torch_bytes({"history": held}))["history"])[0] == history[0]


@pytest.mark.parametrize("metrics", [{"round": 1, "pair": (1, 2)}, {"round": 1, "by_client": {3: 0.5}},
                                     {"round": 1, "x": torch.tensor(1.0)}])
def test_a_history_json_would_change_is_kept_as_a_list(metrics):
    assert not exact_in_json(metrics)
    history = [{"round": 0}, metrics]
    held = HistoryText().of(history)
    assert held == history and held is not history and decoded(held) == history


@pytest.mark.parametrize("held, problem", [("{\"round\": 1}\nnot json", "Expecting value"),
                                           ("[1, 2]", "not a JSON object"), (7, "not int")])
def test_a_history_that_is_not_json_lines_is_refused(held, problem):
    with pytest.raises(ValueError, match=problem):
        decoded(held)
