"""The fingerprint of every registered method's history on both engines: for each (method, engine), one tiny
run (digits, 4 clients, 2 rounds of 1 local epoch, a small MLP, in the driver's process without Ray, tracking
off) and the sha256 of its history's numbers and of its final global state's tensors; a method that refuses an
engine is recorded as refused, with its message. tests/test_golden_histories.py holds the code to fingerprints
an earlier version wrote, so that a refactor changing a history in any bit is caught.

    python tests/golden/make_histories.py OUT.json     # from a checkout's root, PYTHONPATH=that root

The checkout measured is the one `orchestrator` is imported from, so this file can measure another checkout:
`cd OTHER && PYTHONPATH=$PWD python /path/to/tests/golden/make_histories.py OUT.json`. It uses only what every
version since before the runtime's layering has: `load_config` and `run_experiment`.

The bits of a float computation depend on the CPU as well as on the code: MKL and PyTorch pick their kernels by the
instructions the processor has (AVX2, AVX-512), and a sum split another way rounds otherwise. So the runs take
PINNED_NUMERICS, set before PyTorch is imported: MKL's conditional numerical reproducibility in its compatible
mode, PyTorch's and oneDNN's portable kernels, one thread. Under them the same code gives the same bits on one
CPU whatever it runs beside, and on another CPU mostly: between an AMD EPYC (AVX2) and an Intel Xeon (AVX-512)
34 of the 38 methods agreed and FedFA, FedGen, FedSA and FedTGP did not (measured), so the test measures the
earlier code on its own CPU where the file's CPU rounds otherwise (tests/test_golden_histories.py)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ENGINES = ("sequential", "vectorized")
PINNED_NUMERICS = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                   "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# the tiny run, every setting that shapes its numbers pinned here rather than left to configs/default.yaml;
# each method's own settings at values that keep its two rounds short and still exercise its mechanism
SETTINGS = [
    "seed=0", "data.dataset=digits", "data.num_clients=4", "data.partition.kind=dirichlet",
    "data.partition.alpha=0.1", "data.partition.min_size=10", "model.name=mlp", "model.hidden=[32]",
    "model.feature_dim=16", "train.rounds=2", "train.fraction=1.0", "train.local_epochs=1",
    "train.batch_size=32", "train.optimizer.name=sgd", "train.optimizer.lr=0.05",
    "train.optimizer.momentum=0.9", "train.optimizer.weight_decay=0.001", "eval.every=1",
    "tracking.enabled=false", "checkpoint.every=0", "resources.clients_on=coordinator",
    "algorithm.fedfm.warmup_rounds=1", "algorithm.fedfm_lite.warmup_rounds=1",
    "algorithm.fedfm_lite.period=2", "algorithm.fedavg_periodic.period=2", "algorithm.fedrep.head_epochs=1",
    "algorithm.creff.match_steps=3", "algorithm.creff.retrain_epochs=2",
]


def canonical(value: Any) -> Any:
    """`value` with every float as its exact hex form, so that JSON carries all of its bits."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def history_digest(history: list[dict[str, Any]]) -> str:
    """Every metric of every round (a run's timings are kept apart from its history: RunResult)."""
    return hashlib.sha256(json.dumps(canonical(history), sort_keys=True).encode()).hexdigest()


def _feed_state(digest, value: Any, where: str) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{where}:{value.dtype}:{tuple(value.shape)}:".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _feed_state(digest, value[key], f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _feed_state(digest, item, f"{where}[{i}]")
    else:
        digest.update(f"{where}={json.dumps(canonical(value), sort_keys=True)}".encode())


def state_digest(state: Any) -> str:
    """Every tensor's dtype, shape and bytes, in key order."""
    digest = hashlib.sha256()
    _feed_state(digest, state, "state")
    return digest.hexdigest()


def fingerprint(method: str, engine: str, scratch: Path) -> dict[str, str]:
    """One tiny run's {"history": sha256, "state": sha256}, or {"refused": why} where the method refuses
    `engine`."""
    import torch

    import orchestrator
    from orchestrator.driver.run import run_experiment
    from orchestrator.experiment.config import ConfigError, load_config

    checkout = Path(orchestrator.__file__).resolve().parents[1]  # the one measured, wherever this file lives
    cfg = load_config(checkout / "configs" / "default.yaml", [
        *SETTINGS, f"algorithm.name={method}", f"train.engine={engine}",
        f"data.partitions_dir={scratch / 'partitions'}", f"checkpoint.dir={scratch / 'runs'}"])
    try:
        result = run_experiment(cfg, progress=False)
    except ConfigError as e:
        return {"refused": str(e)}
    state = torch.load(Path(result.run_dir) / "final_state.pt", map_location="cpu", weights_only=False)
    return {"history": history_digest(result.history), "state": state_digest(state)}


def fingerprints(methods: list[str] | None = None,
                 scratch: Path | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """{method: {engine: fingerprint}} for `methods` (default: every registered method); the runs' partitions
    and run directories go under `scratch` (default: a temporary directory)."""
    from tasks.algorithms import ALGORITHMS

    names = sorted(ALGORITHMS.names()) if methods is None else methods
    if scratch is not None:
        return {m: {e: fingerprint(m, e, scratch) for e in ENGINES} for m in names}
    with tempfile.TemporaryDirectory(prefix="mooring-golden-") as directory:
        return fingerprints(names, Path(directory))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/golden/make_histories.py OUT.json", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if not out.parent.is_dir():
        print(f"{out}: its directory {out.parent} does not exist", file=sys.stderr)
        return 2
    if "torch" in sys.modules:  # its kernels and threads are chosen: the pinned settings would not take
        print("make_histories.py: run it as a script (PyTorch is already imported here)", file=sys.stderr)
        return 2
    os.environ.update(PINNED_NUMERICS)
    out.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
