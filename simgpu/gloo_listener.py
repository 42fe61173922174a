"""Close a sim group's gloo listener to strangers once its ranks are connected (issue 28, item 8).

Why: gloo's TCP listener (gloo/transport/tcp/listener.cc, Listener::handleEvents) accepts every
connection and reads an 8-byte sequence number through a one-shot ReadValueOperation
(gloo/transport/tcp/helpers.h). That operation is registered with the device's event loop by
shared_ptr, and Loop::registerDescriptor (gloo/transport/tcp/loop.cc) keeps it in `handlers_`, keyed
by fd, until the same fd is registered again or unregistered. A real peer's socket is re-registered by
its Pair, which drops the operation; a stranger's is not: when it closes, the read fails, the
listener's callback returns ("if (error) return;"), and the operation -- holding the socket -- stays
in `handlers_` for the device's life. One CLOSE-WAIT descriptor per stranger, never released.

Closing those descriptors from here is not safe: gloo's Socket would close the same number again
when the stale handler is finally dropped (the next registration of that fd number, which by then
may be a real pair's socket). So the descriptors are never created: a sim group's gloo pairs are all
connected when ProcessGroupGloo's constructor returns (the full mesh, not lazy), after which nothing
connects to its listener again; simgpu then attaches a socket filter that drops every packet to the
listening socket. New connection attempts see no answer (as behind a firewall that drops); the pairs
already accepted are separate sockets and do not inherit a filter attached later. gloo still owns and
closes the listener; only its input is filtered. What would no longer connect: a second context on
the same device, as ProcessGroupGloo::split makes; sim groups never split their gloo (torch's
split_group on a simulated parent makes a new group, simgpu/cuda_sim/distributed.py; each new group gets its
own device).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

_SOL_SOCKET = 1
_SO_ATTACH_FILTER = 26
_SO_ACCEPTCONN = 30
_BPF_RET_K = 0x06  # BPF_RET | BPF_K: "return k bytes of the packet"; k = 0 drops it


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def open_sockets() -> set[tuple[int, int]]:
    """(fd, inode) of this process's open sockets; the inode tells a socket from a later one that
    reuses its number. Empty where /proc/self/fd is missing (then nothing is sealed)."""
    found = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile (listdir's own descriptor among them)
                target = os.readlink(f"/proc/self/fd/{name}")
                if target.startswith("socket:["):
                    found.add((int(name), int(target[8:-1])))
    return found


def _is_listening(fd: int) -> bool:
    value = ctypes.c_int(0)
    size = ctypes.c_uint32(ctypes.sizeof(value))
    rv = _libc.getsockopt(fd, _SOL_SOCKET, _SO_ACCEPTCONN, ctypes.byref(value), ctypes.byref(size))
    return rv == 0 and value.value == 1


def drop_new_connections(fd: int) -> None:
    """Attach a drop-everything filter to listening socket `fd` (the fd stays open, owned by its owner)."""
    program = (_SockFilter * 1)(_SockFilter(_BPF_RET_K, 0, 0, 0))
    fprog = _SockFprog(1, program)
    if _libc.setsockopt(fd, _SOL_SOCKET, _SO_ATTACH_FILTER, ctypes.byref(fprog), ctypes.sizeof(fprog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"simgpu: cannot filter gloo's listening socket (fd {fd}): {os.strerror(err)}")


def seal_new_listener(before: set[tuple[int, int]]) -> int | None:
    """Filter the one listening socket opened since `before` (gloo's, for the group just connected).

    Returns its fd, or None (said on stderr) when there is not exactly one: another thread of the
    program opened a listener at the same time, and which is gloo's cannot be told, so none is touched.
    """
    if not sys.platform.startswith("linux"):  # socket filters, /proc: Linux only
        return None
    new = sorted(fd for fd, _ in open_sockets() - before if _is_listening(fd))
    if len(new) != 1:
        print(f"simgpu: {len(new)} listening sockets opened while a sim group connected (expected gloo's one); "
              "left unfiltered, so a stranger's connection to them keeps a descriptor", file=sys.stderr, flush=True)
        return None
    drop_new_connections(new[0])
    return new[0]
