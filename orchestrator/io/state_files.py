"""Where a run's client states live in its run directory: one immutable file per client and round,
`client_states/c<client>.r<round>.pt` (written by orchestrator/clients/client_store.py, named by checkpoints)."""
from __future__ import annotations

import re

from orchestrator.io import storage

VERSION_FILE = re.compile(r"c(\d+)\.r(\d+)\.pt")


def states_dir(run_dir: str) -> str:
    return storage.join(run_dir, "client_states")


def version_name(cid: int, rounds: int) -> str:
    return f"c{cid}.r{rounds:06d}.pt"
