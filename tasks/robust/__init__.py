"""Attacks on a federation and robust aggregation of its clients' updates: plain tensor code, no Ray
(docs/robustness.md). The server (orchestrator/server/robust_round.py) applies them to whatever a method's clients
send, so every method with a global model is attacked and defended unchanged."""
