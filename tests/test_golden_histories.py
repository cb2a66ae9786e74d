"""Every registered method's history and final global state on both engines, bitwise as the code before the
runtime's layering (commit 9edb047) makes them: a refactor must not change a history in any bit, and the
engines' own test (test_engines.py) compares them with each other only, within tolerance.

The runs take the pinned numerics of make_histories.py (one thread, the CPU's portable kernels), in a process of
their own. tests/golden/histories_before_layers.json holds that code's fingerprints as one CPU measured them;
another CPU may round a few methods otherwise even under the pinned settings (measured: FedFA, FedGen, FedSA and
FedTGP differ between an AMD EPYC with AVX2 and an Intel Xeon with AVX-512, the other 34 agree). So where today's
fingerprints differ from the file, the code at 9edb047 is measured on this machine too, and judges.

A change MEANT to alter histories regenerates the file with its own code and says so, and why, in its commit
message (README: "a change of these defaults changes histories, and says so in `git log`"), and moves
BEFORE_LAYERS to that commit:

    PYTHONPATH=$PWD python tests/golden/make_histories.py tests/golden/histories_before_layers.json
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.golden.make_histories import main

GOLDEN = Path(__file__).parent / "golden" / "histories_before_layers.json"
ROOT = Path(__file__).resolve().parents[1]


BEFORE_LAYERS = "9edb047"  # the code whose histories every later version keeps


def pinned_fingerprints(out: Path, checkout: Path = ROOT) -> dict:
    """Every method `checkout` registers, its fingerprints as `python tests/golden/make_histories.py OUT.json`
    writes them there."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "golden" / "make_histories.py"), str(out)],
                          cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def measured_before_layers(scratch: Path) -> dict | None:
    """The fingerprints of the code at BEFORE_LAYERS, measured on this machine; None where this clone lacks
    that commit (a shallow one)."""
    archive = subprocess.run(["git", "archive", BEFORE_LAYERS], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        return None
    tree = scratch / "before-layers"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return pinned_fingerprints(scratch / "before.json", checkout=tree)


def changed_pairs(expected: dict, actual: dict) -> list[str]:
    """'method (engine): what differs' for each pair whose fingerprint changed."""
    out = []
    for method, engines in sorted(expected.items()):
        for engine, was in engines.items():
            now = actual[method][engine]
            keys = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
            if keys:
                refused = f" ({now['refused']})" if "refused" in now else ""
                out.append(f"{method} ({engine}): {', '.join(keys)}{refused}")
    return out


def test_every_methods_history_is_bitwise_the_code_before_the_layering(tmp_path):
    now = pinned_fingerprints(tmp_path / "now.json")
    recorded = json.loads(GOLDEN.read_text())
    off_the_file = changed_pairs(recorded, now)
    if not off_the_file:
        return
    before = measured_before_layers(tmp_path)
    assert before is not None, (f"histories differ from {GOLDEN.name}, and this clone lacks commit {BEFORE_LAYERS} "
                                "to measure on this CPU:\n  " + "\n  ".join(off_the_file))
    changed = changed_pairs(recorded | before, now)  # a method newer than the commit: the file's entry
    assert not changed, (f"histories changed since commit {BEFORE_LAYERS}, both measured on this machine "
                         "(history, state or refused):\n  " + "\n  ".join(changed))


def test_the_golden_file_holds_every_method_on_both_engines():
    """Every registered method, both engines, each run or refused: so the test above covers them all. A new
    method regenerates the file (its diff then adds the new method's entries and changes no other)."""
    from tasks.algorithms import ALGORITHMS

    golden = json.loads(GOLDEN.read_text())
    assert set(ALGORITHMS.names()) <= set(golden), "regenerate the file (this module's docstring says how)"
    for method, engines in golden.items():
        assert set(engines) == {"sequential", "vectorized"}, method
        # the reference engine runs every method
        assert set(engines["sequential"]) == {"history", "state"}, method
        assert set(engines["vectorized"]) in ({"history", "state"}, {"refused"}), method


def test_changed_pairs_names_each_pair_and_what_changed():
    def pairs(fedavg_state: str, dann_vectorized: dict) -> dict:
        return {"fedavg": {"sequential": {"history": "a", "state": fedavg_state},
                           "vectorized": {"history": "c", "state": "d"}},
                "dann": {"sequential": {"history": "e", "state": "f"}, "vectorized": dann_vectorized}}

    was = pairs("b", {"refused": "no"})
    now = pairs("x", {"history": "g", "state": "h"})
    assert changed_pairs(was, now) == ["dann (vectorized): history, refused, state",
                                       "fedavg (sequential): state"]
    assert changed_pairs(was, was) == []


def test_make_histories_without_an_output_says_how_to_call_it(capsys, tmp_path):
    import torch  # noqa: F401  (imported here as in a pytest worker: make_histories then refuses to run)

    assert main([]) == 2
    assert main([str(tmp_path / "missing" / "out.json")]) == 2
    assert main([str(tmp_path / "out.json")]) == 2  # this process has imported PyTorch: numerics not pinnable
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "usage: python tests/golden/make_histories.py OUT.json"
    assert lines[1].endswith("does not exist")
    assert lines[2] == "make_histories.py: run it as a script (PyTorch is already imported here)"
    assert len(lines) == 3 and not (tmp_path / "out.json").exists()
