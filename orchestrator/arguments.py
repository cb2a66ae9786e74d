"""The arguments several commands share, the pipelines that are commands too (compare, sweep, claims, table)."""
from __future__ import annotations

import argparse


def add_config_args(parser: argparse.ArgumentParser, config_required: bool = True) -> None:
    parser.add_argument("config", nargs=None if config_required else "?", metavar="CONFIG", help="experiment YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="dotted override, repeatable: --set train.rounds=5 --set data.partition.alpha=0.5")


def add_outside_code_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-outside-code", action="store_true",
                        help="refuse module:attribute references (built-in names and installed entry points only), "
                             "so a config or run directory from someone else runs none of its own code")


def apply_outside_code(args: argparse.Namespace) -> None:
    """--no-outside-code: from here on, references are refused before their modules are imported."""
    if args.no_outside_code:
        from tasks.registry import refuse_references

        refuse_references()


def add_address_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                        help="an existing Ray cluster (HOST:PORT, ray://HOST:10001 or auto); default: RAY_ADDRESS "
                             "if set, else a new local Ray instance for this command")


def check_output_file(path: str, option: str = "--output-json") -> None:
    """Refuse a bad output file (`option`'s value) before hours of training, not after: a directory, a parent that
    is missing or a file, or one that cannot be written in (tried with an empty file, removed at once)."""
    import os
    from pathlib import Path

    from orchestrator.experiment.config import ConfigError
    from orchestrator.io.storage import can_write_in

    target = Path(path).absolute()
    parent = target.parent
    if target.is_dir():
        raise ConfigError(f"{option} {path}: a directory; give the path of a file to write the result to")
    if not parent.exists():
        raise ConfigError(f"{option} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is a file, not a directory")
    if (e := can_write_in(parent)) is not None:
        raise ConfigError(f"{option} {path}: cannot write in {parent} ({e.strerror or e})")
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{option} {path}: the file exists and cannot be written")
