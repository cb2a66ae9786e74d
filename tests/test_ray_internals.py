"""orchestrator/ray_runtime/ray_internals.py: what each piece does to a real local instance (the session's, started by
init_ray as `mooring run` starts one), and what happens on a Ray that lacks a name a piece needs."""
from __future__ import annotations

import logging
import os
import types

import psutil
import pytest

from orchestrator.ray_runtime import ray_internals
from orchestrator.ray_runtime.ray_internals import (
    Swap,
    lean_start,
    lean_swaps,
    loopback_only,
    swap_problem,
    swapped,
)


def ray_processes() -> list[psutil.Process]:
    """This driver and the processes of the instance it started (its children: GCS, raylet, and theirs)."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def command_lines(processes: list[psutil.Process]) -> list[str]:
    lines = []
    for proc in processes:
        try:
            lines.append(" ".join(proc.cmdline()))
        except psutil.Error:  # a worker that ended meanwhile
            pass
    return lines


@pytest.mark.ray
def test_the_lean_local_instance_runs_no_dashboard_server_and_no_autoscaler_monitor(ray_session):
    lines = command_lines(ray_processes())
    assert any("gcs_server" in line for line in lines) and any("raylet" in line for line in lines), lines
    assert [line for line in lines if "dashboard/dashboard.py" in line] == []
    assert [line for line in lines if "autoscaler/_private/monitor.py" in line] == []


@pytest.mark.ray
def test_every_socket_the_local_instance_listens_on_is_on_loopback(ray_session):
    pids = {proc.pid for proc in ray_processes()}
    listening = {(c.laddr.ip, c.pid) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids}
    assert len({pid for _, pid in listening}) >= 3, listening  # the driver, the GCS and the raylet at least
    assert {ip for ip, _ in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_the_installed_ray_has_every_name_the_pieces_need():
    import ray._private.authentication.authentication_token_setup as setup
    import ray._private.node
    import ray._private.ray_constants
    import ray._private.utils

    assert [swap_problem(s) for s in lean_swaps(ray._private.node.Node, ray._private.utils)] == [None] * 3
    assert ray_internals.loopback_problem(ray._private.ray_constants) is None
    assert callable(ray_internals.token_auth_switch(setup))


def test_a_missing_name_logs_one_line_once_and_nothing_is_patched(caplog):
    import ray
    import ray._private.node

    node = ray._private.node.Node
    originals = (node.__dict__["start_api_server"], node.__dict__["start_monitor"])
    ray_without_it = types.ModuleType("ray_without_it")  # no get_dashboard_dependency_error
    caplog.set_level(logging.WARNING, logger="orchestrator.ray_runtime.ray_internals")
    for _ in range(2):
        with lean_start(node, ray_without_it) as applied:
            assert applied is False
            assert (node.__dict__["start_api_server"], node.__dict__["start_monitor"]) == originals
    assert [r.getMessage() for r in caplog.records] == [
        f"Ray {ray.__version__}: lean start-up skipped (ray_without_it.get_dashboard_dependency_error not found); "
        "Ray starts its dashboard and autoscaler as usual (seconds more CPU at start-up)"]


def test_loopback_and_token_auth_without_their_names_change_nothing(caplog):
    constants = types.SimpleNamespace(ENABLE_RAY_CLUSTER=True)  # no ENABLE_RAY_CLUSTERS_ENV_VAR
    environment = dict(os.environ)
    caplog.set_level(logging.WARNING, logger="orchestrator.ray_runtime.ray_internals")
    with loopback_only(constants) as applied:
        assert applied is False and constants.ENABLE_RAY_CLUSTER is True and dict(os.environ) == environment
    assert ray_internals.enable_token_auth(types.ModuleType("no_token_setup")) is False
    assert dict(os.environ) == environment
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "ENABLE_RAY_CLUSTERS_ENV_VAR not found" in messages[0]
    assert "_enable_token_auth not found" in messages[1]


class Owner:
    def returns_nothing(self, a) -> None:
        self.a = a

    def returns_a_pair(self, a):
        return a, a


def test_a_swap_applies_only_where_the_signature_and_the_return_shape_match(caplog):
    def replacement(self, a):
        return None

    assert swap_problem(Swap(Owner, "returns_nothing", replacement, ("a",))) is None
    assert swap_problem(Swap(Owner, "returns_nothing", replacement, ("b",))).endswith("returns_nothing takes no b")
    assert swap_problem(Swap(Owner, "returns_a_pair", replacement, ("a",))).endswith("returns_a_pair now returns a value")
    with swapped([Swap(Owner, "returns_nothing", replacement, ("a",)),
                  Swap(Owner, "returns_a_pair", replacement, ("a",))], "both", "neither applies") as applied:
        assert applied is False and Owner.returns_nothing is not replacement  # all or none
    with swapped([Swap(Owner, "returns_nothing", replacement, ("a",))], "one", "-") as applied:
        assert applied is True and Owner.returns_nothing is replacement
    assert Owner.returns_nothing is not replacement and Owner().returns_a_pair(1) == (1, 1)
