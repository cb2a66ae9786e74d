"""`mooring bench [overhead|scale|gpu|sweep|all]`: run the benchmarks in benchmarks/ and print their tables.

Each figure is a ratio against a baseline measured in the same run. `--out benchmarks/README.md` also
replaces that benchmark's section of the results file (between `<!-- bench:NAME -->` markers).
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

BENCHES = {
    "overhead": "benchmarks.overhead",
    "scale": "benchmarks.scale",
    "gpu": "benchmarks.gpu_packing",
    "sweep": "benchmarks.sweep_efficiency",
}


def configure(parser) -> None:
    parser.add_argument("which", nargs="?", default="all", choices=[*BENCHES, "all"])
    parser.add_argument("--out", default=None, help="update this markdown file's section for each benchmark")


def replace_section(path: Path, name: str, text: str) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    content = path.read_text() if path.exists() else ""
    block = f"{start}\n{text.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    content = pattern.sub(lambda _: block, content) if pattern.search(content) else content + f"\n{block}\n"
    path.write_text(content)


def run_one(name: str) -> str | None:
    module = importlib.import_module(BENCHES[name])
    if name == "gpu":
        import torch

        if not torch.cuda.is_available():
            print("gpu: skipped, no CUDA GPU on this machine")
            return None
    return module.report(module.measure())


def main(args) -> int:
    names = list(BENCHES) if args.which == "all" else [args.which]
    for name in names:
        text = run_one(name)
        if text is None:
            continue
        print(f"## {name}\n{text}")
        if args.out:
            replace_section(Path(args.out), name, text)
    return 0
