"""The warm template of a `simgpu run`: one process imports torch and starts the simulation once, then
forks a copy of itself for every Python process of the run that would otherwise do it again
(docs/warm-template.md has the design, the probes behind it and the limits).

The launcher starts it (`start()`) before the program, on a listening Unix socket in a private
directory, and names the socket in the program's environment. A process of the run asks for a fork
through simgpu/_boot/template_proxy.py and stands in for it. The fork becomes that process (its
arguments, environment, working directory, open files, limits, signal dispositions, standard
streams) and runs its program; the template reports the fork's exit status to its proxy, and
kills the fork when the proxy is gone. The template never starts a thread (a forked child would
inherit a broken copy of it: an OpenMP pool, gloo's loops, the strict check's issuer) and checks
that torch's import started none before it serves; forks die with it (parent-death signal), and it
dies with the launcher.

A process whose environment changes what importing torch did (a variable read while the template
imported torch, a library or interpreter setting read at load time), or whose interpreter or flags
differ, is refused with the reason: it then imports torch itself.
"""
from __future__ import annotations

import builtins
import ctypes
import gc
import os
import resource
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simgpu._boot import template_proxy as proxy

LISTEN_FD_ENV = "SIMGPU_TEMPLATE_LISTEN_FD"
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
CMDLINE_ROOM = 4096  # bytes of the template's argument area a fork may rewrite into its own command line
# Read by C code when a library loads (no Python read to record): a difference makes the fork unfaithful.
_LOAD_TIME_PREFIXES = ("LD_", "MALLOC_", "GLIBC_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO_",
                       "TORCH_CPP_", "PYTHON")
# ... except these, which the fork applies itself (or which the interpreter reads later, or which the
# request carries in another form: sys.path, the standard streams' settings).
_APPLIED = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONIOENCODING",
            "PYTHONDONTWRITEBYTECODE", "PYTHONINTMAXSTRDIGITS", "PYTHONFAULTHANDLER", "PYTHONBREAKPOINT",
            "PYTHONASYNCIODEBUG", "PYTHONSTARTUP"}
_SETTABLE_FLAGS = {"dont_write_bytecode", "int_max_str_digits", "safe_path", "quiet"}
WARM_IMPORTS = ("torch", "torch.distributed", "simgpu.backend", "torch.nn.parallel", "torch.distributed.fsdp",
                "torch.distributed.tensor", "torch.distributed.device_mesh", "torch.distributed.run")


# ----------------------------------------------------------------------------- launcher side
@dataclass
class Template:
    """A started template: its process and the environment entry that points the program at it."""

    process: subprocess.Popen
    address: str  # "@name": a socket in the abstract namespace (nothing on disk to leave behind)

    def environment(self) -> dict[str, str]:
        return {proxy.SOCKET_ENV: self.address}

    def close(self) -> None:
        """Kill the template (its forks die with it: parent-death signal)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start(env: dict[str, str]) -> Template:
    """Start a template for a run whose processes get `env`. It listens at once (connections wait in
    the backlog while it imports torch), so the program starts beside it, not after it. The socket is
    in the abstract namespace under a random name, and the template serves only this user's processes
    (SO_PEERCRED): nothing on disk that a killed launcher could leave behind."""
    address = f"@simgpu-template-{secrets.token_hex(16)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(proxy.socket_address(address))
        listener.listen(4096)
        entry = Path(__file__).resolve().parent / "_boot" / "template_main.py"
        child_env = {k: v for k, v in env.items() if k != proxy.SOCKET_ENV}
        child_env[LISTEN_FD_ENV] = str(listener.fileno())
        room = " " * CMDLINE_ROOM  # an argument that only reserves room: forks write their command line over it
        process = subprocess.Popen([sys.executable, str(entry), room], env=child_env, pass_fds=[listener.fileno()],
                                   start_new_session=True, stdin=subprocess.DEVNULL)
    finally:
        listener.close()  # the template holds it now: if it dies, waiting clients see the connection reset
    return Template(process, address)


# ----------------------------------------------------------------------------- the template process
@dataclass
class Warm:
    """What the template knows about itself once warm, to compare requests against."""

    env_read: dict[str, str | None]  # every variable the warm-up read (Python-level), with its value then
    env: dict[str, str]  # the template's environment before the warm-up
    env_changes: dict[str, str | None]  # what the warm-up's imports set (None: removed) in os.environ
    sys_path: list[str]
    flags: dict[str, Any]
    xoptions: dict[str, Any]
    warnoptions: list[str]
    limits: dict[str, list[int]]
    default_threads: int | None  # torch's intra-op threads with OMP/MKL_NUM_THREADS unset (None: they were set)
    threads_problem: str | None
    fds: set[int]  # descriptors the warm-up's imports opened (a fork keeps them)


def warm_up(imports: tuple[str, ...] = WARM_IMPORTS) -> None:
    """Import torch and simgpu and start the simulation (torch's import starts it: simgpu's
    sitecustomize), while template_main records which environment variables the imports read."""
    import importlib

    from simgpu.cuda_sim import deferred_imports

    deferred_imports.hold()  # these imports are the simulation's too: hidden from the forks' programs
    for name in imports:
        importlib.import_module(name)
    import simgpu.cuda_sim

    if not simgpu.cuda_sim.active():
        simgpu.cuda_sim.activate()
    deferred_imports.release()


def describe(reads: dict[str, str | None], initial_env: dict[str, str], library_threads: int) -> Warm:
    """What a fork may differ in from this warm template.

    library_threads: the threads the process had before torch (its own, numpy's OpenBLAS pool, which
    OpenBLAS stops before a fork and starts again after it); torch's import must add none."""
    import torch

    threads = len(os.listdir("/proc/self/task"))
    problem = None
    if threads > library_threads:
        problem = (f"the template has {threads - library_threads} more thread(s) after importing torch than before "
                   "(a fork would inherit a broken copy)")
    default = torch.get_num_threads() if _thread_count(initial_env) is None else None
    changed = {k: os.environ.get(k) for k in set(initial_env) | set(os.environ)
               if initial_env.get(k) != os.environ.get(k) and k != LISTEN_FD_ENV}
    reads = {k: v for k, v in reads.items() if k != LISTEN_FD_ENV}  # the template's own descriptor, popped in main
    return Warm(reads, dict(initial_env), changed, list(sys.path), proxy._flags(), dict(sys._xoptions),
                list(sys.warnoptions), _limits(), default, problem, set())


def _limits() -> dict[str, list[int]]:
    out = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                out[name] = list(resource.getrlimit(getattr(resource, name)))
            except (ValueError, OSError):
                pass
    return out


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd") if _is_open(int(n))}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def refusal(warm: Warm, req: dict) -> str | None:
    """Why this template cannot become the requesting process (None: it can)."""
    if warm.threads_problem:
        return warm.threads_problem
    if req.get("protocol") != proxy.PROTOCOL:
        return "it speaks another version of the template's protocol"
    if (os.path.realpath(req["executable"]) != os.path.realpath(sys.executable) or req["prefix"] != sys.prefix
            or req["version"] != sys.version):
        return f"its interpreter ({req['executable']}, {req['prefix']}) is not the template's ({sys.executable})"
    for name, value in req["flags"].items():
        if name not in _SETTABLE_FLAGS and warm.flags.get(name) != value:
            return f"interpreter flag {name}={value!r} differs from the template's ({warm.flags.get(name)!r})"
    if req["xoptions"] != warm.xoptions:
        return f"-X options {req['xoptions']} differ from the template's {warm.xoptions}"
    if req["warnoptions"] != warm.warnoptions:
        return f"warning options {req['warnoptions']} differ from the template's {warm.warnoptions}"
    if req["sys_path"] != warm.sys_path:
        return "its sys.path differs from the template's (PYTHONPATH or site directories)"
    env = req["env"]
    for key, value in warm.env_read.items():
        set_by_import = key in warm.env_changes and env.get(key) == warm.env_changes[key]  # by a parent's import
        if env.get(key) != value and key not in _APPLIED and not set_by_import:
            return f"{key}={env.get(key)!r} differs from the template's {value!r} (read while torch was imported)"
    for key in sorted(set(env) | set(warm.env)):
        if key.startswith(_LOAD_TIME_PREFIXES) and key not in _APPLIED and env.get(key) != warm.env.get(key):
            return f"{key}={env.get(key)!r} differs from the template's {warm.env.get(key)!r} (read when libraries load)"
    if _thread_count(env) is None and _thread_count(warm.env) is not None:
        return ("OMP_NUM_THREADS/MKL_NUM_THREADS are unset here but set in the template (torch's default thread "
                "count is unknown there)")
    for name, (_, hard) in req["limits"].items():
        mine = warm.limits.get(name)
        if mine is not None and _above(hard, mine[1]):
            return f"its hard limit {name}={hard} is above the template's ({mine[1]})"
    clash = {fd for fd, _ in req["fds"]} & (warm.fds - {0, 1, 2})
    if clash:
        return f"its open descriptors {sorted(clash)} are taken in the template"
    return None


def _above(limit: int, other: int) -> bool:
    infinity = resource.RLIM_INFINITY
    return other != infinity and (limit == infinity or limit > other)


def _thread_count(env: dict[str, str]) -> int | None:
    """torch's intra-op thread count for this environment (ATen: MKL_NUM_THREADS over OMP_NUM_THREADS),
    None when neither gives a positive number."""
    for key in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        text = env.get(key, "").strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


@dataclass
class Job:
    """What a fork runs: the request it became, once its process state is set."""

    request: dict


def serve(listener: socket.socket, warm: Warm) -> Job:
    """Serve forks until the launcher goes; returns only in a fork, as the process it has become."""
    server = _Server(listener, warm)
    while True:
        for key, _ in server.sel.select():
            job = server.handle(key.data, key.fileobj)
            if job is not None:
                return job


class _Server:
    """The template's single-threaded loop: new connections, forks' exits (SIGCHLD), proxies that go."""

    def __init__(self, listener: socket.socket, warm: Warm):
        self.listener, self.warm = listener, warm
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "reap")
        self.forks: dict[int, socket.socket] = {}  # pid -> its proxy's connection

    def handle(self, what: Any, fileobj: Any) -> Job | None:
        if what == "accept":
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return None
            return self.answer(conn)
        if what == "reap":
            _drain(self.wake_r)
            self.reap()
            return None
        _kill_fork(what)  # a proxy's connection became readable: the proxy is gone (it never writes again)
        self.sel.unregister(fileobj)
        return None

    def answer(self, conn: socket.socket) -> Job | None:
        """Read one request; refuse it, or fork. In the fork: a Job. In the template: None."""
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
                conn.close()
                return None
            conn.settimeout(10.0)
            req, fds = proxy.recv_message(conn, max_fds=proxy.MAX_FDS)
        except (OSError, ValueError):
            conn.close()
            return None
        if req is None:
            conn.close()
            return None
        why = refusal(self.warm, req)
        if why is None and len(fds) != len(req["fds"]):
            why = f"{len(fds)} of its {len(req['fds'])} open descriptors arrived"
        if why is not None:
            _close_all(fds)
            try:
                proxy.send_message(conn, {"refused": why})
            except OSError:
                pass
            conn.close()
            return None
        with warnings.catch_warnings():  # Python 3.12+ warns of a fork with threads: here only OpenBLAS's pool
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            self.close_in_fork(conn)
            try:
                _become(req, fds, self.warm)
            except BaseException as exc:  # noqa: BLE001 - the fork must not go on as half of another process
                os.write(2, f"simgpu run: the warm template could not become {' '.join(req['orig_argv'])[:200]}: "
                            f"{type(exc).__name__}: {exc}; `simgpu run --no-template` starts every process on its "
                            f"own\n".encode(errors="replace"))
                os._exit(proxy.EXIT_NOT_SIMULATED)
            return Job(req)
        _close_all(fds)
        try:
            conn.settimeout(None)
            proxy.send_message(conn, {"pid": pid})
        except OSError:
            _kill_fork(pid)  # its proxy is gone already
            conn.close()
            return None
        self.forks[pid] = conn
        self.sel.register(conn, selectors.EVENT_READ, pid)
        return None

    def close_in_fork(self, conn: socket.socket) -> None:
        """The template's own descriptors, closed through their owners (a later close of a stale owner
        would close whatever the program opened under the same number)."""
        signal.set_wakeup_fd(-1)
        self.sel.close()
        self.listener.close()
        for other in self.forks.values():
            other.close()
        conn.close()
        _close(self.wake_r)
        _close(self.wake_w)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.forks.pop(pid, None)
            if conn is None:
                continue
            try:
                self.sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                proxy.send_message(conn, {"status": status})
            except OSError:
                pass
            conn.close()


def _kill_fork(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        _close(fd)


# ----------------------------------------------------------------------------- in the fork
def _become(req: dict, received: list[int], warm: Warm) -> None:
    """Turn this fresh fork into the requesting process, as far as a process can after it started."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(1)
    _set_command_line(req["orig_argv"], req["comm"], libc)
    _install_fds(req["fds"], received, warm.fds)
    os.environ.clear()
    os.environ.update(req["env"])
    for key, value in warm.env_changes.items():  # what importing torch set in a fresh process's environment
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    try:
        os.sched_setaffinity(0, req["affinity"])
    except OSError:
        pass  # CPUs this process may no longer use: the template's set stands
    for name, (soft, hard) in req["limits"].items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError):
            pass
    if req["priority"] != os.getpriority(os.PRIO_PROCESS, 0):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, req["priority"])
        except OSError:
            pass
    _signals(req)
    sys.executable = req["executable"]
    sys.argv[:] = req["argv"]
    sys.orig_argv[:] = req["orig_argv"]
    sys.path[:] = ([req["path0"]] if req["path0"] is not None else []) + req["sys_path"]
    sys.dont_write_bytecode = req["dont_write_bytecode"]
    sys.set_int_max_str_digits(req["int_max_str_digits"])
    _stdio(req["stdio"])
    threads = _thread_count(req["env"])
    if threads is not None and threads != (_thread_count(warm.env) or warm.default_threads):
        import torch

        torch.set_num_threads(threads)  # read when the OpenMP runtime loaded: in the template, not here
    _fresh_randomness()
    if req["env"].get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    import importlib

    importlib.invalidate_caches()


def _set_command_line(argv: list[str], comm: str, libc: Any) -> None:
    """What ps and /proc/<pid>/cmdline show: the requesting process's command line (written over the
    template's argument area, truncated to it) and name, not the template's."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of stat
    data = b"\0".join(os.fsencode(a) for a in argv)[:end - start - 1]
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)
    libc.prctl(_PR_SET_NAME, comm.encode()[:15], 0, 0, 0)


def _install_fds(wanted: list[list[int]], received: list[int], library_fds: set[int]) -> None:
    """The requesting process's descriptors at their own numbers, with their close-on-exec flags; every
    other descriptor closed but those the warm-up's imports opened (a fresh process would have them)."""
    open_now = [int(n) for n in os.listdir("/proc/self/fd")]
    top = max([fd for fd, _ in wanted] + open_now + [2]) + 1
    moved = []
    for index, fd in enumerate(received):
        os.dup2(fd, top + index, inheritable=False)
        os.close(fd)
        moved.append(top + index)
    for fd in open_now:
        if fd not in library_fds and fd not in moved:
            _close(fd)
    for (target, inheritable), source in zip(wanted, moved):
        os.dup2(source, target, inheritable=bool(inheritable))
        os.close(source)


def _signals(req: dict) -> None:
    ignored = set(req["ignored_signals"])
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if sig in ignored:
                signal.signal(sig, signal.SIG_IGN)
            elif sig == signal.SIGINT:
                signal.signal(sig, signal.default_int_handler)
            else:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, req["blocked_signals"])


def _stdio(specs: list[dict | None]) -> None:
    """Standard streams as the requesting interpreter built them (encoding, buffering, -u)."""
    import io

    for fd, name, mode, spec in zip((0, 1, 2), ("stdin", "stdout", "stderr"), ("r", "w", "w"), specs):
        if spec is None or not _is_open(fd):
            setattr(sys, name, None)
            setattr(sys, f"__{name}__", None)
            continue
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = f"<{name}>"
        buffered = raw if spec["raw"] else (io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw))
        stream = io.TextIOWrapper(buffered, encoding=spec["encoding"], errors=spec["errors"], newline="\n",
                                  line_buffering=spec["line_buffering"], write_through=spec["write_through"])
        stream.mode = mode
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _fresh_randomness() -> None:
    """What a fresh interpreter draws from the OS at start-up, drawn again (`random` does it itself at fork)."""
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is not None:
        mp_process.current_process().authkey = os.urandom(32)
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()


def run(job: Job) -> None:
    """Run the program as the interpreter would have: a fresh __main__, its exit status, and a traceback
    that starts at the program's own code; then end as a multiprocessing child does (`_finish`)."""
    req = job.request
    kind, target = req["kind"], req["target"]
    try:
        if kind == "module":
            import runpy

            runpy._run_module_as_main(target, alter_argv=True)  # what `python -m` itself calls
            _finish(0)
        main = types.ModuleType("__main__")
        main.__dict__.update(__builtins__=builtins, __annotations__={}, __package__=None, __spec__=None)
        import importlib.machinery

        if kind == "script":
            path = os.path.abspath(target)
            main.__dict__.update(__file__=path, __cached__=None,
                                 __loader__=importlib.machinery.SourceFileLoader("__main__", path))
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec", dont_inherit=True)
        else:
            main.__loader__ = importlib.machinery.BuiltinImporter
            code = compile(target, "<string>", "exec", dont_inherit=True)
        sys.modules["__main__"] = main
        exec(code, main.__dict__)
    except SystemExit as stop:
        _finish(_exit_status(stop.code))
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter reports it
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        sys.excepthook(type(exc), exc, tb)
        _finish(1, by_sigint=isinstance(exc, KeyboardInterrupt))
    _finish(0)


def _exit_status(code: Any) -> int:
    """SystemExit's code as the interpreter turns it into an exit status (other objects: printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


def _finish(status: int, by_sigint: bool = False) -> None:
    """End the fork as a multiprocessing child ends: non-daemon threads joined and threading's exit
    hooks run (concurrent.futures), atexit handlers (weakref.finalize, logging), every open file
    flushed, C stdio flushed; then exit without the interpreter's teardown. The teardown walks every
    module and, with the heap frozen, every object the fork shares with the template: it copied those
    pages and took 2.9 s against 0.5 s per rank (load 12), and it reports the frozen objects of
    nanobind extensions (triton) as leaked. Objects still alive at exit do not run __del__."""
    import atexit
    import io
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined] - what the interpreter calls first at exit
    except Exception:  # noqa: BLE001
        pass
    atexit._run_exitfuncs()
    for obj in gc.get_objects():  # the fork's own objects (frozen ones are not listed): unclosed files
        if isinstance(obj, io.IOBase):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # noqa: BLE001 - a file that cannot flush is left as the teardown would leave it
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001
            pass
    ctypes.CDLL(None).fflush(None)
    if by_sigint:  # an uncaught KeyboardInterrupt ends the interpreter by SIGINT (bpo-1054041)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    os._exit(status)


def main(warm: Warm) -> None:
    """The template process once warm (simgpu/_boot/template_main.py): serve; a fork runs its program."""
    listener = socket.socket(fileno=int(os.environ.pop(LISTEN_FD_ENV)))
    warm.fds = _fds() - {0, 1, 2, listener.fileno()}
    gc.freeze()  # the forks share these objects' pages: a collection in a fork must not write to them all
    run(serve(listener, warm))
