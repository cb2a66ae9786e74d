"""What a client host keeps of its clients between calls: their data shards (built on demand, the least recently
used dropped past a limit), the payload on the host's device, and the hosted clients' persistent states."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from orchestrator.clients.client_store import ClientStateStore
from tasks.algorithms.base import to_device
from tasks.algorithms.client_side import ClientAlgorithm
from tasks.algorithms.faults import BadHookResult, method_hook
from tasks.data.federated import FederatedData


class UndeclaredClientState(TypeError):
    """A method returned per-client state without declaring that it keeps any."""


class ClientCache:
    """The data and state of a host's clients, on the host's device.

    A hosted client's shard is built when it is first needed, and at most `shards_kept` shards (and as many
    guests' ones) stay built, least recently used out: an actor of 50,000 clients would otherwise hold a copy of
    all their data beside the one in the object store. Building a shard again gives the same tensors, so this
    changes no result. A guest (a client hosted elsewhere, of a method whose clients keep no state, sent here to
    balance a round) has its data built on demand and nothing of it stays."""

    def __init__(self, algorithm: ClientAlgorithm, data: FederatedData, client_ids: list[int], device: torch.device,
                 shards_kept: int | None, states: ClientStateStore, poison=None, global_test: bool = True):
        self.algorithm, self.federated, self.device = algorithm, data, device
        # personalized methods' clients also see the global test set (eval.global_test)
        self.with_global_test = global_test and algorithm.capabilities().personalized
        self.poison = poison  # (shard) -> the shard as the threat leaves it (data poisoning), or None
        self.hosted = frozenset(client_ids)
        self.shards_kept = shards_kept  # None: every shard stays once built
        self.shards: OrderedDict[int, Any] = OrderedDict()  # hosted clients' built shards, LRU order
        self.guests: OrderedDict[int, Any] = OrderedDict()
        self.global_tests: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # the hosted clients' persistent states (orchestrator/clients/client_store.py): in memory, or spilled to disk
        self.states = states
        self._payload_received: Any = None
        self._payload_here: Any = None

    # ------------------------------------------------------------------ data
    def data(self, cid: int):
        if cid in self.hosted:
            return self._cached(self.shards, cid, self.shards_kept)
        if self.algorithm.capabilities().keeps_client_state:
            raise KeyError(f"client {cid} is not hosted here and {self.algorithm.name} keeps client state")
        # at most as much guest data as own data
        return self._cached(self.guests, cid, max(1, min(len(self.hosted), self.shards_kept or len(self.hosted))))

    def _cached(self, cache: OrderedDict, cid: int, limit: int | None):
        if cid in cache:
            cache.move_to_end(cid)
        else:
            cache[cid] = self._build_data(cid)
            if limit is not None and len(cache) > limit:
                cache.popitem(last=False)
        return cache[cid]

    def prefetch(self) -> None:
        """Every hosted client's shard built now, in one pass (`FederatedData.clients_data`), where they all fit
        in `shards_kept`: building them one at a time as rounds first meet them costs a round several times more
        (benchmarks/README.md, "Tiny clients")."""
        cids = sorted(self.hosted)
        if self.shards_kept is not None and len(cids) > self.shards_kept:
            return
        for cid, data in zip(cids, self.federated.clients_data(cids)):
            self.shards[cid] = self._on_device(data)

    def _build_data(self, cid: int):
        return self._on_device(self.federated.client_data(cid))

    def _on_device(self, data):
        """A client's shard, on this host's device; personalized methods also see the global test set (unless
        eval.global_test is off), one copy per domain shared by every client of that domain (not one per client:
        1,000 clients would hold 1,000 copies)."""
        if self.poison is not None:
            data = self.poison(data)
        data = to_device(data, self.device)
        if self.with_global_test:
            if data.domain not in self.global_tests:
                self.global_tests[data.domain] = to_device(self.federated.global_test(data.domain), self.device)
            data.global_x_test, data.global_y_test = self.global_tests[data.domain]
        return data

    def here(self, payload):
        """The payload on this host's device, moved once for all the clients it is sent to."""
        if payload is not self._payload_received:
            self._payload_received, self._payload_here = payload, to_device(payload, self.device)
        return self._payload_here

    # ------------------------------------------------------------------ state
    def state(self, cid: int, round_idx: int):
        """The client's state as round `round_idx` begins (an evaluation's round index is the rounds done)."""
        state = self.states.get(cid, upto=round_idx) if cid in self.hosted else None
        if state is None:
            with method_hook(self.algorithm, round_idx, [cid]):
                state = self.algorithm.init_client(self.data(cid))
            if cid in self.hosted:
                self.states.keep_fresh(cid, state)
        return state

    def keep_state(self, cid: int, state, round_idx: int, hook: str) -> None:
        """A method without client state is given back the state it started from (an empty one): nothing to write,
        so 100,000 clients of FedAvg leave no file each behind. One that returns a state all the same has it
        refused, not dropped. A state is checked as `hook` returns it, before it is written: one that could not be
        read back is the method's error now, not the resume's later."""
        if not self.algorithm.capabilities().keeps_client_state:
            if state:
                raise UndeclaredClientState(
                    f"{self.algorithm.name} returned a client state ({', '.join(map(str, state))}) but declares "
                    "keeps_client_state = False, so it would be dropped; declare keeps_client_state = True to keep it")
            return
        with method_hook(self.algorithm, round_idx, [cid]):
            check_client_state(state, hook)
        if cid in self.hosted:
            self.states.put(cid, to_device(state, "cpu"), round_idx + 1)


# what a client state may hold: it is written with torch.save and read back with weights_only=True (no pickled code)
STATE_LEAVES = (torch.Tensor, bool, int, float, str, type(None))
STATE_CONTAINERS = (dict, OrderedDict, list, tuple, torch.Size)
STATE_ALLOWED = ("a client state holds tensors, numbers, strings and None, in dicts, lists and tuples (it is saved "
                 "with torch.save and read back with weights_only=True)")


def check_client_state(state, hook: str) -> None:
    """Refuse, naming where, a state holding anything but tensors, numbers, strings and None in dicts, lists and
    tuples (a dict's keys too): torch would save it, and refuse to load it on the next round or a resume."""
    pending = [(state, "")]
    while pending:
        value, where = pending.pop()
        if isinstance(value, STATE_LEAVES):
            continue
        if type(value) not in STATE_CONTAINERS:
            raise BadHookResult(hook, f"{hook} returned a client state holding a {type(value).__module__}."
                                      f"{type(value).__qualname__} at state{where}; {STATE_ALLOWED}")
        if isinstance(value, dict):
            pending += [(key, f"{where} (a key)") for key in value]
        pending += [(item, f"{where}[{key!r}]") for key, item in (value.items() if isinstance(value, dict)
                                                                  else enumerate(value))]
