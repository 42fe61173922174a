"""What `simgpu run` costs a training program: the same DDP or FSDP2 training step on CPU processes
with plain gloo (no simulation) and on simulated GPUs, in one run, as a ratio.

    python benchmarks/simgpu_overhead.py --ranks 2 4 --json benchmarks/results/simgpu-overhead-2core.json

Each configuration alternates plain and simulated runs (--repeats times each, so a change of load on
the machine hits both alike); a run's figure is the median time of its timed steps
(benchmarks/programs/train_step.py: forward, backward, AdamW step); the ratio is simulated / plain.
The CPU time rank 0's process spent per step (all its threads) gives a second ratio, `cpu_ratio`:
on a shared machine the wall ratio moves with the load (FSDP2 at 2 ranks: 0.77x, then 0.98x, two runs
at load 8.5), the CPU ratio less; the load average goes with every run. Of that CPU time, the kernel's
part (`*_sys_s`) and rank 0's minor page faults per step (`*_minor_faults`) go with each series too:
memory that the C library gives back to the system and the next step touches afresh costs the same
on both sides, but it comes and goes between runs (MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_
in the environment hold it still, for plain and simulated alike; `simgpu run` sets them, and
MALLOC_TOP_PAD_, for its processes unless SIMGPU_MALLOC_DEFAULTS=0: simgpu/host_malloc.py;
--also-plain-malloc adds a series of plain runs with the same settings, --also-sim-malloc and
--also-sim-no-malloc one of simulated runs with SIMGPU_MALLOC_DEFAULTS=1 or 0: their A/B in one run). --also-no-strict adds a third series
with the cross-rank check off (SIMGPU_STRICT=0): what the check costs, in the same run. --baseline DIR adds
a series simulated by another checkout of simgpu (DIR first on PYTHONPATH, e.g. `git worktree add` or
`git archive main | tar -x -C DIR`), alternating with the others: a change's before and after in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "train_step.py"


def _torchrun(ranks: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]


def run_once(wrap: str, ranks: int, simulated: bool, model: list[str], strict: bool = True,
             simgpu_tree: str | None = None, extra_env: dict[str, str] | None = None,
             extra_args: tuple[str, ...] = ()) -> tuple[float, float, float, float]:
    """The median wall, CPU and kernel CPU time (seconds) and minor page faults of a step in one run of the training program
    (strict=False: the simulator's cross-rank check off, SIMGPU_STRICT=0, to see what it costs;
    simgpu_tree: simulated by the simgpu of that checkout instead of this one; extra_env: added to the
    environment, e.g. plain with `simgpu run`'s malloc settings; extra_args: added to the program's, e.g.
    plain with AdamW's foreach kernels)."""
    program = [str(PROGRAM), "--wrap", wrap, *model, *extra_args]
    if simulated:
        cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(ranks), *_torchrun(ranks), *program]
    else:
        cmd = [*_torchrun(ranks), *program, "--device", "cpu", "--backend", "gloo"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({} if strict else {"SIMGPU_STRICT": "0"}), **(extra_env or {})}
    if simgpu_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([simgpu_tree, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    if not simulated:  # plain CPU processes: on a machine with GPUs, torch must not pick them (FSDP2's mesh)
        env["CUDA_VISIBLE_DEVICES"] = ""
    # `python -m simgpu` finds simgpu in its working directory before PYTHONPATH: run from the repository root, a
    # baseline series ran this checkout's simgpu, not the baseline's (the A/B compared a tree with itself). So
    # each series runs in the root of the checkout it measures.
    cwd = simgpu_tree if simgpu_tree is not None else str(HERE.parent)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=cwd)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(lines[-1])
    return (statistics.median(out["step_seconds"]), statistics.median(out["step_cpu_seconds"]),
            statistics.median(out["step_sys_seconds"]), statistics.median(out["step_minor_faults"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--wraps", nargs="+", default=["ddp", "fsdp2"], choices=["ddp", "fsdp2"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--no-strict", action="store_true",
                        help="simulated runs without the cross-rank check (SIMGPU_STRICT=0): what the check costs")
    parser.add_argument("--also-no-strict", action="store_true",
                        help="a third series in the same run: simulated without the cross-rank check")
    parser.add_argument("--baseline", default=None, metavar="DIR",
                        help="a series simulated by the simgpu checkout in DIR (the change's before, in the same run)")
    parser.add_argument("--also-plain-malloc", action="store_true",
                        help="a series of plain runs with the malloc settings `simgpu run` gives its processes "
                             "(simgpu.host_malloc): how much of the gap those settings would close for plain too")
    parser.add_argument("--also-sim-malloc", action="store_true",
                        help="a series of simulated runs with SIMGPU_MALLOC_DEFAULTS=1 (simgpu.host_malloc's settings): "
                             "an A/B of those settings in the same run")
    parser.add_argument("--also-sim-no-malloc", action="store_true",
                        help="a series of simulated runs with SIMGPU_MALLOC_DEFAULTS=0 (glibc's own behaviour): "
                             "the A/B the other way round, once the settings are the default")
    parser.add_argument("--also-plain-foreach", action="store_true",
                        help="a series of plain runs with AdamW's foreach kernels, the ones torch picks for CUDA "
                             "tensors and so for simulated GPUs: the simulation's own cost, apart from CUDA's choice")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.baseline is not None and not (Path(args.baseline) / "simgpu" / "__init__.py").is_file():
        raise SystemExit(f"simgpu_overhead.py: --baseline {args.baseline}: no simgpu package there")
    if args.baseline is not None:
        args.baseline = str(Path(args.baseline).resolve())  # its runs start there (run_once)
    model = ["--width", str(args.width), "--layers", str(args.layers), "--batch", str(args.batch)]
    # name: (simulated, strict, simgpu tree, extra environment, extra program arguments)
    series: dict[str, tuple] = {"plain": (False, True, None, None, ()),
                                "simulated": (True, not args.no_strict, None, None, ())}
    if args.also_no_strict:
        series["no_strict"] = (True, False, None, None, ())
    if args.baseline is not None:
        series["baseline"] = (True, not args.no_strict, str(Path(args.baseline).resolve()), None, ())
    if args.also_plain_malloc:
        from simgpu import host_malloc

        series["plain_malloc"] = (False, True, None, host_malloc.defaults({**os.environ, host_malloc.ENV: "1"}), ())
    if args.also_sim_malloc:
        series["sim_malloc"] = (True, not args.no_strict, None, {"SIMGPU_MALLOC_DEFAULTS": "1"}, ())
    if args.also_sim_no_malloc:
        series["sim_no_malloc"] = (True, not args.no_strict, None, {"SIMGPU_MALLOC_DEFAULTS": "0"}, ())
    if args.also_plain_foreach:
        series["plain_foreach"] = (False, True, None, None, ("--adam", "foreach"))
    rows = []
    for wrap in args.wraps:
        for ranks in args.ranks:
            runs: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in series}
            loads = []
            for _ in range(args.repeats):
                for name, (simulated, strict, tree, extra, extra_args) in series.items():
                    loads.append(os.getloadavg()[0])
                    runs[name].append(run_once(wrap, ranks, simulated, model, strict=strict, simgpu_tree=tree,
                                               extra_env=extra, extra_args=extra_args))
            row: dict = {"wrap": wrap, "ranks": ranks, "load_1min": loads}
            for name, got in runs.items():
                row[f"{name}_s"] = statistics.median(run[0] for run in got)
                row[f"{name}_cpu_s"] = statistics.median(run[1] for run in got)
                row[f"{name}_sys_s"] = statistics.median(run[2] for run in got)
                row[f"{name}_minor_faults"] = statistics.median(run[3] for run in got)
                row[f"{name}_runs"] = [run[0] for run in got]
                row[f"{name}_cpu_runs"] = [run[1] for run in got]
            for name in series:
                if name != "plain":
                    prefix = "" if name == "simulated" else f"{name}_"
                    row[f"{prefix}ratio"] = row[f"{name}_s"] / row["plain_s"]
                    row[f"{prefix}cpu_ratio"] = row[f"{name}_cpu_s"] / row["plain_cpu_s"]
            if "plain_foreach" in series:  # simulated against plain with the same optimizer kernels
                row["vs_foreach_ratio"] = row["simulated_s"] / row["plain_foreach_s"]
                row["vs_foreach_cpu_ratio"] = row["simulated_cpu_s"] / row["plain_foreach_cpu_s"]
            rows.append(row)
            extra = "".join(f"  {name.replace('_', '-')} {row[f'{name}_ratio']:.2f}x wall {row[f'{name}_cpu_ratio']:.2f}x cpu"
                            for name in ("no_strict", "baseline", "sim_malloc", "sim_no_malloc", "plain_malloc", "plain_foreach",
                                         "vs_foreach")
                            if f"{name}_ratio" in row)
            print(f"{wrap:6} {ranks} ranks: plain {row['plain_s'] * 1e3:8.1f} ms ({row['plain_cpu_s'] * 1e3:.1f} cpu)"
                  f"  simulated {row['simulated_s'] * 1e3:8.1f} ms ({row['simulated_cpu_s'] * 1e3:.1f} cpu)"
                  f"  ratio {row['ratio']:.2f}x wall {row['cpu_ratio']:.2f}x cpu{extra}  load {max(loads):.1f}"
                  f"  sys ms/faults: " + " ".join(f"{name} {row[f'{name}_sys_s'] * 1e3:.0f}/{row[f'{name}_minor_faults']:.0f}"
                                                  for name in series),
                  flush=True)
    if args.json:
        from realgpu.environment import host_run_facts, process_environment
        from simgpu import host_malloc

        meta = {**process_environment("gloo"), **host_run_facts(HERE.parent), "strict": not args.no_strict,
                "baseline": args.baseline,
                "load_1min_at_end": os.getloadavg()[0],
                "model": {"width": args.width, "layers": args.layers, "batch": args.batch, "tokens_per_sample": 16},
                "repeats": args.repeats, "command": " ".join(sys.argv),
                "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
                "simulated_malloc_defaults": host_malloc.defaults(os.environ)}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
