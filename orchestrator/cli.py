"""`mooring`: the command line.

Each subcommand lives in the module that implements it and exposes `configure(parser)` and
`main(args) -> int`; this file only routes. Module top levels import nothing heavy, so `mooring --help`
is fast. Every known failure (bad config, missing data, unreachable service) becomes one line on stderr
and a non-zero exit: 2 for bad input, 1 for a failed run.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from orchestrator.commands import COMMANDS
from orchestrator.errors import RUN_ERROR, USAGE_ERROR


def build_parser(command: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The parser with every subcommand's options, or with only those of `command` (the others listed by name):
    a command imports no other command's module (`mooring run` would otherwise import numpy, asyncio and more
    before it starts Ray)."""
    parser = argparse.ArgumentParser(prog="mooring", description="Federated learning on heterogeneous data, on Ray.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if command in (None, name):
            modules[name] = importlib.import_module(module_name)
            modules[name].configure(sub_parser)
    return parser, modules


def command_named(argv: list[str]) -> str | None:
    """The subcommand `argv` names (its first word, the top level having no option that takes a value), if known."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return first if first in COMMANDS else None


def known_errors() -> tuple[type[BaseException], ...]:
    from orchestrator.driver.run_errors import RunError
    from orchestrator.driver.signals import RunInterrupted
    from orchestrator.experiment.config import ConfigError
    from tasks.data.datasets import DataFileError, DatasetNotFound
    from tasks.data.partition import PartitionError
    from tasks.registry import PluginError

    return ConfigError, RunError, RunInterrupted, DatasetNotFound, DataFileError, PartitionError, PluginError


def main(argv: list[str] | None = None) -> int:
    """The `mooring` command. `argv` None: this process's own command line, and the process then ends as soon as
    the command has; where the command started a local Ray instance (`sweep`, `compare`, ... given no cluster), that
    instance is ended at once rather than shut down in order (`exit_without_ray_shutdown`, as `mooring run` ends)."""
    own_process = argv is None
    argv = sys.argv[1:] if argv is None else argv
    parser, modules = build_parser(command_named(argv))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return USAGE_ERROR
    # may_run_without_ray's test, without importing Ray's helpers before every command (no session is held yet)
    starts_its_own_ray = own_process and not (getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"))
    code = run_command(modules[args.command], args)
    if starts_its_own_ray and "ray" in sys.modules:
        from orchestrator.ray_runtime.ray_start import exit_without_ray_shutdown, ray_session_held

        if ray_session_held():
            exit_without_ray_shutdown(code)
    return code


def run_command(module, args) -> int:
    """The command's exit code; a known error is one line on stderr."""
    try:
        return int(module.main(args) or 0)
    except OSError as e:  # the environment: a disk full, a directory that vanished, a permission
        print(f"error: {io_problem(e)}", file=sys.stderr)
        return RUN_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if interrupted_inside(e):
            print("interrupted", file=sys.stderr)
            return 130
        # the known errors' modules (numpy, pyarrow, pydantic) are imported only now, not before every command
        if not isinstance(e, known_errors()):
            raise
        return report_known_error(e)


def interrupted_inside(error: BaseException | None) -> bool:
    """Whether the stop signal's KeyboardInterrupt caused this error: a library may turn it into one of its own
    (an extension module interrupted while it is imported fails with "ImportError: initialization failed")."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def report_known_error(e: Exception) -> int:
    from orchestrator.driver.run_errors import RunError
    from orchestrator.driver.signals import RunInterrupted

    if isinstance(e, RunInterrupted):
        print(f"interrupted: {e}", file=sys.stderr)
        return 128 + e.signum
    print(f"error: {e}", file=sys.stderr)
    return RUN_ERROR if isinstance(e, RunError) else USAGE_ERROR


def io_problem(err: OSError) -> str:
    """An I/O failure as one line: the path and the problem."""
    what = err.strerror or (str(err).strip().splitlines() or [type(err).__name__])[0]
    path = err.filename if err.filename is not None else None
    return f"{path}: {what}" if path else f"{type(err).__name__}: {what}"


if __name__ == "__main__":
    sys.exit(main())
