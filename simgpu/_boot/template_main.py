"""Entry point of a `simgpu run`'s warm template process (simgpu/template.py, started by the launcher).

Stdlib only until the recording starts: which environment variables the warm-up's imports read (and
what they found) is what a fork's environment may not change, so every read from the first import on
is recorded (os.environ's class swapped for a recording one), numpy's first, to count its BLAS
threads on their own.
"""
import ctypes
import os
import signal
import sys

ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the template dies with the launcher
if os.getppid() == 1:
    os._exit(1)
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this script's directory: a worker's sys.path has its own script's directory there

initial_env = dict(os.environ)
reads = {}


class _RecordingEnviron(os._Environ):
    """os.environ that remembers the variables read (with their value then, None when unset)."""

    def __getitem__(self, key):
        try:
            value = super().__getitem__(key)
        except KeyError:
            reads.setdefault(key, None)
            raise
        reads.setdefault(key, value)
        return value


os.environ.__class__ = _RecordingEnviron
try:
    import numpy  # noqa: F401 - torch loads it anyway; first, to count OpenBLAS's pool alone
except ImportError:
    pass
library_threads = len(os.listdir("/proc/self/task"))
try:
    from simgpu import template  # imports torch: the simulation starts (simgpu's sitecustomize)

    template.warm_up()
finally:
    os.environ.__class__ = os._Environ
template.main(template.describe(reads, initial_env, library_threads))
