"""Working with a Ray cluster through its Jobs API: the client (address and token), what a submitted job
runs, and the checks that keep a job's results where every node, and the user, can read them.

`mooring submit` and `mooring jobs` use it. Ray is imported only inside the functions that talk to a
cluster, so `mooring --help` stays fast.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator.ray_runtime.address import AddressError, Endpoint, parse_dashboard, refusal, unreachable

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
PIPELINES = ("run", "compare", "sweep")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# What the job's working directory leaves out: environments, VCS, outputs, data, local stores, caches.
# Anchored with "/" where a name also occurs deeper (tasks/data is code, ./data is datasets).
EXCLUDES = ["/.venv", "/.git", "/runs", "/mlruns", "/mlartifacts", "/results", "/data", "/.mooring", "/build",
            "*.db", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".hypothesis"]
# $NAME or ${NAME} in an argument: left for the head node's shell to expand (a secret stays out of the
# entrypoint, which the dashboard shows), so its value is not known, nor checked, here.
ENV_REFERENCE = re.compile(r"\$(\{[A-Za-z_]\w*\}|[A-Za-z_]\w*)")
AUTH_HINT = "set RAY_AUTH_TOKEN or --token-file"


def bad_input(message: str) -> Exception:
    """A ConfigError (one line, exit 2 from the CLI): the user's input is refused before anything is sent."""
    from orchestrator.experiment.config import ConfigError

    return ConfigError(message)


def failure(message: str) -> Exception:
    """A RunError (one line, exit 1 from the CLI), imported only when there is one to raise."""
    from orchestrator.errors import RunError

    return RunError(message)


# ------------------------------------------------------------------------------------------ arguments
def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, metavar="URL",
                        help=f"the cluster's dashboard (Jobs API); default: RAY_API_SERVER_ADDRESS, RAY_ADDRESS "
                             f"or {DEFAULT_ADDRESS}")
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help="file holding the cluster's authentication token (default: RAY_AUTH_TOKEN, "
                             "RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token)")
    parser.add_argument("--allow-plain-http", action="store_true",
                        help="send the token and the job over plain http to another machine (refused by default: "
                             "use an SSH tunnel or `kubectl port-forward` to 127.0.0.1, or https)")


def dashboard_address(address: str | None, allow_plain_http: bool = False) -> str:
    """The dashboard's URL, rebuilt from the one parse (`dashboard_endpoint`) that every check and the client use."""
    return dashboard_endpoint(address, allow_plain_http).url


def dashboard_endpoint(address: str | None, allow_plain_http: bool = False) -> Endpoint:
    """The dashboard's address, parsed once (orchestrator/ray_runtime/address.py): an address parsers could read
    two ways is refused, and so is plain http unless its host stays on this machine or `allow_plain_http`: the
    token (by default ~/.ray/auth_token) and the job would cross the network readable and alterable."""
    source = "--address"
    if not address:
        source = next((var for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS") if os.environ.get(var)), "--address")
        address = os.environ.get(source, DEFAULT_ADDRESS)
    try:
        endpoint = parse_dashboard(address)
    except AddressError as e:
        raise bad_input(refusal(source, address, e)) from None
    if endpoint.scheme == "http" and not endpoint.loopback and not allow_plain_http:
        raise bad_input(f"{source} {endpoint.url}: plain http to another machine would send the cluster's token "
                        "and the job unencrypted; reach the dashboard through an SSH tunnel or `kubectl "
                        "port-forward` at http://127.0.0.1:8265, or over https, or pass --allow-plain-http on a "
                        "network you trust")
    return endpoint


def auth_token(token_file: str | None) -> str | None:
    """The token Ray's token authentication expects, from where Ray itself looks for it."""
    if token_file:
        return _read_token(token_file, "--token-file")
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return _read_token(os.environ["RAY_AUTH_TOKEN_PATH"], "RAY_AUTH_TOKEN_PATH")
    default = Path.home() / ".ray" / "auth_token"
    return _read_token(str(default), "~/.ray/auth_token") if default.is_file() else None


def _read_token(path: str, source: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise failure(f"{source} {path}: cannot read the token ({e.strerror or e})") from None
    if not token:
        raise failure(f"{source} {path}: the file is empty")
    return token


# ----------------------------------------------------------------------------------------- the client
class JobsAPI:
    """A cluster's Jobs API (ray.job_submission.JobSubmissionClient), sending the token when there is one.
    Every failure, from an unreachable address to a refused token, comes out as one line."""

    def __init__(self, address: str | None, token_file: str | None, allow_plain_http: bool = False):
        endpoint = dashboard_endpoint(address, allow_plain_http)
        self.url = endpoint.url
        if unreachable(endpoint):
            raise failure(f"no Ray cluster reachable at {self.url}; start one with `ray start --head` "
                          "or give its dashboard with --address (or RAY_ADDRESS)")
        token = auth_token(token_file)
        from ray.job_submission import JobSubmissionClient

        quiet_ray_logging()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        with self.errors():  # the URL as parsed: the token goes to the host the checks saw, and nowhere else
            self.client = JobSubmissionClient(self.url, headers=headers)

    def call(self, method: str, *args, **kwargs):
        with self.errors():
            return getattr(self.client, method)(*args, **kwargs)

    @contextmanager
    def errors(self):
        from ray.exceptions import AuthenticationError

        try:
            yield
        except AuthenticationError:
            raise failure(f"the Ray cluster at {self.url} refused the request: authentication token missing or "
                          f"wrong; {AUTH_HINT}") from None
        except ConnectionError:
            raise failure(f"lost the connection to the Ray cluster at {self.url}") from None
        except (RuntimeError, ValueError, OSError) as e:
            raise failure(f"the Ray cluster at {self.url}: {first_line(e) or type(e).__name__}") from None

    def submit(self, pipeline: str, args: list[str], root: Path) -> str:
        """Start `mooring PIPELINE ARGS` as a job whose working directory is the project at `root`."""
        # What is uploaded is EXCLUDES, whatever .gitignore says (its "data/" would drop tasks/data too).
        os.environ["RAY_RUNTIME_ENV_IGNORE_GITIGNORE"] = "1"
        return self.call("submit_job", entrypoint=entrypoint(pipeline, args), runtime_env=runtime_env(root),
                         metadata={"mooring_pipeline": pipeline})

    def status(self, job_id: str) -> str:
        return str(self.call("get_job_status", job_id).value)

    def wait(self, job_id: str, echo=None, poll: float = 2.0) -> str:
        """Block until the job ends, reporting each status change through `echo`; the final status."""
        last = None
        while True:
            status = self.status(job_id)
            if status != last and echo is not None:
                echo(f"{job_id}: {status}")
            last = status
            if status in TERMINAL:
                return status
            time.sleep(poll)

    def follow(self, job_id: str, out=None) -> None:
        """Print the job's logs as they come, until it ends."""
        out = out or sys.stdout

        async def tail() -> None:
            async for chunk in self.client.tail_job_logs(job_id):
                out.write(chunk)
                out.flush()

        with self.errors():
            asyncio.run(tail())

    def outcome(self, job_id: str) -> tuple[str, str]:
        """The job's status and the first line of Ray's message about it."""
        info = self.call("get_job_info", job_id)
        return str(info.status.value), first_line(info.message or "")


def quiet_ray_logging() -> None:
    """Ray's client logs every packaging step; the user needs only our lines and real problems. Some of its
    loggers set their own level, so each is set, not only the "ray" parent."""
    import logging

    for name in ["ray", *logging.root.manager.loggerDict]:
        if name == "ray" or name.startswith("ray."):
            logging.getLogger(name).setLevel(logging.ERROR)


# what a server sends is shown only as plain text: escape sequences (CSI, OSC, and ESC with one character) and
# every other control or format character go, and the length is capped
ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-_])|\x9b[0-?]*[ -/]*[@-~]")
SHOWN_CHARS = 300


def printable(text: object, limit: int = SHOWN_CHARS) -> str:
    """`text` from a server, safe to print: no escape sequence nor control character (a line break or tab
    becomes a space), at most `limit` characters."""
    import unicodedata

    plain = ESCAPE_SEQUENCE.sub("", str(text))
    plain = "".join(" " if c in "\t\n\r" else c for c in plain if c in "\t\n\r" or unicodedata.category(c)[0] != "C")
    return plain if len(plain) <= limit else plain[: limit - 1] + "…"


def first_line(text: object) -> str:
    """The first line of a server's message, printable (see `printable`)."""
    lines = str(text).strip().splitlines()
    return printable(lines[0]).rstrip(".") if lines else ""


# ------------------------------------------------------------------------------------ what a job runs
def job_directory() -> Path:
    """The directory `mooring submit` runs from: it becomes the job's working directory. Mooring's checkout (its
    code travels with the job), or a project of the user's own, whose packages (a method, a model, a dataset
    named by `module:attribute`) and configs travel with the job, run by the Mooring installed on the nodes."""
    return Path.cwd().resolve()


def shell_word(arg: str) -> str:
    """`arg` quoted for the head node's shell; $NAME and ${NAME} stay references that it expands."""
    rest = ENV_REFERENCE.sub("", arg)
    if rest != arg and not any(c in rest for c in '"\\`$'):
        return f'"{arg}"'
    return shlex.quote(arg)


def entrypoint(pipeline: str, args: list[str]) -> str:
    return " ".join(["python", "-m", "orchestrator.cli", pipeline, *(shell_word(a) for a in args)])


def runtime_env(root: Path) -> dict[str, Any]:
    return {"working_dir": str(root), "excludes": EXCLUDES, "env_vars": {"PYTHONUNBUFFERED": "1"}}


def check_config_path(path: str) -> None:
    """A config file named in the job's arguments must be in the uploaded directory, under the same name."""
    p = Path(path)
    if p.is_absolute() or ".." in p.parts:
        raise failure(f"{path}: give the config as a path inside the directory you submit from, for example "
                      "configs/default.yaml; the job sees only that directory, uploaded")


# ------------------------------------------------------------------------------- paths only one node sees
def is_cluster_reference(value: str) -> bool:
    return bool(ENV_REFERENCE.search(value))


def is_relative_local(path: str) -> bool:
    return "://" not in path and not is_cluster_reference(path) and not Path(path).is_absolute()


def is_local_url(url: str) -> bool:
    """A relative path, or a sqlite:/file: URL of one: it means another place on each node."""
    if is_cluster_reference(url):
        return False
    for prefix in ("sqlite:///", "file:"):
        if url.startswith(prefix):
            return not Path(url.removeprefix(prefix)).is_absolute()
    return is_relative_local(url)


def tracking_problem(cfg) -> str | None:
    """Why a job's MLflow runs would be out of reach, or None."""
    uri = cfg.tracking.uri
    if not cfg.tracking.enabled or (uri or "").split(":", 1)[0] in ("databricks", "databricks-uc"):
        return None
    if uri is None:
        return "tracking.uri is not set (MLflow's default local store)"
    return f"tracking.uri = {uri!r}" if is_local_url(uri) else None


def storage_problem(storage: str | None) -> str | None:
    """Why a sweep's Optuna storage would be out of reach, or None."""
    if storage is None:
        return "--storage is not set (a local SQLite file)"
    return f"--storage {storage!r}" if is_local_url(storage) else None


def local_path_problems(configs: list, storage: str | None, needs_storage: bool) -> list[str]:
    problems: list[str] = []
    for cfg in configs:
        found = [tracking_problem(cfg)]
        for key, value in (("checkpoint.dir", cfg.checkpoint.dir), ("data.partitions_dir", cfg.data.partitions_dir)):
            found.append(f"{key} = {value!r}" if is_relative_local(value) else None)
        problems += [p for p in found if p and p not in problems]
    if needs_storage and (problem := storage_problem(storage)):
        problems.append(problem)
    return problems


def anchored(url: str, root: Path) -> str:
    """A relative local path or sqlite:/file: URL made absolute under `root`; anything else unchanged."""
    for prefix in ("sqlite:///", "file:"):
        if url.startswith(prefix) and not Path(url.removeprefix(prefix)).is_absolute():
            return prefix + str(root / url.removeprefix(prefix))
    return str(root / url) if is_relative_local(url) else url


def anchor_local_paths(pipeline: str, parsed, configs: list, storage: str | None, root: Path) -> list[str]:
    """--allow-local-paths (a single-node cluster, submitted from the head node): the job's relative local
    paths pointed at the submitted directory instead of Ray's temporary copy of it, where nobody would find them.
    The arguments to append to the job's own (later values win)."""
    cfg, extra = configs[0], []
    if cfg.tracking.enabled and tracking_problem(cfg):
        extra.append(f"tracking.uri={anchored(cfg.tracking.uri or 'sqlite:///mlflow.db', root)}")
    for key, value in (("checkpoint.dir", cfg.checkpoint.dir), ("data.partitions_dir", cfg.data.partitions_dir)):
        if is_relative_local(value):
            extra.append(f"{key}={anchored(value, root)}")
    args = [a for kv in extra for a in ("--set", kv)]
    if pipeline == "compare" and is_relative_local(parsed.out):
        args += ["--out", anchored(parsed.out, root)]
    if pipeline == "sweep" and storage_problem(storage):
        args += ["--storage", anchored(storage or "sqlite:///optuna.db", root)]
    if getattr(parsed, "resume", None) and is_relative_local(parsed.resume):
        args += ["--resume", anchored(parsed.resume, root)]
    return args


def literal_password_problems(configs: list, storage: str | None) -> list[str]:
    """Store URIs whose password is written out: the entrypoint, which the dashboard shows, would carry it."""
    uris = [("tracking.uri", cfg.tracking.uri) for cfg in configs if cfg.tracking.uri] + [("--storage", storage)]
    problems = []
    for name, uri in uris:
        try:
            password = urlparse(uri).password if uri else None
        except ValueError:  # a malformed netloc: the pipeline reports it
            password = None
        if password and not is_cluster_reference(password) and name not in problems:
            problems.append(name)
    return problems


def refuse_literal_passwords(problems: list[str]) -> None:
    if problems:
        raise failure(
            f"{' and '.join(problems)} {'carry' if len(problems) > 1 else 'carries'} a literal password, which "
            "the job's entrypoint would show on the dashboard: write it as '$NAME' (an environment variable of the cluster's nodes, for example "
            "--storage 'postgresql://user:$PGPASSWORD@db:5432/optuna'), or pass --allow-literal-password")


def refuse_local_paths(problems: list[str]) -> None:
    if problems:
        raise failure(
            "on a cluster these would stay on the head node, out of reach of the other nodes and of you: "
            + "; ".join(problems) + ". Use shared locations (--set tracking.uri=http://MLFLOW:5000, --set checkpoint.dir=s3://... or an "
              "absolute path on a shared file system, --storage postgresql://...; '$NAME' is expanded on the head), "
              "or pass --allow-local-paths for a single-node cluster")
