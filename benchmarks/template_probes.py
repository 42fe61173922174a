"""Probes behind docs/warm-template.md: what a simulated rank costs when it starts fresh (status quo)
or is forked from a warm template that has imported torch and simgpu, and what breaks in a forked
child that inherited threads.

    python benchmarks/template_probes.py launch --ranks 4 8     # time to first collective, USS/PSS per rank
    python benchmarks/template_probes.py threads                # fork after threads: what works, what hangs

`launch` starts N ranks three ways, one after the other, in one run:
- fresh: N `python -c RANK` processes under simgpu run's environment (SIMGPU_GPUS, simgpu's
  sitecustomize): each imports torch, starts the simulation, joins the group (what torchrun's and
  mp.spawn's workers do today);
- fork: a template process imports torch, starts the simulation and imports the sim backend, then
  (told "go") forks N children that join the group (what a launcher hook or a fork server gives);
- proxy: a bare interpreter per rank (what a fork server's client costs the launcher: the process
  torchrun or mp.spawn waits on), measured alone: start-up time and its own USS.
Every rank reports the seconds from the launch to its first all_reduce's return, and its USS/PSS
(smaps_rollup) after that all_reduce and a full garbage collection (which a longer-running rank does
sooner or later; without gc.freeze() in the template it writes to every object's header).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOT = ROOT / "simgpu" / "_boot"

RANK = r"""
import json, os, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
rank, world, port, t0 = int(os.environ["R"]), int(os.environ["W"]), int(os.environ["P"]), float(os.environ["T0"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=300))
x = torch.ones(4, device="cuda")
dist.all_reduce(x)
first = time.time() - t0
import gc
gc.collect()  # what a longer-running rank does sooner or later: a full collection
def mem():
    out = {}
    for line in open("/proc/self/smaps_rollup"):
        k, _, v = line.partition(":")
        if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            out[k] = int(v.split()[0]) / 1024
    return {"rss_mb": out["Rss"], "pss_mb": out["Pss"], "uss_mb": out["Private_Clean"] + out["Private_Dirty"]}
os.write(1, (json.dumps({"rank": rank, "first_collective_s": first, "sum": x[0].item(), **mem()}) + "\n").encode())
dist.barrier()
dist.destroy_process_group()
"""

TEMPLATE = r"""
import gc, json, os, sys, time
t = time.time()
import torch, torch.distributed
import simgpu.cuda_sim, simgpu.backend
simgpu.cuda_sim.activate()
if os.environ.get("FREEZE") == "1":
    gc.freeze()
threads = len(os.listdir("/proc/self/task"))
print(json.dumps({"template_ready_s": time.time() - t, "template_threads": threads}), flush=True)
line = sys.stdin.readline().split()
world, port, t0 = int(line[0]), int(line[1]), float(line[2])
code = compile(RANK, "<rank>", "exec")
pids = []
for r in range(world):
    pid = os.fork()
    if pid == 0:
        os.environ.update(R=str(r), W=str(world), P=str(port), T0=str(t0))
        try:
            exec(code, {"__name__": "__main__"})
        finally:
            sys.stdout.flush()
            os._exit(0)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
sys.exit(max(codes, key=abs))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sim_env(world: int) -> dict[str, str]:
    env = {**os.environ, "SIMGPU_GPUS": str(world), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT), str(ROOT)])
    return env


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def launch_fresh(world: int) -> dict:
    port, t0 = _free_port(), time.time()
    procs = [subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True,
                              env={**_sim_env(world), "R": str(r), "W": str(world), "P": str(port), "T0": str(t0)})
             for r in range(world)]
    rows = [row for p in procs for row in _rows(p.communicate(timeout=900)[0])]
    return {"ranks": rows, "wall_s": time.time() - t0}


def launch_fork(world: int, freeze: bool) -> dict:
    start = time.time()
    env = {**_sim_env(world), "FREEZE": "1" if freeze else "0"}
    proc = subprocess.Popen([sys.executable, "-c", f"RANK = {RANK!r}\n{TEMPLATE}"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    ready = json.loads(proc.stdout.readline())
    port, t0 = _free_port(), time.time()
    proc.stdin.write(f"{world} {port} {t0}\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=900)
    return {**ready, "template_start_to_go_s": t0 - start, "ranks": _rows(out), "wall_s": time.time() - t0}


def proxy_cost(count: int) -> dict:
    """A bare interpreter under simgpu run's environment (the sitecustomize runs, torch is never imported)."""
    t0 = time.time()
    code = ("import os, time, json; m = {l.split(':')[0]: int(l.split()[1]) for l in open('/proc/self/smaps_rollup')"
            " if ':' in l and l.split()[1].isdigit()};"
            "print(json.dumps({'up_s': time.time() - float(os.environ['T0']),"
            " 'uss_mb': (m['Private_Clean'] + m['Private_Dirty']) / 1024, 'pss_mb': m['Pss'] / 1024}))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**_sim_env(2), "T0": str(t0)}) for _ in range(count)]
    rows = [row for p in procs for row in _rows(p.communicate(timeout=60)[0])]
    return {"ranks": rows, "wall_s": time.time() - t0}


def _summary(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    return f"median {statistics.median(values):7.2f} max {max(values):7.2f}"


def cmd_launch(args: argparse.Namespace) -> None:
    results = {"load_before": os.getloadavg(), "rows": []}
    for world in args.ranks:
        for mode in args.modes:
            if mode == "fresh":
                res = launch_fresh(world)
            elif mode == "proxy":
                res = proxy_cost(world)
            else:
                res = launch_fork(world, freeze=(mode == "fork-freeze"))
            res.update(mode=mode, world=world, load=os.getloadavg())
            results["rows"].append(res)
            rows = res["ranks"]
            if mode == "proxy":
                print(f"{mode:12} {world:3}: up_s {_summary(rows, 'up_s')}  uss_mb {_summary(rows, 'uss_mb')}  "
                      f"pss_mb {_summary(rows, 'pss_mb')}  load {res['load'][0]:.1f}", flush=True)
                continue
            assert len(rows) == world and all(r["sum"] == world for r in rows), res
            extra = f" template {res['template_ready_s']:.1f}s threads {res['template_threads']}" if "fork" in mode else ""
            print(f"{mode:12} {world:3}: first_collective_s {_summary(rows, 'first_collective_s')}  "
                  f"uss_mb {_summary(rows, 'uss_mb')}  pss_mb {_summary(rows, 'pss_mb')}  wall {res['wall_s']:.1f}s"
                  f"{extra}  load {res['load'][0]:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


# ----------------------------------------------------------------------------- threads
SCENARIOS = {
    # name: (what the template does before forking, what the child does)
    "numpy-openblas": ("import numpy", "import numpy; a = numpy.ones((512, 512)); print((a @ a)[0, 0])"),
    "intraop-used-then-fork": ("import torch; torch.set_num_threads(2); a = torch.ones(2048, 2048); a @ a",
                               "import torch; a = torch.ones(2048, 2048); print((a @ a)[0, 0].item(), torch.get_num_threads())"),
    "intraop-unused-child-env": ("import torch",
                                 "import os, torch; os.environ['OMP_NUM_THREADS'] = '1'; a = torch.ones(2048, 2048); "
                                 "print((a @ a)[0, 0].item(), 'threads', torch.get_num_threads())"),
    "interop-used-then-fork": ("import torch; torch.jit.wait(torch.jit._fork(lambda: 1))",
                               "import torch; print(torch.jit.wait(torch.jit._fork(lambda: 2)))"),
    "gloo-group-in-template": ("import torch, torch.distributed as dist, tempfile; "
                               "dist.init_process_group('gloo', init_method='file://' + tempfile.mktemp(), rank=0, "
                               "world_size=1); dist.all_reduce(torch.ones(1))",
                               "import torch, torch.distributed as dist; t = torch.ones(1); dist.all_reduce(t); print(t.item())"),
    "sim-group-in-template": ("import os, torch, tempfile; os.environ['SIMGPU_GPUS'] = '1'; import simgpu.cuda_sim; "
                              "simgpu.cuda_sim.activate(); import torch.distributed as dist; "
                              "dist.init_process_group('nccl', init_method='file://' + tempfile.mktemp(), rank=0, "
                              "world_size=1); dist.all_reduce(torch.ones(1, device='cuda'))",
                              "import torch, torch.distributed as dist; t = torch.ones(1, device='cuda'); "
                              "dist.all_reduce(t); print(t.item())"),
    "sim-activated-no-group": ("import os, torch, tempfile; os.environ['SIMGPU_GPUS'] = '1'; import simgpu.cuda_sim; "
                               "simgpu.cuda_sim.activate(); import simgpu.backend",
                               "import torch, torch.distributed as dist, tempfile; "
                               "dist.init_process_group('nccl', init_method='file://' + tempfile.mktemp(), rank=0, "
                               "world_size=1); t = torch.ones(1, device='cuda'); dist.all_reduce(t); print(t.item())"),
}

THREAD_TEMPLATE = r"""
import os, sys, time
exec(sys.argv[1])
threads = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
print("template threads:", len(threads), threads, flush=True)
pid = os.fork()
if pid == 0:
    try:
        exec(sys.argv[2])
        print("child ok", flush=True)
        os._exit(0)
    except BaseException as exc:
        print("child raised", type(exc).__name__, str(exc).splitlines()[0][:200], flush=True)
        os._exit(1)
deadline = time.time() + float(sys.argv[3])
while time.time() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status), flush=True)
        sys.exit(0)
    time.sleep(0.05)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("child HUNG (killed after the bound)", flush=True)
"""


def cmd_threads(args: argparse.Namespace) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    env["PYTHONPATH"] = str(ROOT)
    for name, (before, child) in SCENARIOS.items():
        done = subprocess.run([sys.executable, "-c", THREAD_TEMPLATE, before, child, str(args.bound)],
                              capture_output=True, text=True, env=env, timeout=args.bound + 120)
        text = " | ".join(line for line in done.stdout.splitlines())
        err = done.stderr.strip().splitlines()[-1:] if done.returncode else []
        print(f"{name:26} {text} {' '.join(err)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    launch = sub.add_parser("launch")
    launch.add_argument("--ranks", type=int, nargs="+", default=[4])
    launch.add_argument("--modes", nargs="+", default=["fresh", "fork", "fork-freeze", "proxy"],
                        choices=["fresh", "fork", "fork-freeze", "proxy"])
    launch.add_argument("--json", default=None)
    threads = sub.add_parser("threads")
    threads.add_argument("--bound", type=float, default=30.0, help="seconds before a child counts as hung")
    args = parser.parse_args()
    {"launch": cmd_launch, "threads": cmd_threads}[args.cmd](args)


if __name__ == "__main__":
    main()
