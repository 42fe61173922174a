"""A simulated world across hosts (issue 34; docs/multinode.md): every node runs
`simgpu run --gpus G --sim-interface simnet0 torchrun --nnodes N --rdzv-backend c10d ...`, each node a
Linux network namespace with its own address (tests/netns.py), so the sim groups, the strict check
and torchrun's rendezvous all cross a real (virtual) network, never loopback."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests import netns

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"
ACROSS = Path(__file__).resolve().parent / "sim_scripts" / "across_hosts.py"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
RDZV_PORT = 29517  # inside the namespaces: nothing else listens there

_why_not = netns.unavailable()
pytestmark = pytest.mark.skipif(_why_not is not None, reason=_why_not or "")


@pytest.fixture
def hosts():
    """make(n) -> NamespaceHosts; every one made is torn down (processes killed, namespaces deleted)."""
    made: list[netns.NamespaceHosts] = []

    def make(n: int) -> netns.NamespaceHosts:
        made.append(netns.NamespaceHosts(n))
        return made[-1]

    yield make
    for h in made:
        h.close()


def node_command(hosts: netns.NamespaceHosts, node: int, gpus: int, program: list[str]) -> list[str]:
    """What one node runs: the same on every node but its own address and is_host (the rendezvous
    store is on node 0; torch's guess of which node hosts it reads the hostname, shared here)."""
    nodes = len(hosts.names)
    return hosts.command(node, [
        sys.executable, "-m", "simgpu", "run", "--gpus", str(gpus), "--sim-interface", netns.INTERFACE,
        "--timeout", "240", TORCHRUN, "--nnodes", str(nodes), "--nproc-per-node", str(gpus),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts.addresses[0]}:{RDZV_PORT}", "--rdzv-id", "simgpu-test",
        "--rdzv-conf", f"is_host={int(node == 0)}", "--local-addr", hosts.addresses[node], "--max-restarts", "0",
        *program])


def start_world(hosts: netns.NamespaceHosts, gpus: int, program: list[str],
                env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    return [subprocess.Popen(node_command(hosts, node, gpus, program), cwd=ROOT, text=True,
                             env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for node in range(len(hosts.names))]


def finish(nodes: list[subprocess.Popen], timeout: float = 280) -> list[tuple[int, str]]:
    """(exit status, output) of every node, killing all of them if one is still running at the bound."""
    deadline = time.monotonic() + timeout
    results = []
    for p in nodes:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in nodes:
                q.kill()
            out, _ = p.communicate()
            out += "\n[test] node still running at the test's bound; killed"
        results.append((p.returncode, out))
    return results


def single_host(gpus: int, program: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", str(gpus), "--timeout", "240", TORCHRUN,
                           "--standalone", "--nproc-per-node", str(gpus), *program],
                          cwd=ROOT, text=True, capture_output=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def losses(output: str) -> list[str]:
    return re.findall(r"^(?:step \d+ loss \S+|final \S+)$", output, re.M)


def nothing_left(hosts: netns.NamespaceHosts) -> list[int]:
    """Processes still in the hosts' namespaces, after giving the nodes' watchdogs 10 s."""
    deadline = time.monotonic() + 10
    while hosts.pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    return hosts.pids()


def _check_training(hosts: Callable[[int], netns.NamespaceHosts], nodes: int, gpus: int, program: str) -> None:
    world = hosts(nodes)
    results = finish(start_world(world, gpus, [str(PROGRAMS / program)]))
    for node, (code, out) in enumerate(results):
        assert code == 0, f"node {node} exited {code}:\n{out[-4000:]}"
    expected = losses(single_host(nodes * gpus, [str(PROGRAMS / program)]))
    assert len(expected) > 1
    assert losses(results[0][1]) == expected  # rank 0 (on node 0) prints them
    assert nothing_left(world) == []


def test_ddp_across_two_hosts_gives_the_single_host_losses(hosts) -> None:
    _check_training(hosts, 2, 1, "ddp_torchrun.py")


@pytest.mark.full
@pytest.mark.parametrize("nodes,gpus,program", [(2, 2, "ddp_torchrun.py"), (2, 2, "fsdp2.py"),
                                                (3, 2, "ddp_torchrun.py")])
def test_training_across_hosts_gives_the_single_host_losses(hosts, nodes: int, gpus: int, program: str) -> None:
    _check_training(hosts, nodes, gpus, program)


def test_a_mismatch_is_reported_on_every_node_whose_records_carry_the_secret_agreed_through_the_rendezvous(
        hosts) -> None:
    world = hosts(2)
    results = finish(start_world(world, 1, [str(ACROSS), "mismatch"]))
    digests = []
    for node, (code, out) in enumerate(results):
        assert code != 0, f"node {node} exited 0:\n{out[-3000:]}"
        assert re.search(rf"^rank {node} on .*: CollectiveMismatch: .*disagree at collective #2", out, re.M), \
            f"node {node}:\n{out[-4000:]}"
        digests += re.findall(rf"^rank {node} secret (\S+)$", out, re.M)
    assert len(digests) == 2 and digests[0] == digests[1] != "none", digests  # one secret, drawn by one node
    assert nothing_left(world) == []


@pytest.mark.full
def test_a_node_killed_mid_run_is_named_by_the_others_and_nothing_is_left(hosts) -> None:
    world = hosts(2)
    nodes = start_world(world, 1, [str(ACROSS), "steps"], env={"SIMGPU_STRICT_TIMEOUT": "10"})
    deadline = time.monotonic() + 200
    seen = ""
    while "rank 0 step 3" not in seen and time.monotonic() < deadline:  # node 0's output, line by line
        line = nodes[0].stdout.readline()
        if not line:
            break
        seen += line
    assert "rank 0 step 3" in seen, seen[-3000:]
    nodes[1].send_signal(signal.SIGKILL)  # the whole node: its launcher; its watchdog kills the rest
    (code, out), _ = finish(nodes)
    out = seen + out
    assert code != 0, out[-3000:]
    assert re.search(r"CollectiveTimeout: .*rank\(s\) \[1\] did not arrive", out), out[-4000:]
    assert nothing_left(world) == []
