"""Run under `simgpu run` (started by template_fidelity.py): print, as JSON, what a process can see of how
it was started, so that a fork of the warm template and a fresh interpreter can be compared fact by fact."""
import json
import os
import signal
import sys
import warnings

import torch

PER_RUN = {"SIMGPU_TEMPLATE_SOCKET", "SIMGPU_RUN_ID", "SIMGPU_GROUP_SECRET", "SIMGPU_STRICT_TIMEOUT"}


def fds():
    out = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor
        kind = target.split(":")[0] if ":" in target else ("null" if target == os.devnull else "file")
        out.append([fd, os.get_inheritable(fd), kind])
    return out


def stream(s):
    return None if s is None else [s.encoding, s.errors, s.line_buffering, s.write_through,
                                   not hasattr(s.buffer, "raw"), s.name if hasattr(s, "name") else None]


main = sys.modules["__main__"]
parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read()
facts = {
    "served": b"template_main" in parent,
    "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0], "path": sys.path[1:],
    "main": {k: type(v).__name__ if k in ("__loader__", "__spec__", "__builtins__") else v
             for k, v in vars(main).items() if k.startswith("__") and k != "__doc__"},
    "executable": sys.executable, "flags": [sys.flags.optimize, sys.dont_write_bytecode, sys.flags.safe_path],
    "cwd": os.getcwd(), "umask": (lambda m: (os.umask(m), m)[1])(os.umask(0)),
    "env": {k: v for k, v in os.environ.items() if k not in PER_RUN},
    "fds": fds(), "stdio": [stream(sys.stdin), stream(sys.stdout), stream(sys.stderr)],
    "stdin": sys.stdin.readline() if not sys.stdin.isatty() else None,
    "ignored": sorted(int(s) for s in signal.valid_signals()
                      if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) == signal.SIG_IGN),
    "sigint": repr(signal.getsignal(signal.SIGINT)), "blocked": sorted(map(int, signal.pthread_sigmask(signal.SIG_BLOCK, []))),
    "nofile": list(__import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)),
    "affinity": sorted(os.sched_getaffinity(0)), "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "torch": [torch.get_num_threads(), torch.cuda.device_count(), torch.ones(1, device="cuda:1").device.index],
    "warning_filters": len(warnings.filters),
    "authkey_differs_from_template": None,
}
print(json.dumps(facts, sort_keys=True), flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if len(sys.argv) > 1 and sys.argv[1] == "raise":
    def inner():
        raise ValueError("boom from the program")
    inner()
if len(sys.argv) > 1 and sys.argv[1] == "kill":
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
