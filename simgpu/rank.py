"""The body of one rank process: initialise the process group once, then serve calls.

Runs inside processes forked by the pool's fork server (torch already imported there).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import importlib
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _in_forkserver_preload() -> bool:
    """True while the fork server imports this module (its preload), in no other process."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    frame = sys._getframe(1)
    while forkserver is not None and frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def _remove_forkserver_socket(pid: int, controller: int) -> None:
    """At the fork server's exit, remove its socket and the controller's pymp-* directory if now empty.

    The fork server exits when the last controller holding its pipe is gone. A controller that
    exits normally removes that directory itself; one that was SIGKILLed cannot, and the
    directory (with the listener socket) would stay in /tmp for good. A controller that is still
    alive (it stopped the fork server itself) keeps its directory: removing it under it would make
    its own clean-up at exit fail.
    """
    if os.getpid() != pid:
        return
    if controller != 1:  # 1: the controller was already gone when this fork server started
        deadline = time.monotonic() + 1.0  # a dying controller's children are re-parented within moments
        while os.getppid() == controller and time.monotonic() < deadline:
            time.sleep(0.01)
        if os.getppid() == controller:
            return
    from multiprocessing import forkserver, util

    address = forkserver._forkserver._forkserver_address
    if isinstance(address, str) and address and not util.is_abstract_socket_namespace(address):
        with contextlib.suppress(OSError):
            os.unlink(address)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(address))  # only if empty: never another user's files


def _warm_fork_server() -> None:
    """In the pool's fork server, after its preload (torch, the sim backend, the GPU simulation's
    modules when its ranks simulate GPUs): freeze the heap, so that every rank shares these pages
    instead of touching them all at its first garbage collection. SIMGPU_NO_TEMPLATE=1: as before."""
    if os.environ.get("SIMGPU_NO_TEMPLATE") != "1":
        import gc

        gc.freeze()


if _in_forkserver_preload():
    atexit.register(_remove_forkserver_socket, os.getpid(), os.getppid())
    _warm_fork_server()


def _die_with_parent() -> None:
    """Own session (so the pool can kill our whole tree), SIGKILL when the fork server dies, and child
    subreaper (what we start in a new session or by a double fork stays our descendant)."""
    try:
        os.setsid()
    except OSError:
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a double fork's orphan stays below us: the pool finds it
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # parent already gone before prctl took effect
        os._exit(1)


class RankContext:
    """What a function running on a rank gets: its rank, the world, its device, cached subgroups."""

    def __init__(self, rank: int, world_size: int, backend: str, device: Any):
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self._groups: dict[tuple[int, ...], Any] = {}
        self.scratch: dict[str, Any] = {}

    def group(self, ranks: tuple[int, ...] | None) -> Any:
        """The process group of `ranks` (None: the default group).

        Every rank must call this with the same ranks in the same order (new_group is collective);
        groups are cached, so repeated examples reuse them.
        """
        import torch.distributed as dist

        if ranks is None or tuple(ranks) == tuple(range(self.world_size)):
            return None
        key = tuple(ranks)
        if key not in self._groups:
            self._groups[key] = dist.new_group(list(key))
        return self._groups[key]


def _init(rank: int, world_size: int, binding: Any, conn: Any) -> RankContext:
    import torch
    import torch.distributed as dist

    for key, value in binding.env:
        os.environ[key] = value
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if binding.backend_module:
        importlib.import_module(binding.backend_module)
    if binding.backend == "sim":
        importlib.import_module("simgpu.backend")
    if rank == 0:
        store = listening_store(world_size, timedelta(seconds=binding.init_timeout))
        conn.send(("store_port", store.port))
    else:
        tag, port = conn.recv()
        assert tag == "store_port", tag
        store = dist.TCPStore(_store_address(), port, world_size, False, timedelta(seconds=binding.init_timeout))
    device = torch.device("cpu")
    kwargs: dict[str, Any] = {}
    backend = binding.backend
    if binding.device == "simulated-cuda":  # the simulator, seen as one GPU per rank (simgpu.cuda_sim)
        import simgpu.cuda_sim

        simgpu.cuda_sim.activate(world_size)
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        backend = "nccl" if backend == "sim" else backend  # "nccl" is the sim held to NCCL's placement
    elif binding.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=binding.init_timeout), **kwargs)
    return RankContext(rank, world_size, binding.backend, device)


STORE_HOST_ENV = "SIMGPU_STORE_HOST"  # where rank 0's store listens; default 127.0.0.1 (loopback only)


def listening_store(world_size: int, timeout: timedelta) -> Any:
    """Rank 0's TCPStore, listening on loopback only (torch's own server binds every interface, IPv4
    and IPv6, whatever host it is given): the socket is bound here and handed over. SIMGPU_STORE_HOST
    names another address (said on stderr, since anyone who reaches it can use the store)."""
    import socket

    import torch.distributed as dist

    host = os.environ.get(STORE_HOST_ENV, "").strip() or "127.0.0.1"
    if host != "127.0.0.1":
        print(f"simgpu: rank 0's store listens on {host} ({STORE_HOST_ENV}); anyone who reaches it can read and "
              "write the process group's keys", file=sys.stderr, flush=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(1024)
        port = sock.getsockname()[1]
    except OSError as exc:
        sock.close()
        raise OSError(f"simgpu: rank 0 cannot listen on {host} ({STORE_HOST_ENV}): {exc}") from None
    fd = sock.detach()  # the store owns the listening socket from here on
    try:
        return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=False, master_listen_fd=fd)
    except RuntimeError:  # a torch whose libuv server refuses a listening socket: its classic server takes it
        try:
            return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=False,
                                 master_listen_fd=fd, use_libuv=False)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise


def _store_address() -> str:
    """Where ranks 1.. reach rank 0's store (a wildcard listening address is reached on loopback)."""
    host = os.environ.get(STORE_HOST_ENV, "").strip() or "127.0.0.1"
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


class BackgroundThreadError(RuntimeError):
    """A thread the rank started died with an exception: the call fails even if its function returned."""


_thread_errors: list[str] = []


def _record_thread_error(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "?"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    _thread_errors.append(f"thread {name!r}: {text}")
    _default_excepthook(args)


def _raise_thread_errors() -> None:
    """Fail the call that was running when a background thread died (reported once)."""
    if _thread_errors:
        errors = list(_thread_errors)
        _thread_errors.clear()
        first = errors[0].strip().splitlines()
        raise BackgroundThreadError(f"{len(errors)} background thread(s) died; {first[0]} {first[-1]}\n"
                                    + "\n".join(errors))


_default_excepthook = threading.excepthook


def rank_main(rank: int, world_size: int, binding: Any, conn: Any, diag: Any) -> None:
    """Entry point of a rank process (target of the pool's Process)."""
    _die_with_parent()
    threading.excepthook = _record_thread_error
    faulthandler.register(signal.SIGUSR1, file=diag.fileno(), all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    try:
        ctx = _init(rank, world_size, binding, conn)
    except BaseException as exc:  # noqa: BLE001 - reported to the controller, then exit
        conn.send(("init_error", f"{type(exc).__name__}: {safe_str(exc)}", traceback.format_exc()))
        os._exit(3)
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if msg[0] == "close":
            break
        if msg[0] == "quiesce":
            _quiesce(conn, *msg[1:])
            continue
        _serve(ctx, conn, *msg[1:])
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        os._exit(0)


def _serve(ctx: RankContext, conn: Any, call_id: int, payload: bytes) -> None:
    """Run one call and send exactly one reply tagged with its number, whatever the function does."""
    start = time.perf_counter()
    try:
        fn, args = pickle.loads(payload)  # here, not in recv: a function this rank cannot import is its error
        value = fn(ctx, *args)
        _raise_thread_errors()
        conn.send(("ok", call_id, value, time.perf_counter() - start, {"pending": unfinished_operations()}))
    except BaseException as exc:  # noqa: BLE001 - every rank's exception goes back to the controller
        details = {"missing_ranks": getattr(exc, "missing_ranks", None), "pending": unfinished_operations()}
        reply = ("err", call_id, _qualname(type(exc)), safe_str(exc), traceback.format_exc(),
                 time.perf_counter() - start, bool(getattr(exc, "poisons_process_group", False)), details)
        try:
            conn.send(reply)
        except Exception as send_exc:  # noqa: BLE001 - an unpicklable value or exception
            conn.send(("err", call_id, _qualname(type(send_exc)), f"could not send result: {safe_str(send_exc)}",
                       traceback.format_exc(), time.perf_counter() - start, False, None))


def unfinished_operations() -> list[str]:
    """The sim backend's collectives and point-to-point ops of this process still pending (issued, not
    ended), as "call at file:line"; none where the sim backend is not in use."""
    backend = sys.modules.get("simgpu.backend")
    return backend.unfinished_operations() if backend is not None else []


def _quiesce(conn: Any, call_id: int, grace: float) -> None:
    """Every rank has returned from the call: wait up to `grace` seconds for this rank's pending ops to
    end (a peer matched them and they are still running) and answer with those that did not."""
    start = time.perf_counter()
    deadline = time.monotonic() + grace
    left = unfinished_operations()
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = unfinished_operations()
    conn.send(("ok", call_id, left, time.perf_counter() - start))


def safe_str(exc: BaseException) -> str:
    """str(exc), or a note naming its type when its __str__ itself raises (the rank must still answer)."""
    try:
        return str(exc)
    except BaseException as inner:  # noqa: BLE001
        try:
            inner_text = f"{type(inner).__name__}: {inner}"
        except BaseException:  # noqa: BLE001
            inner_text = type(inner).__name__
        return f"<{_qualname(type(exc))}: its __str__ raised {inner_text}>"


def _qualname(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
