"""Ranks started by torchrun (any number of hosts) that serve a RankPool in a pytest controller.

    # on the controller's host (rank 0's host):
    SIMGPU_ATTACH_KEY=<secret> pytest conformance --backend=nccl --attach 0.0.0.0:29400 --attach-world-size 16
    # on every node:
    SIMGPU_ATTACH_KEY=<secret> torchrun --nnodes 2 --nproc-per-node 8 --max-restarts 100 \\
        --rdzv-backend c10d --rdzv-endpoint HOST0:29500 --rdzv-id suite -m simgpu.attach --controller HOST0:29400

Each rank process connects back to the controller twice (calls; diagnostics), proves it knows
SIMGPU_ATTACH_KEY (the calls carry pickled functions), then runs simgpu.rank's loop: the same
rank body as a forked pool rank, with the process group initialised from torchrun's environment
(env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and the GPU picked by LOCAL_RANK.

The controller side is a rank source for the one RankPool (AttachedRanks): the pool's deadlines,
stack dumps and error collection work unchanged. Ranks cannot be killed from the controller, so a
rank exits when its controller connection closes; the pool replaces broken ranks by dropping them
and waiting for torchrun to restart the group (--max-restarts). docs/multinode.md has the details.
"""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge, wait
from typing import Any, Callable

from simgpu.pool import Binding, RankPoolError, _Rank

KEY_ENV = "SIMGPU_ATTACH_KEY"
GENERATION_ENV = "SIMGPU_ATTACH_GENERATION"  # which start of the pool a rank's process group belongs to
RESTART_CONNECT_TIMEOUT = 60.0  # seconds a restarted rank looks for its controller
HANDSHAKE_TIMEOUT = 15.0  # seconds a connection may take, in all, to authenticate and say who it is
MAX_HANDSHAKES = 64  # connections authenticating at once; more wait in the listen backlog (delayed, never refused)
_STACK, _BYE = b"S", b"B"  # controller -> rank on the diag channel


class AttachError(RuntimeError):
    """A one-line reason why the attached ranks cannot be used (bad address, no key, bad environment)."""


class ControllerUnreachable(AttachError):
    """No controller answered at the address within the connect timeout."""


def attach_key(env: dict[str, str] | None = None) -> bytes:
    """The shared secret both sides prove they hold before any pickled call is accepted."""
    value = (env if env is not None else os.environ).get(KEY_ENV, "")
    if not value:
        raise AttachError(f"set {KEY_ENV} to the same secret for the controller and every torchrun node "
                          f"(e.g. export {KEY_ENV}=$(python -c 'import secrets; print(secrets.token_hex(16))'))")
    return value.encode()


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 as [::1]:PORT) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise AttachError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _tune(sock: socket.socket, recv_timeout: float) -> None:
    """Keepalive (a vanished peer is noticed in about a minute) and a kernel receive timeout (0: none)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    whole = int(recv_timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, int((recv_timeout - whole) * 1e6)))


def _untimed(conn: Connection) -> Connection:
    """Lift the handshake's receive timeout: from here on the pool's own deadlines apply."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        _tune(sock, 0)
    return conn


# ----------------------------------------------------------------------------- controller side
@dataclass
class RemoteProcess:
    """Handle of an attached rank (the pool's process handle): it lives on another host or under torchrun."""

    host: str
    pid: int
    conn: Connection
    diag: Connection
    stack_wait = 1.0

    def sentinels(self) -> list[Any]:
        return []  # a dead rank shows as end-of-file on its calls connection

    def is_alive(self) -> bool:
        """Connected and not at end-of-file (peeked, so a pending reply stays for the pool to read)."""
        if self.conn.closed:
            return False
        try:
            with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
                return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def join(self, timeout: float) -> None:
        """After a polite close: tell the rank this is the end (it exits 0), then wait for it to hang up."""
        self._send(_BYE)
        wait([self.conn], timeout)

    def exit_note(self) -> str:
        return f"hung up (pid {self.pid} on {self.host}: exited, was killed, or the network dropped)"

    def request_stack(self) -> None:
        self._send(_STACK)  # the rank signals itself; faulthandler writes to the diag connection

    def kill(self) -> None:
        """Closing both connections (the pool does) makes the rank exit; torchrun may then restart the group."""

    def _send(self, byte: bytes) -> None:
        try:
            os.write(self.diag.fileno(), byte)
        except OSError:
            pass


class AttachedRanks:
    """A rank source for RankPool: listens on HOST:PORT and waits for torchrun's ranks to connect.

    A background thread accepts and authenticates connections as they come (a rank never waits
    for the pool to start); launch() takes a full world from them. One listener serves every
    (re)start of the pool: after a break the pool drops its ranks, they exit, torchrun restarts
    them (one of --max-restarts) and they connect again.
    """

    def __init__(self, address: str, *, key: bytes | None = None, connect_timeout: float = 300.0,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT):
        self.address = address
        self.handshake_timeout = handshake_timeout
        self._handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self.key = key if key is not None else attach_key()
        self.connect_timeout = connect_timeout
        host, port = parse_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = socket.create_server((host, port), family=family, backlog=256)
        except OSError as exc:
            raise AttachError(f"cannot listen on {address} for attached ranks: {exc.strerror or exc}") from None
        self.port = self._server.getsockname()[1]
        self.address = f"{host}:{self.port}"
        self._arrived: queue.Queue[tuple[Connection, dict]] = queue.Queue()
        self._gave_up: str | None = None
        self.starts = 0
        threading.Thread(target=self._accept_forever, name="simgpu-attach-accept", daemon=True).start()

    def close(self) -> None:
        """Stop listening and hang up on ranks that connected but were never used."""
        self._server.close()
        while not self._arrived.empty():
            self._arrived.get_nowait()[0].close()

    def launch(self, world_size: int, binding: Binding) -> list[_Rank]:
        """Wait (connect_timeout) for `world_size` ranks, each with a calls and a diag connection."""
        if self._gave_up:
            raise RankPoolError("start failure", self._gave_up, [], [], {}, [None] * world_size)
        deadline = time.monotonic() + self.connect_timeout
        got: dict[tuple[int, str], tuple[Connection, dict]] = {}
        generation = -1
        while len(got) < 2 * world_size:
            try:
                conn, info = self._arrived.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                have = sorted({r for r, role in got if role == "calls"})
                missing = sorted(set(range(world_size)) - set(have))
                for conn, _ in got.values():
                    conn.close()
                self._gave_up = (f"ranks {missing} of {world_size} did not connect to {self.address} within "
                                 f"{self.connect_timeout:.0f}s (connected: {have}); is torchrun running "
                                 f"`-m simgpu.attach --controller HOST:{self.port}` with {KEY_ENV} set, "
                                 f"and are its --max-restarts used up?")
                raise RankPoolError("start failure", self._gave_up, missing, have, {}, [None] * world_size)
            if info["world_size"] != world_size:
                conn.close()
                self._gave_up = (f"torchrun started WORLD_SIZE={info['world_size']} ranks, but the pool "
                                 f"wants {world_size} (--attach-world-size)")
                raise RankPoolError("start failure", self._gave_up, [], [], {}, [None] * world_size)
            if info["restart"] > generation:  # torchrun restarted the group: older connections are stale
                for old, _ in got.values():
                    old.close()
                got, generation = {}, info["restart"]
            elif info["restart"] < generation:
                conn.close()
                continue
            previous = got.pop((info["rank"], info["role"]), None)
            if previous is not None:
                previous[0].close()
            got[(info["rank"], info["role"])] = (conn, info)
        ranks = []
        for r in range(world_size):
            conn, info = got[(r, "calls")]
            diag = got[(r, "diag")][0]
            ranks.append(_Rank(r, RemoteProcess(info["host"], info["pid"], conn, diag), conn, diag))
        return ranks

    def handshake(self, ranks: list[_Rank], binding: Binding, expect: Callable[[int, str, float], Any]) -> None:
        """Every rank learns the binding and initialises its process group from torchrun's environment."""
        self.starts += 1
        binding = dataclasses.replace(binding, env=(*binding.env, (GENERATION_ENV, str(self.starts))))
        for rk in ranks:
            rk.conn.send(("init", binding))

    def _accept_forever(self) -> None:
        """Accept connections; each authenticates on its own thread, so a silent or slow peer delays nobody.

        With MAX_HANDSHAKES in progress, the next connection is accepted when one of them ends (each is
        bounded by handshake_timeout): it waits in the listen backlog meanwhile, delayed, never refused
        (issue 28: 100 silent peers used to get real ranks refused); a rank retries a handshake that its
        own bound cut off (`_connect`)."""
        while True:
            if not self._handshakes.acquire(blocking=False):
                print(f"simgpu.attach: {MAX_HANDSHAKES} handshakes in progress; further connections wait until "
                      f"one ends (at most {self.handshake_timeout:g} s)", file=sys.stderr)
                self._handshakes.acquire()
            try:
                sock, peer = self._server.accept()
            except OSError:
                return  # the listener was closed
            threading.Thread(target=self._handshake, args=(sock, peer[0]), name="simgpu-attach-handshake",
                             daemon=True).start()

    def _handshake(self, sock: socket.socket, peer: str) -> None:
        try:
            arrived = self._authenticate(sock, peer)
        finally:
            self._handshakes.release()
        if arrived is not None:
            self._arrived.put(arrived)

    def _authenticate(self, sock: socket.socket, peer: str) -> tuple[Connection, dict] | None:
        """The connection and its hello, or None for a stranger, a wrong key or a silent or slow peer.

        The whole handshake has one bound (handshake_timeout): a peer that trickles bytes is cut off
        at it too (the socket is shut down under the reading thread)."""
        _tune(sock, self.handshake_timeout)
        conn = Connection(sock.detach())
        step = ["waiting for its answer to our challenge"]
        expired = threading.Event()

        def cut_off() -> None:
            expired.set()
            try:
                s = socket.socket(fileno=os.dup(conn.fileno()))
            except OSError:  # the handshake ended and closed the connection as the timer fired: nothing to cut
                return
            with s:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(self.handshake_timeout, cut_off)
        timer.start()
        try:
            deliver_challenge(conn, self.key)
            step[0] = "waiting for its challenge"
            answer_challenge(conn, self.key)
            step[0] = "reading its hello"
            info = conn.recv()
            if not (isinstance(info, dict) and {"rank", "role", "world_size", "restart", "host", "pid"} <= set(info)):
                raise ValueError(f"not a simgpu.attach hello: {info!r:.80}")
        except Exception as exc:  # noqa: BLE001 - a bad peer must not stop the pool from starting
            why = _handshake_failure(exc, expired.is_set(), step[0], self.handshake_timeout)
            print(f"simgpu.attach: refused a connection from {peer}: {why}", file=sys.stderr)
            conn.close()
            return None
        finally:
            timer.cancel()
        return _untimed(conn), info


def _handshake_failure(exc: BaseException, expired: bool, step: str, bound: float) -> str:
    """What happened to a handshake, in words: the bound, a wrong key, a hang-up, or what was sent."""
    if expired or isinstance(exc, (socket.timeout, BlockingIOError)):
        return f"the handshake did not finish within {bound:g} s (stuck {step})"
    if isinstance(exc, AuthenticationError):
        return f"wrong key while {step} (not the same {KEY_ENV}?): {exc}"
    if isinstance(exc, (EOFError, ConnectionError)):
        return f"the peer closed the connection while {step}"
    return f"{type(exc).__name__} while {step}: {exc}"


# ----------------------------------------------------------------------------- rank side
def _connect(host: str, port: int, key: bytes, deadline: float, hello: dict) -> Connection:
    """Connect and handshake, again until `deadline` when the controller is not up yet or its answer does
    not come within HANDSHAKE_TIMEOUT (its handshakes were all taken: the connection waited in its backlog)."""
    while True:
        try:
            return _connect_once(host, port, key, deadline, hello)
        except _HandshakeTimedOut:
            if time.monotonic() > deadline:
                raise AttachError(f"the controller at {host}:{port} accepted the connection but did not finish the "
                                  f"handshake within {HANDSHAKE_TIMEOUT:g} s, until the deadline") from None
            time.sleep(0.2)


class _HandshakeTimedOut(Exception):
    """The controller did not answer within HANDSHAKE_TIMEOUT (busy, or not a simgpu controller)."""


def _connect_once(host: str, port: int, key: bytes, deadline: float, hello: dict) -> Connection:
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5.0)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ControllerUnreachable(f"cannot reach the controller at {host}:{port}: {exc.strerror or exc}") from None
            time.sleep(0.2)
    sock.settimeout(None)
    _tune(sock, HANDSHAKE_TIMEOUT)
    conn = Connection(sock.detach())
    try:
        answer_challenge(conn, key)
        deliver_challenge(conn, key)
        conn.send(hello)
    except (BlockingIOError, socket.timeout):
        conn.close()
        raise _HandshakeTimedOut() from None
    except (EOFError, ConnectionError):
        conn.close()
        raise AttachError(f"the controller at {host}:{port} closed the connection during the handshake "
                          "(it refused this rank: see its stderr)") from None
    return _untimed(conn)


class _Controller:
    """The rank's view of its controller: the calls connection, plus the diag channel's lifeline.

    rank_main reads calls through recv(); when the controller hangs up without a goodbye (it broke
    the pool), the rank exits 1 so that torchrun counts a failure and restarts the group, instead
    of 0, which would end this node's part of the run.
    """

    def __init__(self, conn: Connection, diag: Connection, rank: int, where: str):
        self.conn, self.diag, self.rank, self.where = conn, diag, rank, where
        self.closing = False
        self._leaving = threading.Lock()

    def send(self, obj: Any) -> None:
        self.conn.send(obj)

    def recv(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.hung_up()

    def hung_up(self) -> None:
        if self._leaving.acquire(blocking=False) and not self.closing:  # said once, by whichever thread saw it
            print(f"simgpu.attach: rank {self.rank} lost the controller at {self.where}; exiting",
                  file=sys.stderr, flush=True)
        os._exit(0 if self.closing else 1)

    def lifeline(self) -> None:
        """Stack requests and the goodbye come on the diag channel; its end means the controller is gone."""
        while True:
            try:
                byte = os.read(self.diag.fileno(), 1)
            except OSError:
                byte = b""
            if byte == _STACK:
                os.kill(os.getpid(), signal.SIGUSR1)
            elif byte == _BYE:
                self.closing = True
            elif not byte:
                self.hung_up()


def _init_from_env(rank: int, world_size: int, binding: Binding, conn: Connection) -> Any:
    """The attached rank's process group: env:// from torchrun, the GPU of LOCAL_RANK (replaces rank._init)."""
    import importlib

    import torch
    import torch.distributed as dist
    from torch.distributed.rendezvous import rendezvous

    from simgpu.rank import RankContext

    for name, value in binding.env:
        os.environ[name] = value
    if binding.backend_module:
        importlib.import_module(binding.backend_module)
    if binding.backend == "sim":
        importlib.import_module("simgpu.backend")
    device = torch.device("cpu")
    kwargs: dict[str, Any] = {}
    if binding.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    timeout = timedelta(seconds=binding.init_timeout)
    store, _, _ = next(rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout))
    # torchrun's store outlives a restart of the group: keys of earlier starts must not be read again
    store = dist.PrefixStore(f"simgpu-attach/{os.environ.get(GENERATION_ENV, '0')}/", store)
    dist.init_process_group(binding.backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
    return RankContext(rank, world_size, binding.backend, device)


def _torchrun_env(env: dict[str, str]) -> tuple[int, int, int]:
    missing = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(name)]
    if missing:
        raise AttachError(f"{', '.join(missing)} not set: start simgpu.attach with torchrun "
                          "(torchrun ... -m simgpu.attach --controller HOST:PORT)")
    return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])


def main(argv: list[str] | None = None) -> int:
    """Entry point of one torchrun worker: connect back, then serve the controller's calls until closed."""
    parser = argparse.ArgumentParser(prog="python -m simgpu.attach", description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True, metavar="HOST:PORT",
                        help="where the pytest controller listens (its --attach address, as seen from this node)")
    parser.add_argument("--connect-timeout", type=float, default=300.0,
                        help="seconds to keep trying to reach the controller (default 300)")
    args = parser.parse_args(argv)
    from simgpu import rank as rank_module

    rank_module._die_with_parent()  # gone with torchrun's agent, even while still connecting
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    try:
        host, port = parse_address(args.controller)
        rank, world_size, local_rank = _torchrun_env(dict(os.environ))
        key = attach_key()
        # a restarted group follows a controller that just dropped it: one that does not answer is gone
        wait_s = min(args.connect_timeout, RESTART_CONNECT_TIMEOUT) if restart else args.connect_timeout
        hello = {"rank": rank, "world_size": world_size, "local_rank": local_rank, "host": socket.gethostname(),
                 "pid": os.getpid(), "restart": restart}
        conn = _connect(host, port, key, time.monotonic() + wait_s, {**hello, "role": "calls"})
        diag = _connect(host, port, key, time.monotonic() + wait_s, {**hello, "role": "diag"})
    except AuthenticationError:
        print(f"simgpu.attach: the controller at {args.controller} refused {KEY_ENV} (not the same secret?)",
              file=sys.stderr)
        return 2
    except (AttachError, OSError, EOFError) as exc:
        if restart and isinstance(exc, ControllerUnreachable):
            # exit 0, so that torchrun ends here instead of restarting the group against nobody
            print(f"simgpu.attach: {exc}; the controller is gone, ending", file=sys.stderr)
            return 0
        print(f"simgpu.attach: {exc}", file=sys.stderr)
        return 2
    faulthandler.register(signal.SIGUSR1, file=diag.fileno(), all_threads=True)  # before any stack request
    controller = _Controller(conn, diag, rank, args.controller)
    threading.Thread(target=controller.lifeline, name="simgpu-lifeline", daemon=True).start()
    tag, binding = controller.recv()
    if tag != "init":
        print(f"simgpu.attach: expected the controller's init, got {tag!r}", file=sys.stderr)
        return 2
    # simgpu.rank owns the rank loop; an attached rank differs only in how its process group starts.
    rank_module._init = _init_from_env
    rank_module.rank_main(rank, world_size, binding, controller, diag)  # never returns (os._exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
