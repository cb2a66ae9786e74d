"""`mooring data show CONFIG [--png PATH]`: each client's class histogram, and the partition's identity."""
from __future__ import annotations

import numpy as np

from orchestrator.arguments import add_config_args, add_outside_code_arg, apply_outside_code


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print each client's class histogram")
    add_config_args(show)
    show.add_argument("--png", default=None, metavar="PATH", help="also save the histogram as a PNG heat map")
    show.add_argument("--rows", type=row_count, default=DEFAULT_ROWS, metavar="N|all",
                      help=f"clients listed one per line (default {DEFAULT_ROWS}; 'all' for every one); "
                           "the sizes line summarises them all")
    add_outside_code_arg(show)


DEFAULT_ROWS = 100  # a federation of 100,000 clients would otherwise print 100,000 lines


def row_count(text: str) -> int | None:
    """--rows: a count of clients to list, or None for all."""
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    import argparse

    raise argparse.ArgumentTypeError(f"{text!r}: expected a number of clients or 'all'")


def partition_summary(cfg, data, rows: int | None = None) -> str:
    """The partition's identity and sizes, then a table: one row per client (the first `rows`; None: all) with
    its train/test sizes, domain, its owner's name (natural partitions) and class counts (past
    WIDE_CLASSES classes: how many it holds and its most frequent class's share)."""
    hist = data.partition.class_histogram(data.dataset.y_train, data.num_classes)
    from tasks.data.partition import label_entropy

    tally = data.partition.tally.describe() if data.partition.tally else "draws not recorded (stored before tallies)"
    names = owner_names(cfg, data)
    wide = data.num_classes > WIDE_CLASSES
    lines = [
        f"dataset {cfg.data.dataset}: {len(data.dataset.y_train)} train / {len(data.dataset.y_test)} test, "
        f"{data.num_classes} classes, input {'x'.join(map(str, data.input_shape))}",
        f"partition {partition_rule(cfg.data.partition)} over {data.num_clients} clients, "
        f"seed {cfg.seed}, hash {data.partition_hash}; {tally}; mean label entropy {label_entropy(hist).mean():.3f} nats",
        sizes_line(data.partition.train),
        f"{'client':>6} {'train':>6} {'test':>5} {'domain':>6}  {'owner  ' if names else ''}"
        f"{'classes held, top class share' if wide else 'class counts'}",
    ]
    listed = data.num_clients if rows is None else min(rows, data.num_clients)
    for c in range(listed):
        counts = (f"{int((hist[c] > 0).sum()):4d} {hist[c].max() / max(hist[c].sum(), 1):6.1%}" if wide
                  else " ".join(f"{int(v):4d}" for v in hist[c]))
        angle = data.angles[int(data.partition.domain[c])]
        owner = f"{names[c]}  " if names else ""
        lines.append(f"{c:>6} {len(data.partition.train[c]):>6} {len(data.partition.test[c]):>5} {angle:>6g}  "
                     f"{owner}{counts}")
    if listed < data.num_clients:
        lines.append(f"… {data.num_clients - listed} more clients (--rows all lists every one)")
    return "\n".join(lines)


WIDE_CLASSES = 20  # more classes than this (a character vocabulary) are summarised, not listed


def partition_rule(part) -> str:
    if part.kind == "natural":
        return f"natural (the {part.select} owners with ≥ {part.min_size} samples)"
    return f"{part.kind} (alpha={part.alpha})"


def owner_names(cfg, data) -> list[str] | None:
    """Each client's owner (speaking role, writer, user) as one word, for a natural partition of named owners."""
    ds = data.dataset
    if cfg.data.partition.kind != "natural" or ds.owners is None or ds.owner_names is None:
        return None
    from tasks.data.natural import client_owners

    return ["_".join(ds.owner_names[o].split()) or "?" for o in client_owners(data.partition, ds.owners)]


def sizes_line(train: list) -> str:
    """Every client's training-set size in one line: min, quartiles, max and the total."""
    sizes = np.array([len(t) for t in train])
    q1, median, q3 = np.percentile(sizes, [25, 50, 75])
    return (f"train samples per client: min {sizes.min()}, quartiles {q1:g} / {median:g} / {q3:g}, "
            f"max {sizes.max()}, total {sizes.sum()}")


def main(args) -> int:
    from orchestrator.experiment.config import load_config
    from orchestrator.experiment.datasets import prepare_data

    apply_outside_code(args)
    cfg = load_config(args.config, args.overrides)
    if args.png:
        from orchestrator.arguments import check_output_file

        check_output_file(args.png, "--png")  # a directory would become DIR.png, and the line would name DIR
    data = prepare_data(cfg)
    print(partition_summary(cfg, data, args.rows))
    if args.png:
        from orchestrator.reporting.plots import plot_class_histogram

        hist = data.partition.class_histogram(data.dataset.y_train, data.num_classes)
        path = plot_class_histogram(np.asarray(hist), args.png, title=f"{cfg.data.dataset}: samples per client and class")
        print(f"saved {path}")
    return 0
