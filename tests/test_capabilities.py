"""Capabilities: what the runtime may do with a method, from its declarations and the hooks it defines, in one
place (tasks/algorithms/capabilities.py). A method that defines only its loss gets every default; each hook it
defines switches on exactly the capability it implies; and the built-in methods keep the treatment they had."""
from __future__ import annotations

import pytest

from tasks.algorithms import ALGORITHMS, Algorithm
from tasks.algorithms.base import HyperParams, LocalObjective, cross_entropy
from tasks.algorithms.capabilities import Capabilities


class MinimalParams(HyperParams):
    mu: float = 0.1


class Minimal(Algorithm):
    """FedProx-sized: its Params and its loss, nothing declared."""

    name = "minimal"
    Params = MinimalParams

    def local_objective(self, payload, data, client_state, ctx):
        return LocalObjective(start=payload["model"], inputs={"anchor": payload["model"]})

    def local_loss(self, params, x, y, h, logits, inputs, weight=None):
        return cross_entropy(logits, y, weight) + self.params.mu * sum((w ** 2).sum() for w in params.values())


def test_a_method_that_states_only_its_loss_gets_every_default():
    caps = Minimal.capabilities()
    assert caps == Capabilities()
    assert caps.vectorizable and not caps.keeps_client_state and caps.global_model and caps.averages_models
    assert Minimal.capabilities() is caps  # computed once per class


def subclass(**body) -> type[Algorithm]:
    return type("Sub", (Minimal,), {"name": "sub", **body})


def noop(self, *args, **kwargs):
    return {}


@pytest.mark.parametrize("body, changed", [
    ({"init_client": noop}, {"keeps_client_state": True}),
    ({"client_result": noop}, {"keeps_client_state": True, "uploads_trained_model": False}),
    ({"client_result": noop, "keeps_client_state": False}, {"uploads_trained_model": False}),
    ({"client_metrics": noop}, {"uploads_trained_model": False}),  # a metric keeps no client state
    ({"client_update": noop}, {"keeps_client_state": True, "uploads_trained_model": False,
                               "not_vectorized": "sub trains in its own client_update, not through local_loss"}),
    ({"client_update": noop, "step_hooks": noop}, {"keeps_client_state": True, "uploads_trained_model": False,
                                                   "steps_with_hooks": True}),
    ({"payload": noop}, {"broadcasts_model": False}),
    ({"not_vectorized": "its own reason"}, {"not_vectorized": "its own reason"}),
    ({"client_evaluate": noop}, {"personalized": True}),
    ({"has_global_model": False}, {"global_model": False}),
    ({"server_setup": noop}, {"setup_exchange": True}),
    ({"server_pre_round": noop}, {"pre_round_exchange": True}),
    ({"server_pre_round": Algorithm.server_pre_round}, {}),  # the base's hook assigned back is not defined
    ({"aggregate": noop}, {"averages_models": False}),
    ({"round_metrics": noop}, {"averages_models": False}),
])
def test_each_hook_a_method_defines_switches_on_what_it_implies_and_nothing_else(body, changed):
    assert subclass(**body).capabilities() == Capabilities(**changed)


def test_a_mixin_s_hooks_count_as_the_method_s():
    class Evaluates:
        def client_evaluate(self, payload, data, client_state, ctx):
            return {}

    mixed = type("Mixed", (Evaluates, Minimal), {"name": "mixed"})
    assert mixed.capabilities().personalized and mixed.capabilities().keeps_client_state is False


# the treatment every built-in method had before capabilities were declared in one place
# the HtFLlib baselines of FedSA's tables: private models, evaluated on the clients' own splits
HTFL = {"lg_fedavg", "fedgen", "fml", "fedkd", "feddistill", "fedtgp", "fedgh"}
STATEFUL = {"fedavg_periodic", "fedavg_pm", "feddebias", "fedfm_lite", "fednh", "fedproto", "fedsa", "local",
            "local_pm", "moon"} | HTFL
PERSONALIZED = {"fedavg_pm", "fednh", "fedproto", "fedsa", "local", "local_pm"} | HTFL
NO_GLOBAL_MODEL = {"fedproto", "fedsa", "local", "local_pm"} | HTFL
# trained in their own client_update: two or three models a step (FML, FedKD), fresh generated features a step
# (FedGen), logits recorded in training (FedDistill)
SEQUENTIAL_ONLY = {"feddebias", "fml", "fedkd", "fedgen", "feddistill"}
# FedNH's Table 1 rows (docs/methods/fednh.md §9): personalized, and all but FedBABU keep a personal part
STATEFUL |= {"fedper", "fedrep", "ditto", "fedrod", "creff"}
PERSONALIZED |= {"fedper", "fedrep", "ditto", "fedrod", "creff", "fedbabu"}
AVERAGING_ALSO = {"ditto"}  # its server step is FedAvg's on the global copies it is sent
AVERAGING = {"fedavg", "fedavg_pm", "fedprox", "moon"}
# FedDebias's Table 10 rows: trained in their own client_update, averaged as FedAvg (Mixup, FedMix), with a
# discriminator beside the model (DANN), or with the server's DRO weights (GroupDRO)
SEQUENTIAL_ONLY |= {"mixup", "dann", "fedmix"}
AVERAGING_ALSO |= {"mixup", "fedmix"}
SETUP_EXCHANGE = {"feddebias", "fedgen", "fedmix"}
# the drift-correction and server-side baselines (issue 38)
STATEFUL |= {"scaffold", "feddyn", "fedbn"}
SETUP_EXCHANGE |= {"feddyn"}  # each client's sample count, for alpha_per_client (sent only with it on)
PERSONALIZED |= {"fedbn"}
NO_GLOBAL_MODEL |= {"fedbn"}
UPLOADS_TRAINED_MODEL = {"fedavg", "fedprox", "fedavgm", "groupdro"}


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_the_built_in_methods_keep_their_treatment(name):
    caps = ALGORITHMS.get(name).capabilities()
    assert caps.keeps_client_state == (name in STATEFUL)
    assert caps.personalized == (name in PERSONALIZED)
    assert caps.global_model == (name not in NO_GLOBAL_MODEL)
    assert caps.setup_exchange == (name in SETUP_EXCHANGE)
    assert caps.pre_round_exchange == (name == "fedfm")
    assert caps.vectorizable == (name not in SEQUENTIAL_ONLY)  # FedFA: its client_update is its step_hooks' sequential form
    assert caps.averages_models == (name in AVERAGING | AVERAGING_ALSO)
    assert caps.uploads_trained_model == (name in UPLOADS_TRAINED_MODEL)
