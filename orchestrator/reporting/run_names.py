"""How runs are named in MLflow: by what sets them apart (the config's name, the method or variant, the seed, the
keys a command or a variant overrides), cut short enough to read in MLflow's list of runs."""
from __future__ import annotations

from typing import Any

NAME_LIMIT = 100  # characters of a run's name; the run's params keep every key in full
# overrides that change where a run is kept or how it is spread over processes, not what it computes, and those the
# name says already (the config's name, the seed, the method the label names): left out of names
UNNAMED_KEYS = ("name", "seed", "algorithm.name", "tracking", "checkpoint", "resources", "data.partitions_dir",
                "data.root")


def overrides_text(overrides: dict[str, Any]) -> str:
    """`KEY=VALUE ...` of the overrides that change what a run computes, each key by its last part (train.rounds →
    rounds)."""
    named = {key: value for key, value in overrides.items()
             if not any(key == k or key.startswith(k + ".") for k in UNNAMED_KEYS)}
    return " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in named.items())


def shortened(name: str, limit: int = NAME_LIMIT) -> str:
    return name if len(name) <= limit else name[:limit - 1] + "…"


def run_name(config: str, label: str, seed: int, overrides: dict[str, Any] | None = None) -> str:
    """One run: CONFIG-LABEL-sSEED and what it overrides (`default-fedprox-s0 mu=0.1 rounds=5`)."""
    text = overrides_text(overrides or {})
    return shortened(f"{config}-{label}-s{seed}" + (f" {text}" if text else ""))


def comparison_name(config: str, labels: list[str], overrides: dict[str, Any] | None = None) -> str:
    """A comparison's parent run: compare-CONFIG, its variants and what the command overrides
    (`compare-default fedavg,fedprox rounds=5`)."""
    text = overrides_text(overrides or {})
    return shortened(f"compare-{config} {','.join(labels)}" + (f" {text}" if text else ""))
