"""Preparing a reused model: the per-process working model that every client of a process trains in turn, moved
to the round's device and loaded with the client's start state before each client.

`nn.Module.to` and `load_state_dict` walk the whole module tree on every call (hooks, prefixes, key checks,
every tensor re-assigned); on a small model that walk costs more than the copy (benchmarks/README.md, "Fixed
cost"). Here a model is moved to the CPU only when one of its tensors is elsewhere, and a state is copied
straight into the model's own tensors, found by one walk and kept, when it has the model's keys in the model's
order and their shapes. Before each use the kept tensors are checked to still be the model's (a method may
assign a new parameter); anything else, and every model with load hooks, a loader of its own or a module under
two names, takes `load_state_dict`'s path, its errors included. The copy is the same `copy_` `load_state_dict`
makes, so a loaded model is bitwise the same either way.
"""
from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch
from torch import nn

State = dict[str, torch.Tensor]


@dataclass
class Slot:
    """Where one tensor of a model lives: its module's `_parameters` or `_buffers`, under `name`."""

    owner: dict
    name: str
    tensor: torch.Tensor

    def current(self) -> bool:
        return self.owner.get(self.name) is self.tensor


@dataclass
class Layout:
    """A model's tensors as one walk found them: all of them (for its device), and its state dict's, by key."""

    slots: list[Slot]
    state_keys: list[str]
    state_tensors: list[torch.Tensor]
    loadable: bool  # every module loads as Module does (plain_loader), and none is reached twice

    def current(self) -> bool:
        return all(slot.current() for slot in self.slots)


_layouts: WeakKeyDictionary[nn.Module, Layout] = WeakKeyDictionary()

# torch's own overrides of `_load_from_state_dict` that, for a state with exactly the module's keys, only call
# Module's (they fill in or drop running statistics that older state dicts lack or carry)
PLAIN_LOADERS = {nn.Module._load_from_state_dict, nn.modules.batchnorm._NormBase._load_from_state_dict,
                 nn.modules.instancenorm._InstanceNorm._load_from_state_dict}


def prepared(model: nn.Module, state: State | None = None, device=None) -> nn.Module:
    """`model` on `device` and loaded with `state` (either left out: left as it is), as `model.to(device)` then
    `model.load_state_dict(state)` would leave it."""
    if device is not None and not on_device(model, device):
        model.to(device)
    if state is not None:
        load(model, state)
    return model


def on_device(model: nn.Module, device) -> bool:
    """Whether `device` is the CPU and every tensor of `model` is there already. Elsewhere `.to` is always
    called: a device's own steps dwarf the walk, and a tensor added to the model since its layout was walked
    would be missed."""
    if torch.device(device).type != "cpu":
        return False
    return all(slot.tensor.device.type == "cpu" for slot in layout_of(model).slots)


def load(model: nn.Module, state: State) -> None:
    """`model.load_state_dict(state)`, copying straight into the model's tensors where the state matches them
    (walked again once where it does not: the model may have gained a tensor since)."""
    layout = layout_of(model)
    if layout.loadable and not matches(layout, state):  # a tensor gained since the walk? (a hooked model: no walk helps)
        layout = _layouts[model] = walk(model)
    if not matches(layout, state):
        model.load_state_dict(state)
        return
    with torch.no_grad():
        torch._foreach_copy_(layout.state_tensors, list(state.values()))


def matches(layout: Layout, state: State) -> bool:
    """The model loads as Module does, and the state has its keys, in its order, each tensor of its shape."""
    if not layout.loadable or len(state) != len(layout.state_keys):
        return False
    return all(key == expected and isinstance(value, torch.Tensor) and value.shape == tensor.shape
               for (key, value), expected, tensor in zip(state.items(), layout.state_keys, layout.state_tensors))


def layout_of(model: nn.Module) -> Layout:
    """The kept layout of `model`, walked again when any of its tensors is no longer the model's."""
    layout = _layouts.get(model)
    if layout is None or not layout.current():
        layout = _layouts[model] = walk(model)
    return layout


def walk(model: nn.Module) -> Layout:
    """One pass over the module tree in `state_dict`'s order (a module's parameters, its persistent buffers, then
    its children's); a module reached twice (shared) makes the layout unloadable, as state_dict lists it twice."""
    slots: list[Slot] = []
    keys: list[str] = []
    tensors: list[torch.Tensor] = []
    loadable = True
    seen: set[int] = set()
    for prefix, module in model.named_modules(remove_duplicate=False):
        if id(module) in seen:
            loadable = False
        seen.add(id(module))
        loadable = loadable and plain_loader(module)
        dot = f"{prefix}." if prefix else ""
        for name, param in module._parameters.items():
            if param is not None:
                slots.append(Slot(module._parameters, name, param))
                keys.append(dot + name)
                tensors.append(param)
        for name, buffer in module._buffers.items():
            if buffer is not None:
                slots.append(Slot(module._buffers, name, buffer))
                if name not in module._non_persistent_buffers_set:
                    keys.append(dot + name)
                    tensors.append(buffer)
    return Layout(slots, keys, tensors, loadable)


def plain_loader(module: nn.Module) -> bool:
    """The module loads a state as Module does: no load hooks, no loader of its own class."""
    hooked = module._load_state_dict_pre_hooks or module._load_state_dict_post_hooks
    return not hooked and type(module)._load_from_state_dict in PLAIN_LOADERS
