"""make test's own Docker engine (efa_image.setup.testengine): what can be checked without
starting one. make test itself starts it, empty, at every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from efa_image.errors import EfaImageError
from efa_image.setup import engine, testengine

ROUTES = [
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "172.17.0.0/16", "dev": "docker0"},
    {"dst": "10.213.0.0/24", "dev": "efa-test0"},
    {"dst": "10.213.4.0/24", "dev": "br-5f9f81077d79"},
]


def test_its_own_bridge_and_networks_do_not_count_as_overlaps():
    testengine.check_pool_is_free(json.dumps(ROUTES))
    found = testengine.pool_routes(json.dumps(ROUTES))
    assert found == [("10.213.0.0/24", "efa-test0"), ("10.213.4.0/24", "br-5f9f81077d79")]


def test_a_route_of_this_machine_into_its_pool_is_refused_before_anything_starts():
    routes = [*ROUTES, {"dst": "10.213.128.0/17", "dev": "wg0"}]
    with pytest.raises(EfaImageError, match=r"\(10.213.0.0/16\) overlap .*10.213.128.0/17 dev wg0"):
        testengine.check_pool_is_free(json.dumps(routes))


def test_dockerd_gets_a_store_socket_and_bridge_of_its_own_and_leaves_iptables_alone():
    argv = testengine.dockerd_argv("/usr/sbin/dockerd", Path("/ci/build/test-engine"))
    assert argv[0] == "/usr/sbin/dockerd"
    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv[1:])
    assert options["data-root"] == "/ci/build/test-engine/docker"
    assert options["host"] == testengine.HOST != "unix:///var/run/docker.sock"
    assert options["exec-root"] != "/var/run/docker" and options["pidfile"] != "/var/run/docker.pid"
    assert options["bridge"] == "efa-test0"
    assert options["default-address-pool"] == "base=10.213.0.0/16,size=24"
    # A second dockerd that manages iptables removes the first one's DOCKER chains.
    assert options["iptables"] == "false"


def test_the_engine_of_another_checkout_is_not_taken_over(monkeypatch, tmp_path):
    other = tmp_path / "other/build/test-engine"
    monkeypatch.setattr(testengine, "serves", lambda state: other)
    monkeypatch.setattr(
        testengine, "stop", lambda state: pytest.fail("stopped another checkout's engine")
    )
    with pytest.raises(EfaImageError, match=rf"runs for {other}; stop it first"):
        testengine.start(tmp_path / "mine")


def test_a_client_pointed_at_another_engine_never_starts_this_machines(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", testengine.HOST)
    monkeypatch.setattr(engine, "docker_answers", lambda timeout=10.0, host=None: False)
    monkeypatch.setattr(
        engine, "start_dockerd", lambda *a, **k: pytest.fail("started this machine's dockerd")
    )
    with pytest.raises(EfaImageError, match=r"no Docker engine answers at DOCKER_HOST=unix://"):
        engine.ensure_docker()
