"""Differential privacy for what clients share (docs/privacy.md): clipping and Gaussian noise of model updates
(DP-FedAvg, fixed or adaptive clipping), of per-class feature statistics (the anchor and prototype methods), and
the accountant that turns them into ε for a δ.

- settings.py: the plain values a run's `privacy` block gives (no torch, no config classes);
- mechanisms.py: clipping, noise, the adaptive clipping norm, the release of class statistics;
- model_updates.py: where a round applies them to model updates (client side, then server side);
- class_stats.py: the release of a client's class statistics, which the anchor and prototype methods call;
- server.py: the server's part in a round (payload, noised model, ε metrics) and the ε a run reached;
- accountant.py: ε after each round, from autodp;
- coverage.py: which methods share what, and which the mechanisms cover.
"""
