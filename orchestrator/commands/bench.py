"""`mooring bench [tiny|fixed-cost|whole-run|overhead|scale|states|gpu|engine|sweep|ui|cnn|lstm|all]`: run the benchmarks in benchmarks/
and print
their tables, each with the command that reproduces it.

Each figure is a ratio against a baseline measured in the same run. `--out benchmarks/README.md` also
replaces that benchmark's section of the results file (between `<!-- bench:NAME -->` markers). The size,
rounds, repeats, actors and engine options apply to the benchmarks that have them (tiny, fixed-cost, whole-run, overhead;
engine takes the size, rounds, samples and overrides).
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

BENCHES = {
    "tiny": "benchmarks.tiny_clients",
    "fixed-cost": "benchmarks.fixed_cost",
    "whole-run": "benchmarks.whole_run",
    "overhead": "benchmarks.overhead",
    "scale": "benchmarks.scale",
    "states": "benchmarks.client_states",
    "gpu": "benchmarks.gpu_packing",
    "engine": "benchmarks.engine_gpu",
    "sweep": "benchmarks.sweep_efficiency",
    "ui": "benchmarks.ui_start",
    "cnn": "benchmarks.model_cost_cnn",
    "lstm": "benchmarks.model_cost_lstm",
}


def configure(parser) -> None:
    from benchmarks.tiny_clients import PARTITION_NAMES

    parser.add_argument("which", nargs="?", default="all", choices=[*BENCHES, "all"],
                        help="tiny (many clients of one or two steps against a plain PyTorch loop), fixed-cost (a "
                             "round of one client of one step: the round's own cost), whole-run (a "
                             "whole `mooring run` against the loop's whole process), overhead (heavy clients against "
                             "the loop), scale (100,000 clients against 1,000: FedAvg, FedSA, MOON), states (a bounded client-state store against all "
                             "states in memory), gpu (client actors sharing one GPU; "
                             "skipped without CUDA), engine (the vectorized engine against the sequential one on one device, "
                             "the GPU where there is one; `all` skips it without CUDA), sweep (TPE with pruning against a full grid), ui (`mooring ui` against `mlflow server`: seconds to the "
                             "page and to the API), cnn and lstm (a CNN on 28×28 images, the character LSTM on "
                             "Shakespeare: per round and to a target accuracy against the plain and the vectorised "
                             "loop), or all (default)")
    parser.add_argument("--out", default=None, metavar="MARKDOWN",
                        help="update this markdown file's section for each benchmark")
    parser.add_argument("--size", action="append", type=client_size, metavar="CLIENTS/PER_ROUND",
                        help="tiny, whole-run, engine, scale: clients and clients per round, repeatable (default: 1000/100 "
                             "and 100/10; whole-run and engine take the first; whole-run's default: 100/10; "
                             "engine's: 100/100; scale's: "
                             "1000/100 and 100000/100, the first the baseline)")
    parser.add_argument("--partition", action="append", default=None, choices=list(PARTITION_NAMES),
                        help="tiny: the client partitions, repeatable (default both: IID, and Dirichlet α = 0.1 label "
                             "skew)")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help="tiny: rounds (default 120); whole-run: rounds (default 20); fixed-cost: rounds (default "
                             "100); engine: timed rounds per engine after a warm-up one (default 2); scale: rounds per "
                             "run (default 7, at least 4); cnn, lstm: rounds (default 24, 16)")
    parser.add_argument("--samples", type=positive_int, default=None,
                        help="engine: samples per client (default 200)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="runs of each row, the fastest counting")
    parser.add_argument("--actors", type=actor_counts, default=None, metavar="N[,N...]",
                        help="tiny: the numbers of client actors of the Mooring rows (default 1,2); fixed-cost: the "
                             "same (default 2); whole-run: the first; cnn, lstm: as tiny")
    parser.add_argument("--engine", action="append", default=None, metavar="ENGINE",
                        help="tiny, whole-run, overhead, cnn, lstm: set train.engine for the Mooring rows, repeatable (one row "
                             "per engine); default: as the config says (cnn, lstm: the same)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="tiny, whole-run, overhead, engine: a config override for the Mooring rows only (engine: "
                             "both rows), repeatable "
                             "(for example resources.partial_sums=true); cnn, lstm: as tiny")


def client_size(text: str) -> str:
    import argparse

    parts = text.split("/")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts) or int(parts[1]) > int(parts[0]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected CLIENTS/PER_ROUND, for example 1000/100")
    return text


def positive_int(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number ≥ 1")
    return int(text)


def actor_counts(text: str) -> tuple[int, ...]:
    import argparse

    try:
        counts = tuple(int(n) for n in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers of actors, for example 1,2")
    return counts


def measure_options(name: str, args) -> list[dict]:
    """The keyword arguments of each `measure` call for benchmark `name` (one call per engine where the
    benchmark measures one engine at a time)."""
    given = {"rounds": args.rounds, "repeats": args.repeats, "mooring_overrides": tuple(args.overrides) or None}
    engines = args.engine or [None]
    if name == "tiny":
        given |= {"sizes": tuple(args.size) if args.size else None, "actors": args.actors, "engines": tuple(engines),
                  "partitions": tiny_partitions(args.partition)}
        return [{k: v for k, v in given.items() if v is not None}]
    if name == "fixed-cost":
        given |= {"actors": args.actors, "engines": tuple(engines)}
        return [{k: v for k, v in given.items() if v is not None}]
    if name == "whole-run":
        given |= {"size": args.size[0] if args.size else None, "actors": args.actors[0] if args.actors else None}
        return [{k: v for k, v in given.items() if v is not None} | {"engine": e} for e in engines]
    if name == "overhead":
        given = {"repeats": args.repeats, "mooring_overrides": given["mooring_overrides"]}
        return [{k: v for k, v in given.items() if v is not None} | {"engine": e} for e in engines]
    if name == "scale":
        given = {"sizes": tuple(args.size) if args.size else None, "rounds": args.rounds, "repeats": args.repeats}
        return [{k: v for k, v in given.items() if v is not None}]
    if name in ("cnn", "lstm"):
        given |= {"actors": args.actors, "engines": tuple(args.engine) if args.engine else None}
        return [{k: v for k, v in given.items() if v is not None}]
    if name == "ui":
        return [{"repeats": args.repeats} if args.repeats else {}]
    if name == "engine":
        given = {"size": args.size[0] if args.size else None, "samples_per_client": args.samples,
                 "rounds": args.rounds, "mooring_overrides": given["mooring_overrides"]}
        return [{k: v for k, v in given.items() if v is not None}]
    return [{}]


def tiny_partitions(names: list[str] | None) -> tuple[str, ...] | None:
    """`--partition` names as the tiny benchmark's partition labels, in its order; None: all of them."""
    if not names:
        return None
    from benchmarks.tiny_clients import PARTITION_NAMES

    return tuple(label for name, label in PARTITION_NAMES.items() if name in names)


def replace_section(path: Path, name: str, text: str) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    content = path.read_text() if path.exists() else ""
    block = f"{start}\n{text.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    content = pattern.sub(lambda _: block, content) if pattern.search(content) else content + f"\n{block}\n"
    path.write_text(content)


def run_one(name: str, args) -> str | None:
    module = importlib.import_module(BENCHES[name])
    if name == "gpu" or (name == "engine" and args.which == "all"):
        import torch

        if not torch.cuda.is_available():
            print(f"{name}: skipped, no CUDA GPU on this machine")
            return None
    return "\n".join(module.report(module.measure(**options)) for options in measure_options(name, args))


def main(args) -> int:
    names = list(BENCHES) if args.which == "all" else [args.which]
    for name in names:
        text = run_one(name, args)
        if text is None:
            continue
        print(f"## {name}\n{text}")
        if args.out:
            replace_section(Path(args.out), name, text)
    return 0
