"""A config for the Python API: a YAML file, a mapping or an ExperimentConfig, with overrides given as a dict of
dotted keys (as `--set` gives them) or as keyword arguments (a section's keys as a mapping)."""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.experiment.config import ConfigError, ExperimentConfig, build_config, read_yaml, set_dotted

# what `config` may be: a YAML file's path, the sections as a mapping, a config already built, or None (defaults)
ConfigSource = str | os.PathLike | Mapping[str, Any] | ExperimentConfig | None
Overrides = Mapping[str, Any] | None


def dotted_overrides(overrides: Overrides, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides as {dotted key: value}: `overrides` as given (a value replaces what the key held, as
    `--set` does), then the keyword arguments, whose mapping values are merged key by key
    (`train={"rounds": 5}` is `{"train.rounds": 5}`). A key given both ways is refused."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"overrides {overrides!r}: expected a mapping of dotted keys to values, for example "
                          "{'train.rounds': 5}")
    dotted = dict(overrides or {})
    for key, value in _flattened(settings).items():
        if key in dotted:
            raise ConfigError(f"{key}: given both in the overrides and as a keyword argument; give it once")
        dotted[key] = value
    bad = next((k for k in dotted if not isinstance(k, str) or not k or any(not p for p in k.split("."))), None)
    if bad is not None:
        raise ConfigError(f"override key {bad!r}: must be a dotted path such as data.partition.alpha")
    return dotted


def _flattened(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping) and value:
            out.update(_flattened(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resolve(source: ConfigSource, overrides: Overrides = None, settings: Mapping[str, Any] | None = None
            ) -> ExperimentConfig:
    """The validated config: `source` with the overrides applied; a problem is a ConfigError line naming the
    file (or "config") and the key, as `mooring run` words it."""
    dotted = dotted_overrides(overrides, settings or {})
    raw, name = _raw(source)
    for key, value in dotted.items():
        try:
            set_dotted(raw, key, copy.deepcopy(value))
        except ConfigError as e:  # worded for --set: "--set seed.x=...: 'seed' is a value, not a section"
            raise ConfigError(str(e).removeprefix("--set ")) from None
    return build_config(raw, name)


def _raw(source: ConfigSource) -> tuple[dict[str, Any], str]:
    """(the config's sections as a fresh dict, the name its errors are reported under)."""
    if source is None:
        return {}, "config"
    if isinstance(source, ExperimentConfig):
        return source.to_dict(), "config"
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), "config"
    if isinstance(source, (str, os.PathLike)):
        return read_yaml(source), str(Path(source))
    raise ConfigError(f"config {source!r}: expected a YAML file's path, a mapping of sections, an "
                      "ExperimentConfig or None (the defaults)")
