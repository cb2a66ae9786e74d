"""`mooring config show CONFIG [--set k=v ...]`: the resolved config, every default filled in."""
from __future__ import annotations

from orchestrator.commands.common import add_config_args


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_config_args(sub.add_parser("show", help="print the resolved config as YAML"))


def main(args) -> int:
    from orchestrator.config import load_config

    print(load_config(args.config, args.overrides).to_yaml(), end="")
    return 0
