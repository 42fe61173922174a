"""What a simulated rank costs at 2 to 64 ranks, against the same program on plain CPU processes with
gloo and no simulation (issue 29; docs/warm-template.md).

    python benchmarks/many_ranks.py --ranks 2 8 32 64 --json benchmarks/results/many-ranks-2core.json

For each world size, in one run and alternating: `torchrun --nproc-per-node N` of
benchmarks/programs/rank_costs.py on CPU with gloo (plain), the same under `simgpu run --gpus N`
(simulated: its ranks are forks of the warm template), and with --no-template where asked
(--no-template-up-to). Per run: the whole wall time, each rank's time from launch to its first
collective, its step time, a 4 KiB all_reduce's latency, its unique memory (USS), and, read while
the ranks wait, the USS and PSS of every process of the run (launcher, torchrun's agent, the
template, proxies), divided by N. The load average goes with every run: on a shared machine it
moves the figures more than anything else.
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

from simgpu.pool import descendants

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "rank_costs.py"


def _memory(pid: int) -> tuple[float, float]:
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                if value.strip().endswith("kB"):
                    fields[key] = int(value.split()[0])
    except OSError:
        return 0.0, 0.0
    return (fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / 1024, fields.get("Pss", 0) / 1024


def run_once(mode: str, ranks: int, args: argparse.Namespace) -> dict:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    program = [str(PROGRAM), "--steps", str(args.steps), "--width", str(args.width)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if mode == "plain":
        cmd = [*torchrun, *program, "--device", "cpu", "--backend", "gloo"]
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        flags = ["--no-template"] if mode == "no-template" else []
        cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(ranks), *flags, *torchrun, *program]
    load_before = os.getloadavg()
    env["BENCH_T0"] = repr(time.time())
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    rows, whole = [], None
    for line in proc.stdout:
        if line.startswith("{"):
            rows.append(json.loads(line))
        elif line.strip() == "HOLD":
            pids = [proc.pid, *descendants(proc.pid)]
            mems = [_memory(p) for p in pids]
            whole = {"processes": len(pids), "uss_mb": sum(m[0] for m in mems), "pss_mb": sum(m[1] for m in mems)}
    _, err = proc.communicate(timeout=args.timeout)
    wall = time.monotonic() - start
    if proc.returncode != 0 or len(rows) != ranks or whole is None:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}, {len(rows)} rows):\n{err[-3000:]}")
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    return {"mode": mode, "ranks": ranks, "wall_s": wall, "load_before": load_before, "load_after": os.getloadavg(),
            "first_collective_s_median": med("first_collective_s"),
            "first_collective_s_max": max(r["first_collective_s"] for r in rows),
            "step_s_median": med("step_s"), "all_reduce_4KiB_s_median": med("all_reduce_4KiB_s"),
            "rank_uss_mb_median": med("uss_mb"), "tensor_mb": med("tensor_mb"),
            "run_uss_mb_per_rank": whole["uss_mb"] / ranks, "run_pss_mb_per_rank": whole["pss_mb"] / ranks,
            "run_processes": whole["processes"], "losses_equal": len({round(r["loss"], 6) for r in rows}) == 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 32, 64])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--no-template-up-to", type=int, default=8,
                        help="also run simgpu run --no-template (the old launch) up to this many ranks")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = []
    for ranks in args.ranks:
        modes = ["plain", "simulated"] + (["no-template"] if ranks <= args.no_template_up_to else [])
        for mode in modes:
            row = run_once(mode, ranks, args)
            results.append(row)
            print(f"{mode:11} {ranks:3} ranks: wall {row['wall_s']:6.1f} s  first collective median "
                  f"{row['first_collective_s_median']:6.2f} s max {row['first_collective_s_max']:6.2f} s  step "
                  f"{row['step_s_median'] * 1e3:7.2f} ms  all_reduce 4KiB {row['all_reduce_4KiB_s_median'] * 1e3:7.2f} ms"
                  f"  rank USS {row['rank_uss_mb_median']:6.1f} MB  run USS/rank {row['run_uss_mb_per_rank']:6.1f} MB"
                  f"  PSS/rank {row['run_pss_mb_per_rank']:6.1f} MB  load {row['load_before'][0]:.1f}", flush=True)
        plain = next(r for r in results if r["ranks"] == ranks and r["mode"] == "plain")
        sim = next(r for r in results if r["ranks"] == ranks and r["mode"] == "simulated")
        print(f"  simulated/plain at {ranks}: wall {sim['wall_s'] / plain['wall_s']:.2f}x  first collective "
              f"{sim['first_collective_s_median'] / plain['first_collective_s_median']:.2f}x  step "
              f"{sim['step_s_median'] / plain['step_s_median']:.2f}x  all_reduce "
              f"{sim['all_reduce_4KiB_s_median'] / plain['all_reduce_4KiB_s_median']:.2f}x  USS/rank "
              f"{sim['run_uss_mb_per_rank'] / plain['run_uss_mb_per_rank']:.2f}x", flush=True)
    if args.json:
        from realgpu.environment import host_run_facts, process_environment

        meta = {**process_environment("gloo"), **host_run_facts(HERE.parent), "command": " ".join(sys.argv),
                "steps": args.steps, "width": args.width}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
