"""FedAvg (McMahan et al.): local SGD on cross-entropy, sample-weighted model averaging.

Every hook is the base class's; this module only names it.
"""
from tasks.algorithms.base import Algorithm
from tasks.algorithms.registry import register


@register
class FedAvg(Algorithm):
    name = "fedavg"
    keeps_client_state = False
