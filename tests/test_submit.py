"""`mooring submit` and `mooring jobs` without a cluster: argument parsing, what the job would run and upload,
the refusal of paths only the head node would see, the token's sources, and one-line failures.
(tests/test_cluster_multinode.py submits to a real cluster.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cli import build_parser, main
from orchestrator.driver.run_errors import RunError
from orchestrator.experiment.config import ConfigError
from orchestrator.ray_runtime import cluster
from tests.cluster_fixture import ROOT, free_port

SHARED = ["--set", "tracking.uri=http://mlflow:5000", "--set", "checkpoint.dir=s3://bucket/runs",
          "--set", "data.partitions_dir=/shared/partitions"]


def parse(*argv: str):
    parser, _ = build_parser()
    return parser.parse_args(["submit", *argv])


def submit_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["submit", "--address", f"http://127.0.0.1:{free_port()}", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -------------------------------------------------------------------------------------------- parsing
def test_options_before_the_pipeline_and_its_arguments_after():
    args = parse("--address", "http://head:8265", "--follow", "--token-file", "t", "--",
                 "run", "configs/default.yaml", "--set", "train.rounds=2", "--quiet")
    assert (args.address, args.follow, args.no_wait, args.token_file) == ("http://head:8265", True, False, "t")
    assert args.pipeline == "run"
    assert args.args == ["configs/default.yaml", "--set", "train.rounds=2", "--quiet"]


@pytest.mark.parametrize("argv", [["--follow", "--no-wait", "--", "run", "c.yaml"], ["--", "train", "c.yaml"]])
def test_conflicting_modes_and_unknown_pipelines_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit, match=r"^2$") as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2


def test_pipeline_arguments_are_checked_by_the_pipeline_parser_before_submitting(capsys):
    with pytest.raises(SystemExit, match=r"^2$") as exit_info:
        main(["submit", "--", "run", "configs/default.yaml", "--no-such-option"])
    assert exit_info.value.code == 2
    assert "mooring submit -- run: error: unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_an_address_for_the_pipeline_itself_is_refused(capsys):
    code, _, err = submit_main(capsys, "--", "run", "configs/default.yaml", "--address", "10.0.0.1:6379", *SHARED)
    assert code == 2
    assert err.startswith("error: --address after `run`: the job runs on the cluster it is submitted to")


def test_jobs_subcommands_parse():
    parser, _ = build_parser()
    args = parser.parse_args(["jobs", "logs", "raysubmit_1", "--follow", "--address", "http://h:8265"])
    assert (args.action, args.job_id, args.follow, args.address) == ("logs", "raysubmit_1", True, "http://h:8265")
    assert parser.parse_args(["jobs", "list"]).action == "list"
    with pytest.raises(SystemExit, match=r"^2$"):
        parser.parse_args(["jobs", "stop"])  # the id is required


# ------------------------------------------------------------------------------------ what the job runs
def test_entrypoint_quotes_arguments_but_leaves_env_references_to_the_head_shell(tmp_path):
    args = ["configs/sweeps/x.yaml", "--storage", "$MOORING_OPTUNA_STORAGE", "--set", "name=two words",
            "--set", "tracking.uri=${MLFLOW_TRACKING_URI}", "--set", "name=$(touch pwned)"]
    line = cluster.entrypoint("sweep", args)
    assert line == ("python -m orchestrator.cli sweep configs/sweeps/x.yaml --storage \"$MOORING_OPTUNA_STORAGE\" "
                    "--set 'name=two words' --set \"tracking.uri=${MLFLOW_TRACKING_URI}\" --set 'name=$(touch pwned)'")
    words = line.removeprefix("python -m orchestrator.cli ")
    env = {"PATH": os.environ["PATH"], "MOORING_OPTUNA_STORAGE": "postgresql://u:p@db/optuna",
           "MLFLOW_TRACKING_URI": "http://mlflow:5000"}
    shown = subprocess.run(["bash", "-c", f"printf '%s\\n' {words}"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert shown == ["sweep", "configs/sweeps/x.yaml", "--storage", "postgresql://u:p@db/optuna", "--set",
                     "name=two words", "--set", "tracking.uri=http://mlflow:5000", "--set", "name=$(touch pwned)"]
    assert not (tmp_path / "pwned").exists()


def test_the_upload_leaves_out_outputs_and_data_but_not_the_tasks_data_package():
    from ray._private.runtime_env.packaging import _get_excludes  # how Ray applies `excludes` when packaging

    excluded = _get_excludes(ROOT, cluster.runtime_env(ROOT)["excludes"])
    for left_out in (".venv/bin/python", ".git/HEAD", "runs/r1/result.json", "mlruns/0/meta.yaml", "data/MNIST/x",
                     "results/compare/runs.csv", "mlflow.db", "optuna.db", "orchestrator/__pycache__/cli.cpython-311.pyc",
                     ".mooring/partitions/p.parquet", "mooring.egg-info/PKG-INFO"):
        assert excluded(ROOT / left_out), left_out
    for kept in ("tasks/data/datasets.py", "orchestrator/cli.py", "configs/default.yaml", "pyproject.toml",
                 "tests/runs_helper.py", "pipelines/results.py"):
        assert not excluded(ROOT / kept), kept
    assert cluster.runtime_env(ROOT)["working_dir"] == str(ROOT)


# ------------------------------------------------------------------------------- paths only one node sees
def test_relative_local_paths_are_refused_in_one_line(capsys):
    code, out, err = submit_main(capsys, "--", "run", "configs/default.yaml", "--set", "tracking.uri=sqlite:///mlflow.db")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: on a cluster these would stay on the head node, out of reach of the other nodes "
                          "and of you: tracking.uri = 'sqlite:///mlflow.db'; checkpoint.dir = 'runs'; "
                          "data.partitions_dir = '.mooring/partitions'. Use shared locations")
    assert err.rstrip().endswith("or pass --allow-local-paths for a single-node cluster")


def test_allow_local_paths_skips_the_check(capsys):
    code, _, err = submit_main(capsys, "--allow-local-paths", "--", "run", "configs/default.yaml")
    assert code == 1
    assert err.startswith("error: no Ray cluster reachable at http://127.0.0.1:")  # it got as far as the cluster


def test_a_sweep_needs_a_storage_every_node_reaches(capsys):
    base = ["--", "sweep", "configs/sweeps/fedfa_digits.yaml", *SHARED]
    _, _, err = submit_main(capsys, *base)
    assert "head node, out of reach of the other nodes and of you: --storage is not set (a local SQLite file)." in err
    _, _, err = submit_main(capsys, *base, "--storage", "sqlite:///optuna.db")
    assert "of you: --storage 'sqlite:///optuna.db'." in err
    for shared in ("postgresql://mooring@db:5432/optuna", "sqlite:////shared/optuna.db", "$MOORING_OPTUNA_STORAGE"):
        _, _, err = submit_main(capsys, *base, "--storage", shared)
        assert err.startswith("error: no Ray cluster reachable"), shared


def test_a_literal_password_in_a_storage_or_tracking_uri_is_refused(capsys):
    sweep = ["--", "sweep", "configs/sweeps/fedfa_digits.yaml", *SHARED]
    code, out, err = submit_main(capsys, *sweep, "--storage", "postgresql://mooring:s3cret@db:5432/optuna")
    assert code == 1 and out == "" and "s3cret" not in err
    assert err.strip().splitlines() == [
        "error: --storage carries a literal password, which the job's entrypoint would show on the dashboard: write "
        "it as '$NAME' (an environment variable of the cluster's nodes, for example --storage "
        "'postgresql://user:$PGPASSWORD@db:5432/optuna'), or pass --allow-literal-password"]
    _, _, err = submit_main(capsys, "--", "run", "configs/default.yaml", *SHARED,
                            "--set", "tracking.uri=postgresql://u:pw@db/mlflow")
    assert err.startswith("error: tracking.uri carries a literal password")
    for allowed in (["--storage", "postgresql://mooring:$PGPASSWORD@db:5432/optuna"],
                    ["--storage", "postgresql://mooring:s3cret@db:5432/optuna"]):
        flag = ["--allow-literal-password"] if "s3cret" in allowed[1] else []
        _, _, err = submit_main(capsys, *flag, *sweep, *allowed)
        assert err.startswith("error: no Ray cluster reachable"), allowed  # it got as far as the cluster


def test_tracking_uris_and_paths_other_nodes_can_reach():
    from orchestrator.experiment.config import load_config

    def problems(*overrides: str, storage: str | None = "postgresql://db/optuna") -> list[str]:
        cfg = load_config("configs/default.yaml", ["checkpoint.dir=/shared/runs", "data.partitions_dir=s3://b/p",
                                                   *overrides])
        return cluster.local_path_problems([cfg], storage, needs_storage=True)

    for fine in ("http://mlflow:5000", "https://mlflow.example.org", "postgresql://u@db/mlflow",
                 "sqlite:////shared/mlflow.db", "file:///shared/mlruns", "$MLFLOW_TRACKING_URI", "databricks"):
        assert problems(f"tracking.uri={fine}") == [], fine
    assert problems("tracking.enabled=false") == []
    assert problems() == ["tracking.uri is not set (MLflow's default local store)"]
    assert problems("tracking.uri=mlruns") == ["tracking.uri = 'mlruns'"]
    assert problems("tracking.uri=sqlite:///mlflow.db", "checkpoint.dir=runs", storage="optuna.db") == [
        "tracking.uri = 'sqlite:///mlflow.db'", "checkpoint.dir = 'runs'", "--storage 'optuna.db'"]
    assert problems("tracking.uri=http://m:5000", "checkpoint.dir=${SHARED}/runs") == []


def test_the_config_must_be_inside_the_directory_submitted_from(tmp_path, monkeypatch, capsys):
    code, _, err = submit_main(capsys, "--", "compare", str(ROOT / "configs/default.yaml"), *SHARED)
    assert code == 1
    assert err.startswith(f"error: {ROOT / 'configs/default.yaml'}: give the config as a path inside the directory "
                          "you submit from")
    # a project of one's own (tests/test_cluster_multinode.py runs one): it is the job's working directory
    (tmp_path / "lab.yaml").write_text((ROOT / "configs/default.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = submit_main(capsys, "--", "run", "lab.yaml", *SHARED)
    assert code == 1 and err.startswith("error: no Ray cluster reachable")  # it got as far as the cluster
    assert cluster.runtime_env(cluster.job_directory())["working_dir"] == str(tmp_path.resolve())
    code, _, err = submit_main(capsys, "--", "run", "configs/default.yaml", *SHARED)
    assert code == 2 and "configs/default.yaml" in err and len(err.strip().splitlines()) == 1  # not in the project


# ------------------------------------------------------------------------------------ address and token
def test_an_unreachable_cluster_is_one_line_and_exit_1():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", "--address", f"http://127.0.0.1:{port}",
                             "--", "run", "configs/default.yaml", *SHARED],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (f"error: no Ray cluster reachable at http://127.0.0.1:{port}; start one with "
                             "`ray start --head` or give its dashboard with --address (or RAY_ADDRESS)\n")


def test_the_address_comes_from_the_option_then_the_environment(monkeypatch):
    for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    assert cluster.dashboard_address(None) == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "head:8265")
    assert cluster.dashboard_address(None, allow_plain_http=True) == "http://head:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "https://ray.example.org/")
    assert cluster.dashboard_address(None) == "https://ray.example.org"
    assert cluster.dashboard_address("http://other:8265", allow_plain_http=True) == "http://other:8265"
    with pytest.raises(ConfigError, match="expected the dashboard's URL"):
        cluster.dashboard_address("ray://head:10001")
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://127.0.0.1:1\\@127.0.0.1:8265")
    with pytest.raises(ConfigError, match=r"^RAY_API_SERVER_ADDRESS: holds a backslash"):  # not shown: an @
        cluster.dashboard_address(None)


def test_plain_http_to_another_machine_is_refused_unless_asked(tmp_path, monkeypatch, capsys):
    """The token (by default ~/.ray/auth_token) would cross the network readable: refused in one line before any
    connection, unless --allow-plain-http; loopback and https are fine (before, it went to any address)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["jobs", "list", "--address", "http://192.0.2.1:8265"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --address http://192.0.2.1:8265: plain http to another "
                                                    "machine would send the cluster's token and the job unencrypted")
    assert "--allow-plain-http" in err
    assert main(["submit", "--address", "head.example.org:8265", "--", "run", "configs/default.yaml"]) == 2
    assert "error: --address http://head.example.org:8265: plain http" in capsys.readouterr().err
    for url in ("http://127.0.0.1:8265", "http://localhost:8265", "http://[::1]:8265", "https://head:8265"):
        assert cluster.dashboard_address(url) == url
    assert cluster.dashboard_address("http://127.example.org:1", allow_plain_http=True) == "http://127.example.org:1"
    with pytest.raises(ConfigError, match="plain http"):  # a host name that looks like a loopback address is not one
        cluster.dashboard_address("http://127.example.org:1")


class Listener:
    """A TCP listener on 127.0.0.1, in a thread, that records every connection and what it sends (for at most a
    second each) until the `with` block ends."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                        data += chunk
                except TimeoutError:
                    pass
                self.received.append(data)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(timeout=10)
        self.sock.close()


def crafted_addresses(target: int, decoy: int) -> list[str]:
    """Addresses that urllib.parse and urllib3 (the Jobs client's requests) read differently, or that carry what
    the plain form has no place for: each would pass a loopback check on 127.0.0.1:`decoy`, or name `target`."""
    return [f"http://127.0.0.1:{target}\\@127.0.0.1:{decoy}",  # urllib3 ends the host at the backslash
            "http://127.1\\@127.0.0.1:8265", f"127.0.0.1:{target}\\@127.0.0.1:{decoy}",
            f"http://127.0.0.1:{target}/\\@127.0.0.1:{decoy}", f"http://user:pw@127.0.0.1:{target}",
            f"http://127.0.0.1:{decoy}@127.0.0.1:{target}", f"http://127.0.0.1:{target}#@evil",
            f"http://127.0.0.1:{target}?x=@y", "http://[::1", f"http://[::1]x:{target}",
            f"http://127.0.0.1:{target}\t", f"http://127.0.0.1\n:{target}", f"http://127.0.0.1:{target}\r\n",
            f"http:// 127.0.0.1:{target}", f"http://127.0.0.1:{target}\x00", f"http://127.0.0.1\u3002evil:{target}",
            f"http://:{target}", "http://127.0.0.1:0", "http://127.0.0.1:65536", f"http://127.0.0.1:+{target}",
            f"http://127.0.0.1:{target}:{decoy}", f"ftp://127.0.0.1:{target}", f"http://127.0.0.1:{target}/a%zz",
            "http://127.1:8265"]  # a host name, not a loopback IP: plain http refused, as before


def test_a_crafted_address_is_refused_in_one_line_and_the_token_goes_nowhere(tmp_path, monkeypatch, capsys):
    r"""`http://127.1\@127.0.0.1:8265` passed the loopback check on 127.0.0.1 (urllib.parse reads the host after the
    `@`) while requests, ending the host at the backslash, sent `Authorization: Bearer TOKEN` to 127.1. Now each
    crafted address is refused in one line (exit 2) before any connection: two listeners, one at the host the
    checks would see and one at the host the client would reach, receive nothing; the same listener receives
    the token from a plain address, so it would have seen a leak."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "canary-token-4f1d")
    with Listener() as target, Listener() as decoy:
        for address in crafted_addresses(target.port, decoy.port):
            for argv in (["submit", "--no-wait", "--address", address, "--", "run", "configs/default.yaml"],
                         ["jobs", "list", "--address", address]):
                assert main(argv) == 2, (argv, capsys.readouterr())
                out, err = capsys.readouterr()
                assert out == "" and err.count("\n") == 1 and err.startswith("error: --address"), (address, err)
                assert "canary" not in err and "pw" not in err, err
        # RAY_ADDRESS is parsed the same way, and named in the refusal
        monkeypatch.setenv("RAY_ADDRESS", f"http://127.0.0.1:{target.port}\\@127.0.0.1:{decoy.port}")
        assert main(["jobs", "list"]) == 2
        assert capsys.readouterr().err.startswith("error: RAY_ADDRESS: holds a backslash")
        assert target.received == [] and decoy.received == []
        # the control: a plain address to the target, which answers nothing a client accepts
        assert main(["jobs", "list", "--address", f"http://127.0.0.1:{target.port}"]) == 1
        assert f"Ray cluster at http://127.0.0.1:{target.port}" in capsys.readouterr().err
    assert any(b"Authorization: Bearer canary-token-4f1d" in request for request in target.received)
    assert decoy.received == []


def test_an_address_is_parsed_once_as_both_parsers_read_it():
    """What is accepted is rebuilt from the one parse, and urllib.parse and urllib3 read the same host and port
    in it; the checks (loopback, the port connected to) use that parse."""
    from urllib.parse import urlsplit

    from urllib3.util import parse_url

    from orchestrator.ray_runtime.address import parse_dashboard

    for address, url, loopback, port in (
            ("http://127.0.0.1:8265", "http://127.0.0.1:8265", True, 8265),
            ("HTTP://LocalHost:8265/ray/", "http://localhost:8265/ray", True, 8265),
            ("[::1]:8265", "http://[::1]:8265", True, 8265),
            ("https://ray.example.org", "https://ray.example.org", False, 443),
            ("http://ray-head.default.svc:08265/a%2Fb", "http://ray-head.default.svc:8265/a%2Fb", False, 8265),
            ("127.1:8265", "http://127.1:8265", False, 8265)):
        endpoint = parse_dashboard(address)
        assert (endpoint.url, endpoint.loopback, endpoint.connect_port) == (url, loopback, port), address
        std, lib = urlsplit(endpoint.url), parse_url(endpoint.url)
        assert std.hostname == lib.host.strip("[]") == endpoint.host and std.port == lib.port == endpoint.port


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["http://", "https://", "ray://", "127.0.0.1", "127.1", "localhost", "h", "[::1]",
                                 "[", "]", ":", "8265", "0", "/", "\\", "@", "?", "#", "%", "%2f", ".", "-", " ",
                                 "\t", "\n", "\x00", "\u3002", "a", "A", "9"]), max_size=10).map("".join))
def test_whatever_is_accepted_every_parser_reads_as_checked(text):
    """Any address built from the pieces parsers trip on: refused, or read by urllib.parse and urllib3 (as typed
    and as rebuilt) with the host and port the checks use."""
    from urllib.parse import urlsplit

    from urllib3.util import parse_url

    from orchestrator.ray_runtime.address import AddressError, parse_dashboard

    try:
        endpoint = parse_dashboard(text)
    except AddressError as e:
        assert "\n" not in str(e)
        return
    for url in (text if "://" in text else f"http://{text}", endpoint.url):
        std, lib = urlsplit(url), parse_url(url)
        assert std.hostname == lib.host.strip("[]").lower() == endpoint.host, url
        assert std.port == lib.port == endpoint.port and lib.auth is None and "@" not in url, url


def test_a_ray_address_is_held_to_the_same_form(tmp_path):
    """The --address of run, compare, sweep, table and claims (HOST:PORT or ray://HOST:PORT): refused where
    parsers could disagree, before the reachability check connects anywhere."""
    from orchestrator.ray_runtime.ray_start import check_address

    with Listener() as target, Listener() as decoy:
        for address in (f"127.0.0.1:{target.port}\\@127.0.0.1:{decoy.port}", f"ray://u:p@127.0.0.1:{target.port}",
                        f"127.0.0.1:{target.port}#x", f"http://127.0.0.1:{target.port}", "127.0.0.1", "ray://:1"):
            with pytest.raises(RunError, match=r"^--address") as refused:
                check_address(address)
            assert "\n" not in str(refused.value) and ":p@" not in str(refused.value)
        assert target.received == [] and decoy.received == []
        check_address(f"127.0.0.1:{target.port}")  # reachable: it passes
        check_address(f"ray://127.0.0.1:{target.port}")
    assert len(target.received) == 2


def test_a_server_s_error_body_is_shown_without_escape_sequences_and_capped(capsys):
    """A server (or whoever answers at its address) sends an error body with terminal escape sequences and
    thousands of characters: one plain line of at most a few hundred characters is shown (before, as sent)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import ray

    evil = "\x1b]0;owned\x07\x1b[2J\x1b[31mboom\x1b[0m\x9b1m\x07\u202e" + "A" * 5000 + "\nsecond line"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            version = self.path.startswith("/api/version")
            body = (json.dumps({"version": "4", "ray_version": ray.__version__, "ray_commit": "x"}) if version
                    else evil).encode()
            self.send_response(200 if version else 500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = main(["jobs", "list", "--address", f"http://127.0.0.1:{server.server_port}"])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err[:500]
    assert "boom" in err and "second line" not in err and len(err) < 450, err[:500]
    assert not [c for c in err[:-1] if ord(c) < 32 or 0x7f <= ord(c) <= 0x9f or c == "\u202e"], err[:500]


def test_the_token_comes_from_the_file_then_ray_s_own_places(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    assert cluster.auth_token(None) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    assert cluster.auth_token(None) == "home-token"
    (tmp_path / "path-token").write_text("path-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "path-token"))
    assert cluster.auth_token(None) == "path-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert cluster.auth_token(None) == "env-token"
    (tmp_path / "file-token").write_text("  file-token  \n")
    assert cluster.auth_token(str(tmp_path / "file-token")) == "file-token"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(RunError, match=r"--token-file .*empty: the file is empty"):
        cluster.auth_token(str(tmp_path / "empty"))
    with pytest.raises(RunError, match=r"--token-file .*missing: cannot read the token"):
        cluster.auth_token(str(tmp_path / "missing"))


def test_a_failed_job_is_one_line_naming_its_logs():
    from orchestrator.commands.submit import report_outcome

    class FinishedJob:
        url = "http://head:8265"

        def __init__(self, status: str):
            self.status = status

        def outcome(self, job_id):
            return self.status, "Job entrypoint command failed with exit code 1, last available logs"

    assert report_outcome(FinishedJob("SUCCEEDED"), "raysubmit_1") == 0
    with pytest.raises(RunError, match=r"^job raysubmit_1 failed: ") as failed:
        report_outcome(FinishedJob("FAILED"), "raysubmit_1")
    assert str(failed.value) == ("job raysubmit_1 failed: Job entrypoint command failed with exit code 1, last "
                                 "available logs; see `mooring jobs logs raysubmit_1 --address http://head:8265`")


def test_the_commands_stay_light_to_import():
    code = ("import sys, orchestrator.commands.submit, orchestrator.commands.jobs, orchestrator.ray_runtime.cluster; "
            "print(' '.join(m for m in ('ray', 'torch', 'mlflow', 'orchestrator.driver.run') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == ""


def test_allow_local_paths_points_the_job_at_this_checkout(tmp_path):
    from orchestrator.commands.submit import job_targets, parse_pipeline_args

    parsed = parse_pipeline_args("compare", ["configs/default.yaml", "--set", "tracking.uri=sqlite:///m.db"])
    _, configs, storage = job_targets("compare", parsed)
    args = cluster.anchor_local_paths("compare", parsed, configs, storage, tmp_path)
    assert args == ["--set", f"tracking.uri=sqlite:///{tmp_path}/m.db", "--set", f"checkpoint.dir={tmp_path}/runs",
                    "--set", f"data.partitions_dir={tmp_path}/.mooring/partitions", "--out", f"{tmp_path}/results/compare"]
    parsed = parse_pipeline_args("sweep", ["configs/sweeps/fedfa_digits.yaml", *SHARED])
    _, configs, storage = job_targets("sweep", parsed)
    assert cluster.anchor_local_paths("sweep", parsed, configs, storage, tmp_path) == \
        ["--storage", f"sqlite:///{tmp_path}/optuna.db"]  # shared locations are left as they are
    assert "ray stop" in subprocess.run([sys.executable, "-m", "orchestrator.cli", "jobs", "--help"],
                                        capture_output=True, text=True, cwd=ROOT).stdout


def test_a_sweep_s_study_name_is_checked_as_the_job_will_use_it(tmp_path):
    """A sweep file whose name has a space is refused (its trials could not be named) unless --study names the
    study, as the job's own `mooring sweep` will."""
    import yaml

    from orchestrator.commands.submit import job_targets, parse_pipeline_args

    path = tmp_path / "my sweep.yaml"
    path.write_text(yaml.safe_dump({"base": str(ROOT / "configs" / "default.yaml"), "algorithm": "fedprox"}))
    with pytest.raises(ConfigError, match="the file's name"):
        job_targets("sweep", parse_pipeline_args("sweep", [str(path)]))
    assert job_targets("sweep", parse_pipeline_args("sweep", [str(path), "--study", "mine"]))[0] == str(path)
