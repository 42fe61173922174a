"""Run under `simgpu run` (no torch here: this parent is not served): start process_facts.py the ways
a program starts its ranks, with inherited descriptors, an ignored signal, a blocked one, a umask, a
lower file limit, OMP_NUM_THREADS, -u, stdin data, another working directory; print every child's
facts and exit status, and its stderr, one JSON line each."""
import json
import os
import resource
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FACTS = os.path.join(HERE, "process_facts.py")


def prepare():
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    os.umask(0o027)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def start(args, env=None, cwd=None, extra_fd=False, **kwargs):
    r, w = os.pipe()
    fds = (r,) if extra_fd else ()
    done = subprocess.run([sys.executable, *args], input="a line on stdin\n", capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, pass_fds=fds, preexec_fn=prepare, timeout=300,
                          **kwargs)
    os.close(r)
    os.close(w)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    tail = [ln for ln in done.stderr.splitlines() if "starts without the warm template" not in ln]
    return {"args": args, "facts": json.loads(lines[0]) if lines else None, "code": done.returncode,
            "stderr": tail[-6:], "notices": [ln for ln in done.stderr.splitlines() if "warm template" in ln]}


cases = [
    start([FACTS]),
    start(["-u", FACTS, "exit", "7"], env={"OMP_NUM_THREADS": "1"}, extra_fd=True),
    start(["-m", "process_facts", "raise"], cwd=HERE),
    start(["-c", "import torch, runpy, sys; sys.argv[1:] = ['kill', 'SIGTERM']; runpy.run_path(%r)" % FACTS],
          env={"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"}, cwd="/"),
    start([FACTS], env={"PYTHONHASHSEED": "123"}),  # not servable: refused, says why, runs as before
]
for case in cases:
    print(json.dumps(case, sort_keys=True), flush=True)
