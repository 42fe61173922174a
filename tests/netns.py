"""Hosts for multi-node tests on one machine: Linux network namespaces joined by a bridge.

`NamespaceHosts(n)` makes n "hosts" (namespaces) plus one "switch" namespace holding a bridge; each
host gets a veth to the bridge named `simnet0` (the same name on every host, as eth0 is on a cluster),
its own address 10.R.R.k/24, and loopback. Nothing is added to the machine's own namespace, names are
unique per run, and close() kills what still runs in the namespaces before deleting them, which also
removes every veth and the bridge. `unavailable()` says in one line why namespaces cannot be made here.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time

INTERFACE = "simnet0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def unavailable() -> str | None:
    """None when network namespaces can be made here, else why not (one line)."""
    if shutil.which("ip") is None:
        return "network namespaces: no `ip` command (iproute2) here"
    if os.geteuid() != 0:
        return "network namespaces: needs root (CAP_NET_ADMIN) to create them"
    probe = f"sgp{secrets.token_hex(4)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces: `ip netns add` failed here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class NamespaceHosts:
    """n hosts on one bridge; hosts[i] is (namespace name, address). Use as a context manager."""

    def __init__(self, n: int):
        tag = secrets.token_hex(3)
        self.switch = f"sg{tag}sw"
        self.names = [f"sg{tag}h{i}" for i in range(n)]
        octet = 16 + secrets.randbelow(200)
        self.addresses = [f"10.{octet}.{octet}.{i + 1}" for i in range(n)]
        self._made: list[str] = []
        try:
            self._build(tag)
        except BaseException:
            self.close()
            raise

    def _build(self, tag: str) -> None:
        for name in (self.switch, *self.names):
            _ip("netns", "add", name)
            self._made.append(name)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (name, address) in enumerate(zip(self.names, self.addresses)):
            port = f"p{i}"
            _ip("link", "add", INTERFACE, "netns", name, "type", "veth", "peer", "name", port, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", INTERFACE)
            _ip("-n", name, "link", "set", INTERFACE, "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def command(self, host: int, argv: list[str]) -> list[str]:
        """argv run on host `host`."""
        return ["ip", "netns", "exec", self.names[host], *argv]

    def pids(self) -> list[int]:
        """Processes still running in any of the namespaces."""
        found: list[int] = []
        for name in self._made:
            out = _ip("netns", "pids", name, check=False).stdout
            found += [int(p) for p in out.split()]
        return found

    def close(self) -> list[int]:
        """Kill what runs in the namespaces, delete them (their veths and bridge go with them).
        Returns the pids that were still running (a test asserts on it where nothing should be)."""
        left = self.pids()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in reversed(self._made):
            _ip("netns", "del", name, check=False)
        self._made.clear()
        return left

    def __enter__(self) -> NamespaceHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
