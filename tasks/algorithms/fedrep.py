"""FedRep (Collins et al., ICML 2021): a shared representation (body) and a head each client keeps, trained in
alternation (docs/methods/fedrep.md).

Each round a client first trains its head for `head_epochs` passes with the received body held, then the body for
`train.local_epochs` passes with that new head held (Algorithm 1: τ_h head updates, then τ body updates); it keeps
the head and sends the body, which the server averages by sample count. The two phases are a LocalObjective's
`phases`, so both engines train them. GM = the global body under the initial head (docs/methods/fednh.md §5.1).
"""
from __future__ import annotations

from tasks.algorithms.base import LocalObjective, Phase, searchable
from tasks.algorithms.fedper import PersonalHeadMethod
from tasks.algorithms.personal import HEAD, PersonalEvalParams
from tasks.algorithms.registry import register


class FedRepParams(PersonalEvalParams):
    head_epochs: int = searchable(10, 1, 15, integer=True, ge=1,
                                  description="τ_h: passes over the data training the head, body held (paper and "
                                  "FedNH's code: 10)")


@register
class FedRep(PersonalHeadMethod):
    name = "fedrep"
    shares = "the body (the head stays on the client)"
    Params = FedRepParams

    def local_objective(self, payload, data, client_state, ctx):
        objective = super().local_objective(payload, data, client_state, ctx)
        head = Phase("head", trains=(HEAD,), local_epochs=self.params.head_epochs)
        body = Phase("body", holds=(HEAD,))
        return LocalObjective(start=objective.start, phases=(head, body))
