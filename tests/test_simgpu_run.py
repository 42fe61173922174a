"""`simgpu run`: unmodified CUDA programs on simulated GPUs, in fresh processes (the simulation
patches torch process-wide, so every check runs in a child, as a user's program would)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import run_bounded

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "sim_scripts"
EXAMPLE_NAMES = ["comm_demo", "devices_demo", "dist_demo", "dp_ddp_demo", "model_parallel_demo"]


def examples_dir() -> Path:
    """The acceptance scripts, where SIMGPU_EXAMPLES_DIR points.

    They are not part of this repository (the project's own corpus is examples/programs/, run by
    tests/test_example_programs.py), so a clone runs them only when asked to, and says so when it skips.
    """
    named = os.environ.get("SIMGPU_EXAMPLES_DIR")
    if not named:
        pytest.skip("acceptance scripts kept outside the repository: set SIMGPU_EXAMPLES_DIR to run them")
    if not (Path(named) / "comm_demo.py").is_file():
        raise AssertionError(f"SIMGPU_EXAMPLES_DIR={named} holds no comm_demo.py")
    return Path(named)


def simgpu_run(gpus: int, *args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(gpus), *args]
    return run_bounded(cmd, timeout, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_acceptance_example_runs_unmodified(name: str, tmp_path: Path) -> None:
    script = examples_dir() / f"{name}.py"
    args = [str(_free_port())] if name == "dist_demo" else []
    done = simgpu_run(2, str(script), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK {name}" in done.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("script,gpus", [("devices_semantics.py", 3), ("child_inherits.py", 3), ("checkpoints.py", 2),
                                         ("rng_state.py", 2), ("autograd_placement.py", 2),
                                         ("cuda_api.py", 2), ("cuda_programs_meet.py", 2),
                                         ("warning_sites.py", 2), ("thread_streams.py", 1),
                                         ("cuda_sleep.py", 1), ("host_register.py", 1),
                                         ("cuda_graphs.py", 1)])
def test_cuda_semantics(script: str, gpus: int) -> None:
    done = simgpu_run(gpus, str(SCRIPTS / script))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK {script[:-3]}" in done.stdout


def test_the_profiler_records_host_activity_and_says_once_that_gpu_activity_is_left_out() -> None:
    """ProfilerActivity.CUDA made torch's C++ print a failed CUDA event with its stack trace per op."""
    done = simgpu_run(1, str(SCRIPTS / "profiler_host_only.py"))
    assert done.returncode == 0 and "OK profiler_host_only" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("simgpu: the profiler records host activity only") == 1, done.stderr
    assert "Failed to record CUDA event" not in done.stderr, done.stderr[-2000:]


def test_ddp_features_under_torchrun() -> None:
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "ddp_features.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK ddp_features" in done.stdout


def test_a_collective_captured_in_a_cuda_graph_runs_at_each_replay() -> None:
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "cuda_graph_collective.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK cuda_graph_collective 0" in done.stdout and "OK cuda_graph_collective 1" in done.stdout


def test_collectives_in_the_profiler_as_nccl_shows_them() -> None:
    """distributed_test.py's profiling checks: `nccl:<op>` records, asynchronous, with input shapes."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "collective_profiling.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK collective_profiling 0" in done.stdout and "OK collective_profiling 1" in done.stdout


def test_what_pytorchs_own_distributed_tests_need() -> None:
    """Issue 27 (benchmarks/torch_suite/upstream.py): torch._dynamo.reset() with CUDA available, a
    DTensor's device fixed at construction, FSDP2 CPU offload refusing a GPU state dict as on GPUs."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "torch_suite_meets.py"),
                      timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK torch_suite_meets" in done.stdout


def test_groups_bound_to_a_device_as_with_nccl() -> None:
    """Issue 27 (test_device_mesh.py::test_2d_mesh_eager_init_subgroup): init_process_group(device_id=...)
    binds the default group and the groups made from it, DeviceMesh's through split_group, as NCCL does."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "bound_device_groups.py"),
                      timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK bound_device_groups 0" in done.stdout and "OK bound_device_groups 1" in done.stdout


@pytest.mark.parametrize("template", [True, False], ids=["template", "no-template"])
def test_dtensor_checkpoints_need_torch_distributed_tensor_imported(template: bool) -> None:
    """Issue 27 (test_dtensor.py::test_dtensor_save_load_import): the simulation's own imports of torch._dynamo
    and torch.distributed.tensor stay out of the program's sight (simgpu/cuda_sim/deferred_imports.py)."""
    flags = [] if template else ["--no-template"]
    done = run_bounded([sys.executable, "-m", "simgpu", "run", *flags, "--gpus", "1", sys.executable,
                        str(SCRIPTS / "dtensor_import_deferred.py")], 600, cwd=ROOT, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK dtensor_import_deferred" in done.stdout


def test_local_tensor_mode_ranks_are_on_simulated_gpus() -> None:
    """Issue 27: factories inside LocalTensorMode (a program's dispatch mode) make GPU tensors, so DTensor
    random ops there draw each rank's CUDA numbers (test_random_ops.py's WithLocalTensor classes)."""
    done = simgpu_run(4, sys.executable, str(SCRIPTS / "local_tensor_meets.py"), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK local_tensor_meets" in done.stdout


def test_works_live_while_cpp_reads_them_and_free_their_tensors() -> None:
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "work_lifetime.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK work_lifetime" in done.stdout


def test_works_results_are_there_for_a_later_reader_however_they_completed() -> None:
    """Join's all-reduce read by DDP's reducer in backward: completed while the issuing frame still held its
    tensor (polled), or while the transport still held the finished operation (gloo's thread lets go a
    moment after the waiter returns: the flake of the test above), the reducer found result() empty."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "work_result_race.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK work_result_race" in done.stdout


def test_a_group_bound_to_its_gpu_binds_new_groups_and_device_mesh_splits_it() -> None:
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(4, torchrun, "--standalone", "--nproc-per-node", "4", str(SCRIPTS / "eager_init.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK eager_init" in done.stdout


def test_cuda_visible_devices_reorders_and_stops_at_a_bad_entry() -> None:
    done = simgpu_run(4, str(SCRIPTS / "visible_devices.py"), env={"CUDA_VISIBLE_DEVICES": "2,0,x,1"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_simgpu_visible_devices_names_the_simulated_gpus_while_the_real_ones_are_hidden() -> None:
    # On a GPU box the torch suite's simulated side runs with CUDA_VISIBLE_DEVICES= (the CUDA driver sees
    # no real GPU); SIMGPU_VISIBLE_DEVICES then says which simulated GPUs the program sees.
    done = simgpu_run(4, str(SCRIPTS / "visible_devices.py"),
                      env={"CUDA_VISIBLE_DEVICES": "", "SIMGPU_VISIBLE_DEVICES": "2,0,x,1"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_nccl_maps_to_the_strict_simulator_with_nccl_placement(tmp_path: Path) -> None:
    done = simgpu_run(2, str(SCRIPTS / "nccl_rules.py"), str(tmp_path / "rendezvous"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK nccl_rules" in done.stdout


def test_what_cannot_be_simulated_fails_in_one_line() -> None:
    done = simgpu_run(1, str(SCRIPTS / "unsupported.py"))
    assert done.returncode != 0
    assert done.stderr.strip() == ("simgpu run: simgpu: torch.cuda.MemPool cannot run on simulated GPUs: memory pools "
                                   "belong to CUDA's caching allocator")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_exit_status_and_missing_program() -> None:
    assert simgpu_run(1, "-m", "this_module_does_not_exist").returncode != 0
    done = simgpu_run(1, "no-such-program-xyz")
    assert done.returncode != 0 and "simgpu run: no such program: no-such-program-xyz" in done.stderr
    bad = simgpu_run(0, "x.py")
    assert bad.returncode != 0 and "--gpus must be at least 1, got 0" in bad.stderr


def test_a_process_that_never_imports_torch_does_not_load_it() -> None:
    """Helper processes a program starts (tools, tokenizers, a Python without torch) pay nothing for
    the simulation: the boot hook waits for the process's own `import torch`."""
    probe = "import sys; print('torch' in sys.modules, 'simgpu.pool' in sys.modules)"
    done = simgpu_run(2, sys.executable, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    with_torch = simgpu_run(2, sys.executable, "-c", "import torch; print(torch.cuda.device_count())")
    assert with_torch.stdout.split() == ["2"], with_torch.stderr


def test_a_process_whose_simulation_cannot_start_stops_in_one_line() -> None:
    """Never a program that runs on no GPU at all while it was launched on simulated ones."""
    from simgpu.launcher import BOOT_DIR

    env = {**os.environ, "SIMGPU_GPUS": "two", "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", "import torch; print('ran unsimulated')"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 3 and "ran unsimulated" not in done.stdout
    assert done.stderr.strip() == ("simgpu run: simgpu: SIMGPU_GPUS='two': the number of simulated GPUs must be "
                                   "a positive integer")


@pytest.mark.parametrize("version,supported", [("2.4.1", True), ("2.13.0+cpu", True), ("2.15.0", True),
                                               ("2.15.0a0+git1234", True), ("2.3.1", False), ("2.16.0", False),
                                               ("1.13.1+cu117", False)])
def test_the_simulation_names_the_torch_versions_it_is_built_for(version: str, supported: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from simgpu import launcher

    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    if supported:
        launcher.check_installed_torch()
    else:
        with pytest.raises(SystemExit) as stop:
            launcher.check_installed_torch()
        assert str(stop.value) == (f"simgpu run: simgpu: torch {version} is not supported by the GPU simulation "
                                   "(supported: 2.4 to 2.15)")


# ----------------------------------------------------------------------------- nothing outlives the run (issue 19)
ESCAPER = '''
import os, subprocess, sys, time
pids = [os.getpid()]
pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)  # a plain child
pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True).pid)  # a new session, as torchrun starts its workers
r, w = os.pipe()
if os.fork() == 0:  # a daemon: fork, setsid, fork again; its parent exits at once, so it is an orphan
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
pids.append(int(os.read(r, 64)))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
'''


def _escaper(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "escaper.py"
    script.write_text(ESCAPER)
    return script, tmp_path / "pids"


def _wait_for(path: Path, proc: subprocess.Popen, within: float = 120.0) -> list[int]:
    deadline = time.monotonic() + within
    while not path.exists():
        assert proc.poll() is None, f"simgpu run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the program never wrote its pids"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def _all_gone(pids: list[int], within: float) -> list[int]:
    deadline = time.monotonic() + within
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_timeout_kills_the_program_its_children_new_sessions_and_daemons(tmp_path: Path) -> None:
    script, pidfile = _escaper(tmp_path)
    done = simgpu_run(1, "--timeout", "10", str(script), str(pidfile))  # 10 s: time to start under load
    assert done.returncode == 124 and "still running after 10 s; killed" in done.stderr, done.stderr
    assert pidfile.exists(), "the program did not get to start its processes within the timeout"
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 4
    assert [p for p in pids if _alive(p)] == [], "outlived simgpu run --timeout"  # gone when it returns


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig,parent_ignores_sigint", [(signal.SIGINT, False), (signal.SIGINT, True),
                                                       (signal.SIGKILL, False)])
def test_interrupting_or_killing_the_launcher_kills_everything(tmp_path: Path, sig: int,
                                                               parent_ignores_sigint: bool) -> None:
    """Also when simgpu run starts with SIGINT ignored (pytest-xdist workers, background jobs): the
    program must not inherit the ignoring, or the forwarded Ctrl-C does nothing and the run hangs."""
    script, pidfile = _escaper(tmp_path)
    launcher = subprocess.Popen([sys.executable, "-m", "simgpu", "run", "--gpus", "1", str(script), str(pidfile)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_ignore_sigint if parent_ignores_sigint else None)
    try:
        pids = _wait_for(pidfile, launcher)
        launcher.send_signal(sig)
        launcher.communicate(timeout=180)  # generous: a loaded 2-core machine runs 4 xdist workers
        assert _all_gone(pids, within=30.0) == [], f"outlived a launcher that got {signal.Signals(sig).name}"
    finally:
        launcher.kill()
        launcher.communicate()
        for pid in pids if "pids" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_bad_option_values_fail_up_front_in_one_line() -> None:
    for args, message in [(("--timeout", "-1"), "argument --timeout: must be a finite number > 0, got '-1'"),
                          (("--memory-gb", "-5"), "argument --memory-gb: must be a finite number > 0, got '-5'"),
                          (("--timeout", "soon"), "argument --timeout: expected a number > 0, got 'soon'")]:
        done = simgpu_run(1, *args, "never_started.py")
        assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == f"simgpu run: error: {message}"


def test_an_unknown_sim_interface_stops_the_run_in_one_line_naming_the_interfaces() -> None:
    done = simgpu_run(1, "--sim-interface", "nosuch0", "never_started.py")
    assert done.returncode == 1, done
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("simgpu run: no network interface named 'nosuch0' here (this host has: ") and "lo" in line


def test_the_launcher_draws_the_secret_on_one_host_and_leaves_it_to_the_ranks_across_hosts(tmp_path: Path) -> None:
    """Across hosts each node's launcher would draw a different secret: with --sim-interface it draws
    none (the ranks agree on one through the store, simgpu.backend), unless the environment has one."""
    show = tmp_path / "show.py"
    show.write_text("import os\nprint(os.environ.get('SIMGPU_GROUP_SECRET', 'none'), "
                    "os.environ.get('SIMGPU_SIM_INTERFACE', 'loopback'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SIMGPU_GROUP_SECRET", "SIMGPU_SIM_INTERFACE")}
    one_host = run_bounded([sys.executable, "-m", "simgpu", "run", "--gpus", "1", str(show)], 120, cwd=ROOT, env=env)
    across = run_bounded([sys.executable, "-m", "simgpu", "run", "--gpus", "1", "--sim-interface", "lo", str(show)],
                         120, cwd=ROOT, env=env)
    given = run_bounded([sys.executable, "-m", "simgpu", "run", "--gpus", "1", "--sim-interface", "lo", str(show)],
                        120, cwd=ROOT, env={**env, "SIMGPU_GROUP_SECRET": "from-the-job"})
    secret, where = one_host.stdout.split()
    assert len(secret) == 32 and where == "loopback", one_host
    assert across.stdout.split() == ["none", "lo"], across
    assert given.stdout.split() == ["from-the-job", "lo"], given
