"""What the runtime takes back from a method's hook, checked where it is taken: `BadHookResult` says what was
returned and what is allowed. The loss check sits below the algorithm interface (tasks/algorithms/base.py and both
engines call it), and tasks/algorithms/faults.py, which reads the interface's hooks, sits above it."""
from __future__ import annotations

import torch


class BadHookResult(TypeError):
    """What a hook returned is not what the runtime takes (a loss that is not a scalar tensor, a client state
    holding an object torch cannot load safely); the message says what was returned and what is allowed."""

    def __init__(self, hook: str, message: str):
        super().__init__(message)
        self.hook = hook

    def __reduce__(self):
        return BadHookResult, (self.hook, str(self))


def checked_loss(loss):
    """The loss `local_loss` returned, refused unless a scalar tensor: a float carries no gradient, and a vector
    (a loss per sample) is no one loss to step on (both engines check it as they get it)."""
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    what = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else f"a {type(loss).__name__}"
    raise BadHookResult("local_loss", f"local_loss returned {what}; it must return the batch's loss as a 0-dim "
                                      "tensor computed from params and the model's outputs (so it has a gradient)")
