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


# ----------------------------------------------------------------------------- strict-check records
def _checkers(monkeypatch: pytest.MonkeyPatch, secret: str | None):
    import torch.distributed as dist

    from simgpu import strict

    if secret is None:
        monkeypatch.delenv(strict.SECRET_ENV, raising=False)
    else:
        monkeypatch.setenv(strict.SECRET_ENV, secret)
    store = dist.HashStore()
    return store, [strict.StrictChecker(store, r, 2, default_timeout=5.0) for r in range(2)]


def _all_reduce_call():
    from simgpu.strict import Call

    return Call("all_reduce", "all_reduce(float32[4], SUM)", agree={"numel": 4, "dtype": "float32", "op": "SUM"},
                site="here.py:1")


FORGED = ('{"op":"broadcast","seq":1,"rank":1,"site":"attacker.py:1","text":"broadcast(float32[4], src=0)",'
          '"agree":{"numel":4,"dtype":"float32","src":0},"send":null,"recv":null}')


def test_signed_records_agree_between_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    store, (c0, c1) = _checkers(monkeypatch, "s3cret")
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(1, c1.check(_all_reduce_call())))
    t.start()
    got[0] = c0.check(_all_reduce_call())
    t.join(30)
    assert [d["rank"] for d in got[0]] == [0, 1] and got[0] == got[1]
    assert store.get("simgpu/strict/1/0").decode().rsplit("|", 1)[1]  # a MAC after the JSON


def test_a_record_written_from_outside_the_group_is_refused_not_taken_as_a_ranks_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from simgpu import strict

    store, (c0, _) = _checkers(monkeypatch, "s3cret")
    store.set("simgpu/strict/1/1", FORGED)  # an outsider who reached the store, without the secret
    with pytest.raises(strict.ForgedRecord, match=r"'simgpu/strict/1/1' .* not signed with this group's secret"):
        c0.check(_all_reduce_call())
    forged_mac = FORGED + "|" + "0" * 64
    store2, (d0, _) = _checkers(monkeypatch, "s3cret")
    store2.set("simgpu/strict/1/1", forged_mac)
    with pytest.raises(strict.ForgedRecord):
        d0.check(_all_reduce_call())


def test_pools_and_simgpu_run_give_their_ranks_a_secret() -> None:
    from simgpu.settings import GROUP_SECRET_ENV

    with RankPool(2, Binding("gloo", init_timeout=60.0), timeout=60.0) as pool:
        secrets_seen = [o.value for o in pool.run(_secret)]
    assert secrets_seen[0] and secrets_seen[0] == secrets_seen[1] and len(secrets_seen[0]) == 32
    assert GROUP_SECRET_ENV not in os.environ  # the controller's own environment is untouched


def _secret(ctx) -> str:
    from simgpu.settings import GROUP_SECRET_ENV

    return os.environ.get(GROUP_SECRET_ENV, "")


# ----------------------------------------------------------------------------- the --attach controller
def test_attach_authenticates_concurrently_and_cuts_slow_peers_off_naming_why(capsys: pytest.CaptureFixture) -> None:
    import threading
    import time

    from simgpu import attach

    ranks = attach.AttachedRanks("127.0.0.1:0", key=b"the-key", handshake_timeout=5.0)
    stop = threading.Event()
    try:
        silent = socket.create_connection(("127.0.0.1", ranks.port))  # connects, never says a word
        trickler = socket.create_connection(("127.0.0.1", ranks.port))

        def trickle() -> None:  # announces a 200-byte answer, then sends it a byte now and then
            trickler.sendall(struct.pack("!i", 200))
            while not stop.is_set():
                try:
                    trickler.sendall(b"\0")
                except OSError:
                    return
                stop.wait(0.3)

        threading.Thread(target=trickle, daemon=True).start()
        hello = {"rank": 0, "role": "calls", "world_size": 1, "restart": 0, "host": "here", "pid": os.getpid()}
        real = attach._connect("127.0.0.1", ranks.port, b"the-key", time.monotonic() + 30, hello)
        conn, info = ranks._arrived.get(timeout=30)
        assert info["rank"] == 0 and info["role"] == "calls"
        assert "refused" not in capsys.readouterr().err  # served while both strangers were still connected
        for stranger in (silent, trickler):  # both are cut off at the bound, whatever they send
            stranger.settimeout(60)
            while True:
                try:
                    if not stranger.recv(4096):
                        break
                except ConnectionError:
                    break
        deadline = time.monotonic() + 30
        err = ""
        while err.count("did not finish within 5 s") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
        assert err.count("simgpu.attach: refused a connection from 127.0.0.1: the handshake did not finish "
                         "within 5 s") == 2, err
        real.close()
        conn.close()
    finally:
        stop.set()
        ranks.close()


def test_attach_names_a_wrong_key() -> None:
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent('''
        import os, time
        from multiprocessing import AuthenticationError
        from simgpu import attach
        ranks = attach.AttachedRanks("127.0.0.1:0", key=b"right", handshake_timeout=10.0)
        hello = {"rank": 0, "role": "calls", "world_size": 1, "restart": 0, "host": "h", "pid": os.getpid()}
        try:
            attach._connect("127.0.0.1", ranks.port, b"wrong", time.monotonic() + 10, hello)
        except AuthenticationError:
            pass
        time.sleep(1.0)  # let the controller's thread print before this process exits
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert "simgpu.attach: refused a connection from 127.0.0.1: wrong key while" in done.stderr, done.stderr


def test_a_forged_blocked_on_record_cannot_make_a_false_p2p_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    from simgpu import strict
    from simgpu.p2p_pairs import PairRendezvous

    store, (c0, _) = _checkers(monkeypatch, "s3cret")
    pairs = PairRendezvous(store, 0, signer=c0)
    store.set(pairs._waiting(1), "0|send|attacker.py:1")  # "rank 1 is blocked on rank 0", unsigned
    with pytest.raises(strict.ForgedRecord, match="not signed with this group's secret"):
        pairs._waits_for(1)
    store.set(pairs._waiting(1), c0.seal(pairs._waiting(1), "0|send|ring.py:7"))  # what a rank of the group writes
    assert pairs._waits_for(1) == (0, "send", "ring.py:7")


def test_attach_delays_real_ranks_behind_a_hundred_silent_peers_never_refuses_them(
        capsys: pytest.CaptureFixture) -> None:
    """Issue 28: 100 silent connections once filled the 64 handshake slots and real ranks were refused."""
    import time

    from simgpu import attach

    ranks = attach.AttachedRanks("127.0.0.1:0", key=b"the-key", handshake_timeout=2.0)
    silent = []
    try:
        silent = [socket.create_connection(("127.0.0.1", ranks.port)) for _ in range(100)]
        hello = {"rank": 0, "role": "calls", "world_size": 1, "restart": 0, "host": "here", "pid": os.getpid()}
        real = attach._connect("127.0.0.1", ranks.port, b"the-key", time.monotonic() + 60, hello)
        conn, info = ranks._arrived.get(timeout=60)
        assert info["rank"] == 0 and info["role"] == "calls"
        err = capsys.readouterr().err
        assert "64 handshakes in progress; further connections wait" in err, err[-2000:]
        assert "handshakes already in progress" not in err
        real.close()
        conn.close()
    finally:
        for s in silent:
            s.close()
        ranks.close()


# ----------------------------------------------------------------------------- gloo's listener
def _open_fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _knock(address: str, times: int) -> int:
    """Open `times` connections to host:port at once, give them 1 s, close them; how many got through."""
    import select
    import time

    host, port = address.rsplit(":", 1)
    socks = []
    try:
        for _ in range(times):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            socks.append(s)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            select.select([], socks, [], max(0.0, deadline - time.monotonic()))
        return sum(1 for s in socks if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                   and _connected(s))
    finally:
        for s in socks:
            s.close()


def _connected(s: socket.socket) -> bool:
    try:
        s.getpeername()
        return True
    except OSError:
        return False


def test_strangers_knocking_on_a_ranks_gloo_listener_leave_no_descriptors_and_the_group_works() -> None:
    """Issue 28, item 8: 50 connections to a rank's gloo listener that then closed stayed open in the
    rank (CLOSE-WAIT, 18 -> 68 fds): gloo keeps a stranger's socket (simgpu/gloo_listener.py says
    where). Now the listener drops new connection attempts once the group is connected."""
    import time

    with RankPool(2, Binding("sim", init_timeout=60.0), timeout=60.0) as pool:
        assert [o.value for o in pool.run(_all_reduce)] == [2.0, 2.0]
        pid = pool.pids()[1]  # rank 1 listens only for gloo (rank 0 also serves the store)
        gloo = listening_addresses(pid)
        assert gloo, "rank 1 listens on nothing?"
        before = _open_fd_count(pid)
        through = sum(_knock(address, 50) for address in gloo)
        time.sleep(0.5)  # a leaked descriptor would be there by now (accept runs on gloo's loop thread)
        after = _open_fd_count(pid)
        assert through == 0, f"{through} connections to rank 1's gloo listener {gloo} were accepted"
        assert after - before <= 2, f"rank 1: {before} -> {after} open descriptors after 50 connections"
        assert [o.value for o in pool.run(_all_reduce)] == [2.0, 2.0]  # the pairs already connected still work
