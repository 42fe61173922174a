"""Run a torchrun program with some of its ranks under cProfile (wall clock), to see where a simulated
rank's time goes (docs/warm-template.md has what it showed for the 3-D example at 64 ranks).

    simgpu run --gpus 64 torchrun --nproc-per-node 64 benchmarks/profile_rank.py \\
        --ranks 0,63 --out /tmp/prof -- examples/programs/fsdp_tp_pp.py [program arguments]

Each chosen rank writes <out>/rank<R>.prof (read it with `python -m pstats`); every rank writes
<out>/rank<R>.times: when its program started and ended (epoch seconds). `--cpu` times the profiled
thread's CPU (time.thread_time) instead of the wall clock: on a loaded machine, and for a rank that waits
on collectives, the wall clock is mostly other processes' turns and waiting.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import runpy
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="0", help="comma-separated global ranks to profile")
    parser.add_argument("--out", required=True, help="folder for the profiles and start/end times")
    parser.add_argument("--cpu", action="store_true", help="profile the thread's CPU time, not the wall clock")
    parser.add_argument("program", help="the program's script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args()
    rank = os.environ.get("RANK")
    if rank is None:
        raise SystemExit("profile_rank.py: RANK is not set: start it under torchrun")
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    sys.argv = [args.program, *args.args]
    timer = (time.thread_time,) if args.cpu else ()
    profile = cProfile.Profile(*timer) if rank in args.ranks.split(",") else None
    try:
        if profile is not None:
            profile.enable()
        runpy.run_path(args.program, run_name="__main__")
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(args.out, f"rank{rank}.prof"))
        with open(os.path.join(args.out, f"rank{rank}.times"), "w") as f:
            f.write(f"{started} {time.time()}\n")


if __name__ == "__main__":
    main()
