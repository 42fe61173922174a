"""What listens where (issue 19, item 4; docs/security.md): rank 0's store on loopback only, unless
SIMGPU_STORE_HOST says otherwise."""
from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest

from simgpu.pool import Binding, RankPool

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net")


def listening_addresses(pid: int) -> list[str]:
    """host:port of every TCP socket process `pid` listens on (from its fds and /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            if family == socket.AF_INET6:
                raw = b"".join(struct.pack("<I", *struct.unpack(">I", raw[i:i + 4])) for i in range(0, 16, 4))
            else:
                raw = raw[::-1]
            found.append(f"{socket.inet_ntop(family, raw)}:{int(hex_port, 16)}")
    return found


def _rank0_listens(binding: Binding) -> list[str]:
    with RankPool(2, binding, timeout=60.0) as pool:
        return listening_addresses(pool.pids()[0])


def test_rank_zeros_store_listens_on_loopback_only() -> None:
    addresses = _rank0_listens(Binding("gloo", init_timeout=60.0))
    assert addresses, "rank 0 listens on nothing?"
    store = [a for a in addresses if a.startswith("127.0.0.1:")]
    assert store, addresses
    assert not [a for a in addresses if a.split(":")[0] in ("0.0.0.0", "::")], addresses  # no wildcard


def test_the_store_host_can_be_chosen_and_the_ranks_still_meet() -> None:
    binding = Binding("gloo", init_timeout=60.0, env=(("SIMGPU_STORE_HOST", "0.0.0.0"),))
    with RankPool(2, binding, timeout=60.0) as pool:
        assert [a for a in listening_addresses(pool.pids()[0]) if a.startswith("0.0.0.0:")]
        assert all(o.ok for o in pool.run(_all_reduce))  # rank 1 reached the store on loopback


def _all_reduce(ctx) -> float:
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()
