"""A real multi-node Ray cluster and a real MLflow tracking server on this machine, for the cluster tests.

Each Ray node is a `ray start --block` process (its raylet, agents and workers are its descendants) with
its own ports and its own temp dir: nodes sharing one would share runtime_env directories, and one node's
agent deletes a working_dir another node's job is still importing from. Token authentication is on. Every process is stopped by its pid (checked against its start time, so a reused pid is left alone);
`ray stop` is never used, since it would also stop other Ray instances on the machine.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Fast detection of a dead node (defaults: ~30 s).
FAST_FAILURE_DETECTION = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
                          "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
# Patience with a loaded machine (Ray's own settings, read by every Ray process from RAY_<name>; defaults in Ray
# 2.60's ray_config_def.h): a raylet's wait to register with the GCS (10 s), a GCS client's wait for a GCS that does
# not answer (60 s) and a GCS call's deadline (60 s). Beside a busy process, a second node's `ray start` hit the
# call deadline ("Failed to get node info: Deadline Exceeded").
LOADED_MACHINE = {"RAY_raylet_start_wait_time_s": "60", "RAY_gcs_rpc_server_reconnect_timeout_s": "120",
                  "RAY_gcs_server_request_timeout_seconds": "120"}
# A node that does not join is started again, as Ray's own cluster tests retry (bounded, with a growing wait):
# attempts, and the seconds before the second (doubled before each next one)
NODE_ATTEMPTS, NODE_BACKOFF_SECONDS = 3, 5.0
NODE_JOIN_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ processes
def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of `pid` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [pid], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        tree += kids
        todo += kids
    return [(p, t) for p in tree if (t := _start_time(p)) is not None]


def kill_tree(processes: list[tuple[int, int]]) -> None:
    """SIGKILL each process that is still the one recorded (same pid and start time)."""
    for pid, started in processes:
        if _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_until(predicate, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")


# ------------------------------------------------------------------------------------------- Ray nodes
@dataclass
class Node:
    name: str
    process: subprocess.Popen
    node_id: str = ""
    log: Path | None = None  # its `ray start` output


class NodeDidNotStart(RuntimeError):
    """A Ray node that did not join the cluster in its attempts: each attempt's failure and the last one's output."""


class LocalCluster:
    def __init__(self, head_cpus: float = 2, head_gpus: float = 1, head_resources: dict[str, float] | None = None,
                 attempts: int = NODE_ATTEMPTS, backoff: float = NODE_BACKOFF_SECONDS):
        self.attempts, self.backoff = attempts, backoff  # each node's `ray start`s, and the wait before a second
        # Short: Ray's socket paths under the temp dir must fit in 107 characters.
        self.tmp = Path(tempfile.mkdtemp(prefix="mrc", dir="/tmp"))
        self.token = secrets.token_hex(24)
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.dashboard_port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env |= {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_AUTH_MODE": "token",
                     "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0", **FAST_FAILURE_DETECTION,
                     **LOADED_MACHINE,
                     # as docs/how-to/cluster.md and k8s/raycluster.yaml start a cluster: workers at niceness 15 would get
                     # almost no CPU beside a busy process (the suite is also run with CPU burners beside it)
                     "RAY_worker_niceness": "0"}
        self.nodes: list[Node] = []
        try:
            self._start("head", ["--head", f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}",
                                 "--dashboard-host=127.0.0.1", "--include-dashboard=true",
                                 f"--ray-client-server-port={free_port()}",
                                 f"--resources={json.dumps(head_resources or {})}"],
                        head_cpus, head_gpus)
        except BaseException:
            self.shutdown()
            raise

    def add_node(self, num_cpus: float = 2, num_gpus: float = 1) -> Node:
        return self._start(f"w{len(self.nodes)}", [f"--address=127.0.0.1:{self.gcs_port}"], num_cpus, num_gpus)

    def _start(self, name: str, args: list[str], num_cpus: float, num_gpus: float) -> Node:
        """A node that has joined the cluster: `ray start` again, on fresh ports, after a growing wait, when an
        attempt exits or does not join in NODE_JOIN_SECONDS; after `self.attempts`, one NodeDidNotStart naming each
        attempt's failure and the last one's output."""
        failures, attempts = [], self.attempts
        for attempt in range(1, attempts + 1):
            node = self._launch(name, args, num_cpus, num_gpus, attempt)
            try:
                node.node_id = wait_until(lambda started=node: self._new_alive_node(started), NODE_JOIN_SECONDS,
                                          f"Ray node {name} to join")
                return node
            except (RuntimeError, TimeoutError) as e:
                failures.append(f"attempt {attempt}: {str(e).splitlines()[0]}")
                self._abandon(node)
            if attempt < attempts:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        raise NodeDidNotStart(f"Ray node {name} did not join the cluster in {attempts} attempts "
                              f"({'; '.join(failures)}); the last one's output:\n{node.log.read_text()[-2000:]}")

    def _launch(self, name: str, args: list[str], num_cpus: float, num_gpus: float, attempt: int) -> Node:
        ports = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
                 "runtime-env-agent-port", "node-manager-port", "object-manager-port")
        cmd = [str(BIN / "ray"), "start", "--block", *args, f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
               f"--temp-dir={self.tmp / f'{name}-{attempt}'}", "--disable-usage-stats",
               *(f"--{p}={free_port()}" for p in ports)]
        log = open(self.tmp / f"{name}-{attempt}.out", "w")
        node = Node(name, subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp),
                    log=self.tmp / f"{name}-{attempt}.out")
        self.nodes.append(node)
        return node

    def _abandon(self, node: Node) -> None:
        """A node that did not join: its processes killed, and it forgotten."""
        kill_tree(process_tree(node.process.pid))
        node.process.wait(timeout=30)
        self.nodes.remove(node)

    def _new_alive_node(self, node: Node) -> str | None:
        """The id of an alive node none of the cluster's nodes is known by yet (`node`'s), or None."""
        if node.process.poll() is not None:
            raise RuntimeError(f"ray start for {node.name} exited with {node.process.returncode}")
        try:
            alive = [n["node_id"] for n in self.state("nodes") if n["state"] == "ALIVE"]
        except (OSError, ValueError, KeyError):
            return None
        fresh = [n for n in alive if n not in {known.node_id for known in self.nodes}]
        return fresh[0] if fresh else None

    # ------------------------------------------------------------------ the dashboard's REST API
    def get(self, path: str) -> dict:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def state(self, resource: str, **filters: str) -> list[dict]:
        """Ray's state API (`ray list nodes|actors`), over HTTP."""
        query = "detail=true&limit=10000" + "".join(
            f"&filter_keys={k}&filter_predicates=%3D&filter_values={v}" for k, v in filters.items())
        return self.get(f"/api/v0/{resource}?{query}")["data"]["result"]["result"]

    def jobs(self):
        """A Jobs API client that sends the cluster's token."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.url, headers={"Authorization": f"Bearer {self.token}"})

    @property
    def head(self) -> Node:
        return self.nodes[0]

    # ------------------------------------------------------------------ stopping
    def kill_node(self, node: Node) -> list[int]:
        """SIGKILL a node's raylet, agents and workers at once, as when a machine dies; their pids."""
        tree = process_tree(node.process.pid)
        kill_tree(tree)
        node.process.wait(timeout=30)
        return [pid for pid, _ in tree]

    def shutdown(self) -> None:
        trees = [process_tree(n.process.pid) for n in self.nodes if n.process.poll() is None]
        for tree in reversed(trees):
            kill_tree(tree)
        for node in self.nodes:
            node.process.wait(timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------ MLflow
class MlflowServer:
    """`mlflow server` on loopback: PostgreSQL back end (a fresh database, dropped at the end) when PostgreSQL
    is reachable at 127.0.0.1:5432, else SQLite; artifacts in `tmp`. Started here, ready after wait_ready()."""

    def __init__(self, tmp: Path, postgres: bool):
        self.database = f"mooring_test_{secrets.token_hex(4)}" if postgres else None
        if self.database:
            try:
                self._postgres(f"CREATE DATABASE {self.database}")
            except Exception:  # listening, but not letting us in as postgres: SQLite will do
                self.database = None
        if self.database:
            backend = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{self.database}"
        else:
            backend = f"sqlite:///{tmp / 'mlflow.db'}"
        self.backend, self.tmp, self.starts = backend, tmp, 0
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.starts += 1
        cmd = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
               "--backend-store-uri", self.backend, "--artifacts-destination", str(self.tmp / "artifacts")]
        self.log = self.tmp / f"mlflow-{self.starts}.out"
        self.process = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)

    def wait_ready(self) -> MlflowServer:
        wait_until(self._healthy, 180, "the MLflow server")
        return self

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            # `mlflow server` binds its port some seconds after free_port() let it go, and exits 0 when the port
            # was taken meanwhile (by the Ray nodes starting beside it): a fresh port, up to three starts
            tail = self.log.read_text()[-600:]
            if "address already in use" in tail and self.starts < 3:
                self._start()
                return False
            raise RuntimeError(f"mlflow server exited with {self.process.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    @staticmethod
    def _postgres(sql: str) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            conn.cursor().execute(sql)
        finally:
            conn.close()

    def stop(self) -> None:
        kill_tree(process_tree(self.process.pid))
        self.process.wait(timeout=30)
        if self.database:
            self._postgres(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
