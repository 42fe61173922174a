"""The client side of `simgpu run`'s warm template (simgpu/template.py; docs/warm-template.md).

simgpu's sitecustomize calls `serve_or_continue()` in every Python process of a run. For a process
that would import torch as its rank does (a torchrun worker, a multiprocessing child, a script,
module or -c code that imports torch) it asks the template, a process that has already imported
torch and started the simulation, for a forked copy of itself that runs this process's program
with this process's arguments, environment, working directory and open files. This process then
stands in for that copy (a proxy): it forwards the signals it gets and exits as the copy exits, so
whoever started it (torchrun's agent, mp.spawn, subprocess) waits on it as on the program itself.

A process the template cannot serve faithfully (another interpreter, other interpreter flags, an
environment that changes what importing torch did) runs as before, importing torch itself, and
says why on stderr in one line. SIMGPU_NO_TEMPLATE=1 in a process's environment asks for that.

Stdlib only, and nothing heavy: this runs in every Python process of the run, before its program.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import sys

SOCKET_ENV = "SIMGPU_TEMPLATE_SOCKET"  # set by the launcher: where the run's template listens ("@name")
OFF_ENV = "SIMGPU_NO_TEMPLATE"  # "1": this process (and what it starts) imports torch itself
PROTOCOL = 1
MAX_FDS = 250  # SCM_RIGHTS takes at most 253 descriptors per message
START_WAIT_S = 600.0  # the template may still be importing torch on a loaded machine
EXIT_NOT_SIMULATED = 3
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGCONT, signal.SIGWINCH)
_IMPORTS_TORCH = re.compile(rb"(?:^|;)[ \t]*(?:import[ \t]+[\w., \t]*\btorch\b|from[ \t]+torch[ \t.])", re.M)
_HEADER = struct.Struct("!I")


# ----------------------------------------------------------------------------- wire format (shared with the template)
def socket_address(address: str) -> str:
    """SIMGPU_TEMPLATE_SOCKET's "@name" is a name in Linux's abstract socket namespace."""
    return "\0" + address[1:] if address.startswith("@") else address


def send_message(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    """A length-prefixed JSON message; the descriptors travel with the header (SCM_RIGHTS)."""
    data = json.dumps(message).encode()
    header = _HEADER.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def recv_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """(message, descriptors); (None, []) when the peer closed the connection first."""
    header, fds = b"", []
    while len(header) < _HEADER.size:
        if max_fds and not fds:
            chunk, got, _, _ = socket.recv_fds(sock, _HEADER.size - len(header), max_fds)
            fds += got
        else:
            chunk = sock.recv(_HEADER.size - len(header))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        header += chunk
    (size,) = _HEADER.unpack(header)
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        data += chunk
    return json.loads(data), fds


# ----------------------------------------------------------------------------- what this process is
def program() -> tuple[str, str] | None:
    """("script", path) / ("module", name) / ("code", text) this interpreter is about to run; None when
    it runs nothing the template can start (interactive, stdin, a directory or zip archive)."""
    argv, orig = sys.argv, getattr(sys, "orig_argv", None)
    if not argv or orig is None or sys.flags.inspect or sys.flags.interactive or len(orig) <= len(argv):
        return None
    given = orig[-len(argv)]  # the element the interpreter took its program from
    before = orig[-len(argv) - 1]
    if argv[0] in ("-c", "-m"):
        letter = argv[0][1]
        if re.fullmatch(rf"-[bBdEhiIOPqsSuvx]*{letter}", before):
            target = given
        else:
            match = re.fullmatch(rf"-[bBdEhiIOPqsSuvx]*{letter}(.+)", given, re.S)
            if match is None:
                return None
            target = match.group(1)
        return ("code", target) if letter == "c" else ("module", target)
    if argv[0] in ("", "-") or given != argv[0] or not os.path.isfile(argv[0]):
        return None
    return "script", argv[0]


def wants_template(kind: str, target: str, env: dict) -> bool:
    """Whether this process is one the template is for: a torchrun worker, a multiprocessing child
    (its code comes from a parent that imported torch), or a program that imports torch itself.
    Others (tools, helpers) never import torch here and must not find it loaded."""
    if env.get("TORCHELASTIC_RUN_ID") is not None:
        return True
    if kind == "code":
        return ("--multiprocessing-fork" in sys.argv or "multiprocessing.forkserver import main" in target
                or bool(_IMPORTS_TORCH.search(target.encode())))
    if kind == "module":
        if target.split(".")[0] == "torch":
            return True
        path = _module_source(target)
        return path is not None and _source_imports_torch(path)
    return _source_imports_torch(target)


def _source_imports_torch(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return bool(_IMPORTS_TORCH.search(f.read(1 << 22)))
    except OSError:
        return False


def _module_source(name: str) -> str | None:
    """The file `python -m name` runs, found without importing anything (a parent package's import
    could import torch here, in the proxy)."""
    from importlib.machinery import PathFinder

    parts = name.split(".")
    spec = PathFinder.find_spec(parts[0], [_path0("module"), *sys.path])
    if spec is None or spec.origin is None:
        return None
    base = os.path.dirname(spec.origin) if spec.submodule_search_locations else None
    if len(parts) == 1:
        return os.path.join(base, "__main__.py") if base else spec.origin
    if base is None:
        return None
    candidate = os.path.join(base, *parts[1:])
    for path in (candidate + ".py", os.path.join(candidate, "__main__.py")):
        if os.path.isfile(path):
            return path
    return None


def _path0(kind: str, target: str = "") -> str | None:
    """What the interpreter puts first on sys.path after site (CPython's rules), or None (-P)."""
    if sys.flags.safe_path:
        return None
    if kind == "script":
        return os.path.dirname(os.path.realpath(target))
    return os.getcwd() if kind == "module" else ""


def _stream(stream) -> dict | None:
    if stream is None:
        return None
    return {"encoding": stream.encoding, "errors": stream.errors, "line_buffering": stream.line_buffering,
            "write_through": stream.write_through, "raw": not hasattr(stream.buffer, "raw")}


def _open_fds() -> list[list[int]]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            os.fstat(fd)
        except OSError:
            continue  # the directory listing's own descriptor, closed by now
        fds.append([fd, int(os.get_inheritable(fd))])
    return sorted(fds)


def request(kind: str, target: str) -> dict:
    """Everything the template's fork needs to become this process."""
    import resource

    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                limits[name] = list(resource.getrlimit(getattr(resource, name)))
            except (ValueError, OSError):
                pass
    ignored = [int(s) for s in signal.valid_signals()
               if s not in (signal.SIGKILL, signal.SIGSTOP) and _ignored(s)]
    return {
        "protocol": PROTOCOL, "kind": kind, "target": target, "argv": sys.argv, "orig_argv": sys.orig_argv,
        "path0": _path0(kind, target), "sys_path": sys.path, "env": dict(os.environ), "cwd": os.getcwd(),
        "comm": _comm(), "executable": sys.executable, "prefix": sys.prefix, "version": sys.version, "flags": _flags(), "xoptions": sys._xoptions,
        "warnoptions": sys.warnoptions, "dont_write_bytecode": sys.dont_write_bytecode,
        "int_max_str_digits": sys.get_int_max_str_digits(),
        "stdio": [_stream(sys.stdin), _stream(sys.stdout), _stream(sys.stderr)],
        "umask": _umask(), "affinity": sorted(os.sched_getaffinity(0)), "limits": limits,
        "priority": os.getpriority(os.PRIO_PROCESS, 0), "ignored_signals": ignored,
        "blocked_signals": [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])],
    }


def _comm() -> str:
    try:
        with open("/proc/self/comm") as f:
            return f.read().strip()
    except OSError:
        return "python"


def _flags() -> dict:
    names = [n for n in dir(sys.flags) if not n.startswith("_") and n not in ("count", "index", "n_fields",
                                                                               "n_sequence_fields", "n_unnamed_fields")]
    return {n: getattr(sys.flags, n) for n in names}


def _ignored(sig: int) -> bool:
    try:
        return signal.getsignal(sig) == signal.SIG_IGN
    except (ValueError, OSError):
        return False


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


# ----------------------------------------------------------------------------- the proxy
def serve_or_continue() -> None:
    """Run this process's program in a fork of the template and exit as it exits; return (the
    process goes on as usual) when no template serves this run or it cannot serve this process."""
    address = os.environ.get(SOCKET_ENV)
    if not address or os.environ.get(OFF_ENV) == "1":
        return
    found = program()
    if found is None or not wants_template(*found, os.environ):
        return
    fds = _open_fds()
    if len(fds) > MAX_FDS:
        return _notice(f"it has {len(fds)} open files (the template takes at most {MAX_FDS})")
    message = request(*found)
    message["fds"] = fds
    early = _EarlySignals()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_address(address))
        sock.settimeout(START_WAIT_S)
        send_message(sock, message, [fd for fd, _ in fds])
        reply, _ = recv_message(sock)
    except (OSError, socket.timeout) as exc:
        _fail(f"the run's warm template ({address}) did not answer: {exc}")
    if reply is None:
        _fail("the run's warm template exited before it could start this process (its message is above)")
    if "refused" in reply:
        sock.close()
        early.restore()
        return _notice(reply["refused"])
    try:
        _stand_in(sock, int(reply["pid"]), early, [fd for fd, _ in fds])
    except BaseException as exc:  # noqa: BLE001 - once the fork runs the program, this process must not
        _fail(f"the proxy of pid {reply['pid']} failed: {type(exc).__name__}: {exc}")


class _EarlySignals:
    """Until the fork exists, a signal ends this process as it would have ended a fresh interpreter still
    starting up; the template then kills the fork it may have just made (this connection closed)."""

    def __init__(self) -> None:
        self.saved = {}
        for sig in FORWARDED:
            if sig != signal.SIGCONT and not _ignored(sig):
                self.saved[sig] = signal.signal(sig, self._die)

    @staticmethod
    def _die(sig: int, _frame) -> None:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    def restore(self) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def _stand_in(sock: socket.socket, pid: int, early: _EarlySignals, fds: list[int]) -> None:
    """Forward signals to the fork and exit with its status. A proxy that leads its own process group
    (torchrun's workers do: the agent kills a worker with killpg) forwards to the fork's group too."""
    leader = os.getpgid(0) == os.getpid()

    def forward(sig: int, _frame) -> None:
        try:
            os.killpg(pid, sig) if leader else os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in early.saved:
        signal.signal(sig, forward)
    if not _ignored(signal.SIGCONT):
        signal.signal(signal.SIGCONT, forward)
    _release(fds)
    sock.settimeout(None)
    try:
        reply, _ = recv_message(sock)
    except OSError:
        reply = None
    if reply is None:
        _fail(f"the run's warm template died while it ran this process (pid {pid}), which died with it")
    status = int(reply["status"])
    sys.stdout.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _release(fds: list[int]) -> None:
    """Let go of the files the fork now holds, so that a pipe's reader sees its end when the fork
    closes it; stderr stays, for this proxy's own last words."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd in (0, 1):
            os.dup2(null, fd)
        elif fd != 2 and fd != null:
            try:
                os.close(fd)
            except OSError:
                pass
    os.close(null)


def _notice(why: str) -> None:
    sys.stderr.write(f"simgpu run: {' '.join(sys.orig_argv)[:200]} starts without the warm template "
                     f"(imports torch itself): {why}\n")
    sys.stderr.flush()


def _fail(why: str) -> None:
    sys.stderr.write(f"simgpu run: {why}; `simgpu run --no-template` starts every process on its own\n")
    sys.stderr.flush()
    os._exit(EXIT_NOT_SIMULATED)
