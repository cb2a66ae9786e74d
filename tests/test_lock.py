"""The environment `make install` builds is the lock: every package requirements.lock pins for this Python is
installed at its pinned version."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)\s*(?:;\s*(.+))?$")


def pins_for_this_python() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        m = PIN.match(line.strip())
        if m and (m.group(3) is None or Marker(m.group(3)).evaluate()):
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def test_every_locked_package_is_installed_at_its_pinned_version():
    pins = pins_for_this_python()
    assert {"ray", "torch", "mlflow", "optuna", "pyarrow"} <= pins.keys()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {name: (version, installed.get(name)) for name, version in pins.items() if installed.get(name) != version}
    assert not wrong, f"not the lock's versions (pinned, installed): {wrong}; run `make install`"
