"""Arguments several commands share."""
from __future__ import annotations

import argparse


def add_config_args(parser: argparse.ArgumentParser, config_required: bool = True) -> None:
    parser.add_argument("config", nargs=None if config_required else "?", metavar="CONFIG", help="experiment YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="dotted override, repeatable: --set train.rounds=5 --set data.partition.alpha=0.5")


def add_address_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                        help="an existing Ray cluster (HOST:PORT, ray://HOST:10001 or auto); default: RAY_ADDRESS "
                             "if set, else a new local Ray instance for this command")
