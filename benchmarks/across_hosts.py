"""Step time of a simulated world across hosts against the same world on one host (issue 34;
docs/multinode.md): 2 nodes x 2 simulated GPUs (network namespaces joined by a bridge, tests/netns.py;
needs root) against `simgpu run --gpus 4` on one host, the same program (benchmarks/programs/rank_costs.py:
a small DDP MLP's step time and a 4 KiB all_reduce's latency, median over ranks), alternating, in one run.

    sudo python benchmarks/across_hosts.py --trials 3 --json benchmarks/results/across-hosts-2core.json

Both worlds run on the same cores, so the ratio is what the network path (veth + bridge instead of
loopback, the rendezvous store across it) costs, not what more hosts would give.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from tests import netns  # noqa: E402  (the namespace hosts the tests use)

PROGRAM = [str(HERE / "programs" / "rank_costs.py"), "--steps", "10", "--collectives", "30"]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
SIMGPU = [sys.executable, "-m", "simgpu", "run"]


def _rows(outputs: list[str]) -> list[dict]:
    rows = [json.loads(line) for out in outputs for line in out.splitlines() if line.startswith("{")]
    return sorted(rows, key=lambda r: r["rank"])


def one_host(gpus: int) -> list[dict]:
    env = {**os.environ, "BENCH_T0": str(time.time())}
    done = subprocess.run([*SIMGPU, "--gpus", str(gpus), "--timeout", "300", TORCHRUN, "--standalone",
                           "--nproc-per-node", str(gpus), *PROGRAM], env=env, capture_output=True, text=True, timeout=330)
    if done.returncode:
        raise SystemExit(f"one host: exit {done.returncode}\n{done.stderr[-3000:]}")
    return _rows([done.stdout])


def across_hosts(nodes: int, gpus: int) -> list[dict]:
    with netns.NamespaceHosts(nodes) as hosts:
        env = {**os.environ, "BENCH_T0": str(time.time())}
        procs = [subprocess.Popen(hosts.command(n, [
            *SIMGPU, "--gpus", str(gpus), "--sim-interface", netns.INTERFACE, "--timeout", "300", TORCHRUN,
            "--nnodes", str(nodes), "--nproc-per-node", str(gpus), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{hosts.addresses[0]}:29519", "--rdzv-id", "bench", "--rdzv-conf", f"is_host={int(n == 0)}",
            "--local-addr", hosts.addresses[n], "--max-restarts", "0", *PROGRAM]),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(nodes)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=330)
            if p.returncode:
                raise SystemExit(f"across hosts: exit {p.returncode}\n{err[-3000:]}")
            outs.append(out)
    return _rows(outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    why = netns.unavailable()
    if why:
        raise SystemExit(f"across_hosts: {why}")
    world = args.nodes * args.gpus_per_node
    trials = []
    for trial in range(args.trials):  # alternating, so drifting load hits both alike
        for kind, rows in (("one_host", one_host(world)), ("across_hosts", across_hosts(args.nodes, args.gpus_per_node))):
            trials.append({"trial": trial, "kind": kind, "load1": os.getloadavg()[0],
                           "step_s": statistics.median(r["step_s"] for r in rows),
                           "all_reduce_4KiB_s": statistics.median(r["all_reduce_4KiB_s"] for r in rows),
                           "loss": rows[0]["loss"]})
            print(json.dumps(trials[-1]), flush=True)
    summary = {}
    for key in ("step_s", "all_reduce_4KiB_s"):
        one = statistics.median(t[key] for t in trials if t["kind"] == "one_host")
        across = statistics.median(t[key] for t in trials if t["kind"] == "across_hosts")
        summary[key] = {"one_host": one, "across_hosts": across, "ratio_across_over_one": across / one}
    result = {"world": f"{args.nodes} nodes x {args.gpus_per_node} GPUs vs {world} GPUs on one host",
              "cores": os.cpu_count(), "trials": trials, "summary": summary}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
