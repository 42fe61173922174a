"""`simgpu run`'s warm template (simgpu/template.py, docs/warm-template.md): a fork of the template is the
process it stands in for, every way a program starts ranks is served, and nothing outlives a run that
used it, whoever is killed (the launcher, the template, a proxy) or interrupted."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from simgpu import reaper
from tests.processes import run_bounded
from tests.tiers import first_then_full

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "sim_scripts"
MARK = "SIMGPU_TEST_MARK"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def simgpu_run(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", "2", *args]
    return run_bounded(cmd, timeout, cwd=ROOT, env={**os.environ, **(env or {})})


def _cases(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_a_fork_of_the_template_is_the_process_it_stands_in_for() -> None:
    """Each way of starting process_facts.py (a script, -u with an inherited pipe and OMP_NUM_THREADS=1,
    -m raising, -c killed by SIGTERM after setting MKL/OMP_NUM_THREADS, another working directory,
    an ignored SIGUSR1, a blocked SIGUSR2, umask 027, 512 open files) sees the same facts, exit status
    and traceback served from the template as started fresh (--no-template); a PYTHONHASHSEED the
    template cannot take is refused, says why, and runs fresh."""
    served = _cases(simgpu_run(str(SCRIPTS / "template_fidelity.py")))
    fresh = _cases(simgpu_run("--no-template", str(SCRIPTS / "template_fidelity.py")))
    assert len(served) == len(fresh) == 5
    for case_served, case_fresh in zip(served, fresh):
        facts_served, facts_fresh = case_served["facts"], case_fresh["facts"]
        for facts in (facts_served, facts_fresh):
            facts["main"].pop("__warningregistry__", None)  # the warnings module's mutation counter
        assert facts_fresh["served"] is False
        assert facts_served.pop("served") is (case_served is not served[-1]), case_served["args"]
        facts_fresh.pop("served")
        assert facts_served == facts_fresh, case_served["args"]
        assert (case_served["code"], case_served["stderr"]) == (case_fresh["code"], case_fresh["stderr"])
    assert [c["code"] for c in served] == [0, 7, 1, -signal.SIGTERM, 0]
    assert served[2]["stderr"][-1] == "ValueError: boom from the program"
    assert not any("template.py" in line for line in served[2]["stderr"]), served[2]["stderr"]
    assert served[1]["facts"]["torch"][0] == 1 and served[3]["facts"]["torch"][0] == 1  # OMP=1; MKL=1 over OMP=2
    assert served[4]["notices"] == [
        f"simgpu run: {sys.executable} {SCRIPTS / 'process_facts.py'} starts without the warm template (imports "
        "torch itself): PYTHONHASHSEED='123' differs from the template's None (read when libraries load)"]
    assert all(not c["notices"] for c in served[:4] + fresh)


@pytest.mark.parametrize("flags", first_then_full([(), ("--no-template",)], ["template", "no-template"]))
def test_every_way_a_program_starts_its_ranks_is_served(flags: tuple[str, ...]) -> None:
    """mp.spawn, a forkserver Process, subprocess and torchrun's workers: forks of the template (and
    none of them with --no-template). A process that never imports torch is not served:
    test_simgpu_run.py::test_a_process_that_never_imports_torch_does_not_load_it."""
    done = simgpu_run(*flags, str(SCRIPTS / "rank_launches.py"))
    assert done.returncode == 0, done.stderr
    launches = sorted(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("LAUNCH"))
    assert launches == [[how, str(not flags)] for how in ("forkserver", "main", "mp.spawn-0", "mp.spawn-1",
                                                           "subprocess", "torchrun-0", "torchrun-1")], done.stderr


# ----------------------------------------------------------------------------- nothing outlives the run
PROGRAM = '''
import os, subprocess, sys, time
import torch
folder = sys.argv[1]
child = "import os, sys, time, torch; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)"
proxies = [subprocess.Popen([sys.executable, "-c", child, os.path.join(folder, "plain")]).pid,
           subprocess.Popen([sys.executable, "-c", child, os.path.join(folder, "session")], start_new_session=True).pid]
while not all(os.path.exists(os.path.join(folder, n)) for n in ("plain", "session")):
    time.sleep(0.05)
forks = [int(open(os.path.join(folder, n)).read()) for n in ("plain", "session")]
with open(os.path.join(folder, "pids.tmp"), "w") as f:
    f.write(" ".join(map(str, [os.getpid(), *proxies, *forks])))
os.rename(os.path.join(folder, "pids.tmp"), os.path.join(folder, "pids"))
time.sleep(600)
'''


class Run:
    """A `simgpu run` of PROGRAM with a unique mark in its environment (the template and its forks carry it)."""

    def __init__(self, tmp_path: Path, *flags: str):
        self.folder, self.mark = tmp_path, uuid.uuid4().hex
        script = tmp_path / "program.py"
        script.write_text(PROGRAM)
        self.proc = subprocess.Popen([sys.executable, "-m", "simgpu", "run", "--gpus", "2", *flags, str(script),
                                      str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, MARK: self.mark})

    def pids(self, within: float = 240.0) -> list[int]:
        """The program's pid, its two children's proxies and their forks, once all run."""
        path, deadline = self.folder / "pids", time.monotonic() + within
        while not path.exists():
            assert self.proc.poll() is None, f"simgpu run ended early: {self.proc.communicate()}"
            assert time.monotonic() < deadline, "the program never started its children"
            time.sleep(0.05)
        return [int(p) for p in path.read_text().split()]

    def marked(self) -> list[int]:
        return [p for p in reaper.with_env(MARK, self.mark) if _alive(p)]

    def template(self) -> int:
        found = [p for p in self.marked() if b"template_main.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(found) == 1, found
        return found[0]

    def finish(self, within: float = 120.0) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=within)
        finally:
            self.proc.kill()
        return self.proc.returncode, err

    def left(self, within: float = 30.0) -> list[int]:
        deadline = time.monotonic() + within
        while self.marked() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.marked()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return left


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _still_alive(pids: list[int], within: float = 30.0) -> list[str]:
    """The pids not yet dead (zombie or gone) after up to `within` seconds, each with its state and command.
    A killed process releases its memory (so its environment no longer reads, and Run.marked() misses it)
    a moment before it becomes a zombie: one seen in between is dying, not outliving the run."""
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = []
    for pid in pids:
        if _alive(pid):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            alive.append(f"pid {pid} state {stat.rsplit(')', 1)[1].split()[0]}: {cmd[:200]}")
    return alive


@pytest.mark.parametrize("how", ["launcher SIGINT", "launcher SIGKILL", pytest.param("timeout", marks=pytest.mark.full)])
def test_nothing_outlives_a_run_served_by_the_template(tmp_path: Path, how: str) -> None:
    run = Run(tmp_path, *(["--timeout", "60"] if how == "timeout" else []))
    try:
        pids = run.pids()
        template = run.template()
        if how != "timeout":
            run.proc.send_signal(signal.SIGINT if how == "launcher SIGINT" else signal.SIGKILL)
        code, err = run.finish()
        if how == "timeout":
            assert code == 124, err
        assert run.left() == [], f"outlived simgpu run ({how})"
        alive = _still_alive([*pids, template])
        assert not alive, f"outlived simgpu run ({how}): {alive}"
    finally:
        run.proc.kill()
        run.left(0)


def test_killing_the_template_ends_the_run_and_says_so(tmp_path: Path) -> None:
    run = Run(tmp_path)
    try:
        run.pids()
        os.kill(run.template(), signal.SIGKILL)
        code, err = run.finish()
        assert code != 0
        assert "simgpu run: the run's warm template died while it ran this process" in err, err
        assert run.left() == []
    finally:
        run.proc.kill()
        run.left(0)


def test_a_killed_proxy_takes_its_fork_with_it(tmp_path: Path) -> None:
    """A launcher that SIGKILLs a worker it started (torchrun does, after SIGTERM) kills the rank."""
    run = Run(tmp_path)
    try:
        _, plain_proxy, _, plain_fork, session_fork = run.pids()
        os.kill(plain_proxy, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(plain_fork) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(plain_fork) and _alive(session_fork)
        run.proc.send_signal(signal.SIGINT)
        run.finish()
        assert run.left() == []
    finally:
        run.proc.kill()
        run.left(0)


def test_a_fork_killed_by_sigkill_ends_its_proxy_the_same_way() -> None:
    """The proxy cannot install a handler for SIGKILL: it re-raises it on itself without one."""
    code = "import os, signal, torch; os.kill(os.getpid(), signal.SIGKILL)"
    served, fresh = (simgpu_run(*flags, sys.executable, "-c", code) for flags in ((), ("--no-template",)))
    assert served.returncode == fresh.returncode != 0, (served.stderr, fresh.stderr)
    assert served.stderr == fresh.stderr == "", served.stderr  # (once: "Error in sitecustomize", and a second run)


def test_a_fork_ends_as_the_interpreter_would_without_its_teardown() -> None:
    """A program ending four ways (its end, sys.exit with a message, sys.exit(259), an exception) with
    a non-daemon thread, a thread pool's job, atexit and weakref.finalize handlers, a log file, a file
    never closed and a C stdio line pending: the same exit status, output and files served as fresh;
    only a __del__ of an object alive at exit does not run in a fork (it skips the teardown)."""
    served = _cases(simgpu_run(str(SCRIPTS / "exit_hooks.py")))
    fresh = _cases(simgpu_run("--no-template", str(SCRIPTS / "exit_hooks.py")))
    assert [c["how"] for c in served] == [c["how"] for c in fresh] == ["end", "message", "exit-259", "raise"]
    for case_served, case_fresh in zip(served, fresh):
        assert (case_served["files"].pop("served"), case_fresh["files"].pop("served")) == ("True", "False")
        assert "__del__ ran" in case_fresh["stdout"] and "__del__ ran" not in case_served["stdout"], case_served
        case_fresh["stdout"].remove("__del__ ran")
        assert case_served == case_fresh
    assert [c["code"] for c in served] == [0, 1, 3, 1]
    assert served[0]["stdout"] == ["stdout line, block-buffered", "C stdio line", "thread pool job ran",
                                   "non-daemon thread finished", "atexit handler ran", "finalizer ran"]
    assert served[1]["stderr"] == ["exit with a message"]
    assert served[0]["files"] == {"log.txt": "WARNING:root:a warning logged\n",
                                  "unclosed.txt": "written, never flushed or closed\n"}


def test_the_templates_own_descriptor_variable_read_by_an_import_does_not_refuse_forks(monkeypatch) -> None:
    """On a GPU box (torch 2.11+cu130) an import during the warm-up reads the whole environment, the
    template's own SIMGPU_TEMPLATE_LISTEN_FD included, which main() then pops: no fork's environment has
    it, and every program started without the template (seen on 128 of 128 runs there)."""
    from simgpu import template
    from simgpu._boot import template_proxy

    monkeypatch.setattr(template_proxy, "_stream", lambda stream: None)  # pytest's captured stdio
    env = dict(os.environ)
    warm = template.describe({template.LISTEN_FD_ENV: "3", "HOME": env.get("HOME")}, env, library_threads=10**6)
    req = {**template_proxy.request("module", "x"), "fds": []}
    assert template.LISTEN_FD_ENV not in req["env"]
    assert template.refusal(warm, req) is None
    changed = {**req, "env": {**req["env"], "HOME": "/elsewhere"}}  # a variable an import read still counts
    assert "HOME='/elsewhere' differs" in (template.refusal(warm, changed) or "")
