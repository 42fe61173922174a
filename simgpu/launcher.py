"""`simgpu run --gpus N script.py [args]`: run a program written for CUDA GPUs on CPU processes.

The program runs unmodified in a child process whose environment carries the simulation
(SIMGPU_GPUS, and simgpu's sitecustomize first on PYTHONPATH), so every Python process it
starts (mp.spawn workers, torchrun's workers, subprocesses) sees the same N simulated GPUs.
The child runs in its own session; when it ends, is interrupted, runs past --timeout, or the
launcher itself is killed, everything it started is killed (simgpu.reaper: the launcher is a child
subreaper, the program's processes carry a run marker, and a watchdog process kills them when the
launcher goes away), so nothing outlives the run.

`--predict MACHINE` (a simgpu.cost_model preset, e.g. h200-nvlink4) has every rank record the
collectives it ran (simgpu.comm_log) into a temporary folder; when the program ends the launcher
prints, on stderr, the predicted GPU communication time of what it executed on that machine.

`--plan GPU` runs the program on storage-less GPUs of that model and prints each GPU's peak memory and a
step-time estimate (simgpu.cuda_sim.plan, docs/plan-mode.md).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from simgpu import host_malloc, reaper, settings
from simgpu._boot.template_proxy import OFF_ENV
from simgpu.settings import GROUP_SECRET_ENV

BOOT_DIR = Path(__file__).resolve().parent / "_boot"
EXIT_TIMEOUT = 124


def _parser() -> argparse.ArgumentParser:
    from simgpu.cost_model import presets

    parser = argparse.ArgumentParser(prog="simgpu", description="Run multi-GPU PyTorch code on simulated GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a CUDA/NCCL program unmodified on N simulated GPUs (CPU processes)",
                         description="simgpu run --gpus 2 train.py --lr 0.1 | simgpu run --gpus 4 -m pkg.mod | "
                                     "simgpu run --gpus 4 torchrun --nproc-per-node 4 train.py")
    run.add_argument("--gpus", type=int, required=True, help="how many GPUs the machine has (before CUDA_VISIBLE_DEVICES)")
    run.add_argument("--memory-gb", type=positive_float, default=None,
                     help="memory each simulated GPU reports (default 141, an H200)")
    run.add_argument("--timeout", type=positive_float, default=None,
                     help="kill the program and everything it started after this many seconds (exit 124)")
    run.add_argument("--predict", default=None, metavar="MACHINE",
                     help="at the end, print the predicted GPU time of the collectives the program ran on this "
                          f"machine (a simgpu.cost_model preset: {', '.join(presets())})")
    run.add_argument("--plan", default=None, metavar="GPU",
                     help="plan the run for this GPU without computing anything: storage-less tensors, the caching "
                          "allocator's peaks and OutOfMemoryError at its size, a step-time estimate (docs/plan-mode.md; "
                          f"GPUs: {', '.join(_plan_gpus())})")
    run.add_argument("--trace", default=None, metavar="FILE",
                     help="with --plan: write the plan's timeline as Chrome/Perfetto trace JSON (one track per "
                          "simulated GPU and stream, each op and collective at its predicted time)")
    run.add_argument("--ranks", default=None, metavar="SPEC",
                     help="with --plan and torchrun: run only these ranks (e.g. 0-3,252-255), one or two per role of a "
                          "symmetric layout; the others exit at start and collectives complete by symmetry, checked "
                          "across the sampled members of each group; 'auto': chosen from the program's DeviceMesh "
                          "(whole pipelines, the first and last rank of every other dimension; docs/plan-mode.md)")
    run.add_argument("--no-template", action="store_true",
                     help="start every Python process of the program on its own (each imports torch), not as a "
                          f"fork of the run's warm template (also: {OFF_ENV}=1; docs/warm-template.md)")
    run.add_argument("--sim-interface", default=None, metavar="IFACE",
                     help="network interface for the simulated NCCL groups of a world across hosts (each node runs "
                          "`simgpu run ... torchrun --nnodes N ...`; docs/multinode.md); default: loopback only")
    run.add_argument("-m", dest="module", default=None, help="run a module as `python -m` would")
    run.add_argument("target", nargs="?", help="script.py, or a command such as torchrun")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    return parser


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (argparse names the option and exits in one line otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def command_line(target: str | None, module: str | None, args: list[str]) -> list[str]:
    """What to execute: a script or module under this Python, or any other command as given."""
    if module:
        return [sys.executable, "-m", module, *([target] if target else []), *args]
    if target is None:
        raise SystemExit("simgpu run: name a script, -m module, or a command to run")
    if target.endswith(".py") or Path(target).is_file() and not os.access(target, os.X_OK):
        return [sys.executable, target, *args]
    beside_python = Path(sys.executable).parent / target
    if os.sep not in target and shutil.which(target) is None and beside_python.is_file():
        return [str(beside_python), *args]  # torchrun of this environment, not activated on PATH
    return [target, *args]


def _plan_gpus() -> list[str]:
    from simgpu.cuda_sim.gpu_specs import GPUS

    return sorted(GPUS)


def environment(gpus: int, memory_gb: float | None, timeout: float | None = None,
                sim_interface: str | None = None) -> dict[str, str]:
    """The program's environment. With --timeout, the strict deadline sits below it (unless
    SIMGPU_STRICT_TIMEOUT is set), so a rank that never arrives is named before the run is killed.
    With --sim-interface the sim groups connect over that interface (SIMGPU_SIM_INTERFACE). glibc's
    malloc keeps freed memory for reuse unless SIMGPU_MALLOC_DEFAULTS=0 (simgpu.host_malloc)."""
    env = dict(os.environ)
    if sim_interface is not None:
        env[settings.SIM_INTERFACE_ENV] = sim_interface
    if timeout is not None:
        strict_timeout = settings.strict_deadline_below(timeout, env)
        if strict_timeout is not None:
            env[settings.STRICT_TIMEOUT_ENV] = strict_timeout
    env["SIMGPU_GPUS"] = str(gpus)
    try:
        env.update(host_malloc.defaults(env))  # freed host memory kept for reuse (off with SIMGPU_MALLOC_DEFAULTS=0)
    except ValueError as exc:
        raise SystemExit(f"simgpu run: {exc}") from None
    if memory_gb is not None:
        env["SIMGPU_GPU_MEMORY_GB"] = str(memory_gb)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(BOOT_DIR.parent.parent)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def check_installed_torch() -> None:
    """Stop before starting anything when the installed torch is one the simulation is not built for."""
    from importlib.metadata import PackageNotFoundError, version

    from simgpu.torch_support import unsupported_reason

    try:
        reason = unsupported_reason(version("torch"))
    except PackageNotFoundError:
        raise SystemExit("simgpu run: torch is not installed in this Python environment") from None
    if reason is not None:
        raise SystemExit(f"simgpu run: {reason}")


def run(gpus: int, cmd: list[str], memory_gb: float | None = None, timeout: float | None = None,
        predict: str | None = None, template: bool = True, sim_interface: str | None = None,
        plan: str | None = None, trace: str | None = None, ranks: str | None = None) -> int:
    """Run `cmd` on `gpus` simulated GPUs; its exit status (124 after a timeout).

    predict: a cost-model machine preset; the predicted communication time is printed at the end.
    template: start the program's Python processes as forks of a warm template (simgpu.template),
    unless SIMGPU_NO_TEMPLATE=1.
    sim_interface: this node's network interface when the world spans hosts (`gpus` is this node's).
    plan: a GPU (simgpu.cuda_sim.gpu_specs) to plan the run for, without data (docs/plan-mode.md).
    trace: with plan, a file for the plan's Chrome/Perfetto trace.
    ranks: with plan, the ranks to run (plan_roles.parse_ranks), the others taken as alike by symmetry."""
    template = template and os.environ.get(OFF_ENV) != "1"
    for name, value in (("--timeout", timeout), ("--memory-gb", memory_gb)):
        if value is not None and not 0 < value < float("inf"):
            raise SystemExit(f"simgpu run: {name} must be a finite number > 0, got {value!r}")
    try:
        if sim_interface is not None:
            settings.sim_interface(sim_interface, [name for _, name in socket.if_nameindex()])
        settings.gpu_count(gpus)
        settings.check_environment(world_size=gpus, where=f"simgpu run --gpus {gpus} (one rank per GPU)")
    except ValueError as exc:
        raise SystemExit(f"simgpu run: {exc}") from None
    if plan is not None and predict is not None:
        raise SystemExit("simgpu run: --plan prices the collectives itself (on its GPU's cost-model preset); "
                         "leave out --predict")
    if trace is not None and plan is None:
        raise SystemExit("simgpu run: --trace writes a plan's timeline; it needs --plan GPU")
    sample = None
    if ranks is not None:
        if plan is None:
            raise SystemExit("simgpu run: --ranks runs a sample of a plan's ranks; it needs --plan GPU")
        from simgpu.cuda_sim import plan_roles, plan_sample

        try:
            sample = plan_sample.AUTO if ranks.strip() == plan_sample.AUTO else plan_roles.parse_ranks(ranks, gpus)
        except ValueError as exc:
            raise SystemExit(f"simgpu run: {exc}") from None
    check_installed_torch()
    if plan is not None:
        return _run_plan(cmd, plan, environment(gpus, memory_gb, timeout, sim_interface), memory_gb, timeout, template,
                         trace, sample)
    if predict is None:
        return _run(cmd, environment(gpus, memory_gb, timeout, sim_interface), timeout, template)
    from simgpu import comm_log, cost_model

    try:
        cost_model.machine(predict)
    except cost_model.UnknownMachine as exc:
        raise SystemExit(f"simgpu run: --predict: {exc}") from None
    folder = tempfile.mkdtemp(prefix="simgpu-predict-")
    env = environment(gpus, memory_gb, timeout, sim_interface)
    env.update({comm_log.ENV_MACHINE: predict, comm_log.ENV_DIR: folder})
    try:
        code = _run(cmd, env, timeout, template)
        lines = comm_log.summary_lines(comm_log.read_logs(folder), predict)
        sys.stderr.write("\n".join(["", *lines, ""]))
        sys.stderr.flush()
        return code
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_plan(cmd: list[str], gpu_name: str, env: dict[str, str], memory_gb: float | None, timeout: float | None,
              use_template: bool, trace: str | None = None, sample: list[int] | str | None = None) -> int:
    """A plan (docs/plan-mode.md): each GPU's allocator gets what the named GPU leaves it after the CUDA
    context and NCCL's buffers (unless --memory-gb says otherwise); the plan's table is printed at the end."""
    from simgpu.cuda_sim import gpu_specs, plan, plan_host, plan_sample

    try:
        gpu = gpu_specs.gpu(gpu_name)
    except gpu_specs.UnknownGPU as exc:
        raise SystemExit(f"simgpu run: --plan: {exc}") from None
    keep = env.get(plan.ENV_DIR)  # set by the caller: the ranks' plan files stay there (plan_reference/compare.py)
    folder = keep or tempfile.mkdtemp(prefix="simgpu-plan-")
    os.makedirs(folder, exist_ok=True)
    env = {**env, plan.ENV_GPU: gpu.name, plan.ENV_DIR: folder}
    if not env.get(plan_host.ENV_HOST):  # this host without simulation, once for every rank (plan_host.calibrate)
        env[plan_host.ENV_HOST] = json.dumps(plan_host.baseline())
    if trace is not None:
        env[plan.ENV_TRACE] = "1"
    if memory_gb is None:
        env["SIMGPU_GPU_MEMORY_GB"] = repr((gpu.total_memory - gpu.context_bytes - gpu.nccl_bytes_per_comm) / 2**30)
        # (one communicator's buffers assumed: a program with several has less for its tensors)
    try:
        if sample == plan_sample.AUTO:
            sample = _auto_sample(cmd, env, timeout, use_template)
        if sample is not None:
            env[plan.ENV_RANKS] = ",".join(map(str, sample))
        code = _run(cmd, env, timeout, use_template)
        plans = plan.read_plans(folder)
        lines = plan.summary_lines(plans, gpu.name) if plans else ["simgpu plan: no process used a GPU"]
        if sample is not None and plans:
            sample_lines, agreed = plan.sample_lines(plans, sample)
            lines += sample_lines
            if not agreed and code == 0:
                code = 1
        if trace is not None:
            events = plan.write_trace(plans, trace)
            lines.append(f"simgpu plan: trace of {events} events written to {trace} (open in ui.perfetto.dev)")
        sys.stderr.write("\n".join(["", *lines, ""]))
        sys.stderr.flush()
        return code
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _auto_sample(cmd: list[str], env: dict[str, str], timeout: float | None, use_template: bool) -> list[int]:
    """`--ranks auto` (cuda_sim/plan_sample.py): a first run of rank 0 alone up to the program's first
    DeviceMesh, and the sample chosen from it; it prints which ranks and why the others are equal."""
    from simgpu.cuda_sim import plan, plan_sample

    folder = tempfile.mkdtemp(prefix="simgpu-plan-discover-")
    found = os.path.join(folder, "mesh.json")
    try:
        code = _run(cmd, {**env, plan.ENV_DIR: folder, **plan_sample.discovery_environment(found)}, timeout, use_template)
        if code != 0:
            raise SystemExit(f"simgpu run: --ranks auto: the first run of rank 0 (to find the program's DeviceMesh) "
                             f"exited {code}; give the sample with --ranks SPEC")
        try:
            sample, lines = plan_sample.choose(plan_sample.read(found), int(env["SIMGPU_GPUS"]))
        except ValueError as exc:
            raise SystemExit(f"simgpu run: {exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    sys.stderr.write("\n".join([*lines, ""]))
    sys.stderr.flush()
    return sample


def _run(cmd: list[str], env: dict[str, str], timeout: float | None, use_template: bool = True) -> int:
    """Run cmd; whatever way the run ends (exit, --timeout, Ctrl-C, SIGTERM, this process SIGKILLed),
    every process it started is killed (simgpu.reaper: subreaper, run marker, watchdog), the warm
    template and its forks included (they carry the run marker, and die with the template)."""
    run_id = reaper.new_run_id()
    if not env.get(settings.SIM_INTERFACE_ENV):  # strict records' key; across hosts the ranks agree on one
        env = {GROUP_SECRET_ENV: secrets.token_hex(16), **env}  # through their store (simgpu.backend)
    env = {**env, reaper.RUN_ID_ENV: run_id}
    reaper.become_subreaper()
    watchdog = reaper.Watchdog(run_id)
    warm = None
    if use_template:
        from simgpu import template

        warm = template.start(env)  # imports torch beside the program's own start-up
        env.update(warm.environment())
    started: list[int] = []  # the program's pid, once it runs
    # Installed before the program starts: a handled signal is reset to its default in the program,
    # where an ignored one would stay ignored (under a parent that ignores SIGINT, as pytest-xdist's
    # workers and background jobs of a shell do, Ctrl-C forwarded to the program would do nothing).
    forwarded = {sig: signal.signal(sig, lambda s, _f: [_signal_group(pid, s) for pid in started])
                 for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
    except FileNotFoundError:
        if warm is not None:
            warm.close()
        watchdog.stop()
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        raise SystemExit(f"simgpu run: no such program: {cmd[0]}") from None
    started.append(child.pid)
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"simgpu run: {' '.join(cmd)} still running after {timeout:g} s; killed\n")
        return EXIT_TIMEOUT
    finally:
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()
        left = reaper.kill_all(run_id, exclude={watchdog.pid})
        if warm is not None:
            warm.close()
        if left:
            sys.stderr.write(f"simgpu run: could not kill processes {left} that the program started\n")
        watchdog.stop()
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    args = list(ns.args)
    if args[:1] == ["--"]:
        args = args[1:]
    return run(ns.gpus, command_line(ns.target, ns.module, args), ns.memory_gb, ns.timeout, ns.predict,
               template=not ns.no_template, sim_interface=ns.sim_interface, plan=ns.plan, trace=ns.trace,
               ranks=ns.ranks)


if __name__ == "__main__":
    sys.exit(main())
