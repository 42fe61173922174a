"""realgpu-bench: collective bandwidth and latency through torch.distributed, at nccl-tests grade.

    realgpu-bench -b 8 -e 1G -f 2 [-g 2,4] [--collectives all_reduce,all_gather,...]
                  [-d float] [-o sum] [-r 0] [-n 20] [-w 5] [-G 0] [--json F] [--png F]
    python -m realgpu.bench ...   (the same)

One rank process per GPU from the harness's warm pool (simgpu.pool with GPU binding), the public
torch.distributed call for each collective, CUDA-event timing over `-n` back-to-back launches after
`-w` warm-ups, the median across ranks; algbw and busbw as nccl-tests defines them (busbw factor
from the conformance spec of the collective). `-G N` captures the `-n` launches in a CUDA graph and
replays it N times (nccl-tests' -G). Every (collective, size, placement) result is checked once
against the NumPy oracle after its timing; a wrong result makes the exit status 1.

`--backend gloo` (or sim) runs the same on CPU processes, timed by the host clock: for trying the
tool without GPUs, and for the harness's own tests; its figures say nothing about GPUs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import sys
from typing import Any, Sequence

from realgpu.bench_ops import COLLECTIVES, Plan, Result, bench_rank
from realgpu.environment import rank_environment

# nccl-tests' type and op names, and ours (conformance.dtypes / oracle names)
DTYPE_NAMES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
               "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64",
               "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
OP_NAMES = {"sum": "sum", "prod": "product", "min": "min", "max": "max", "avg": "avg"}
PLACEMENT_WORDS = {"in": "in place", "out": "out of place"}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class UsageError(ValueError):
    """Bad arguments or a machine that cannot run the request: one line, exit status 2."""


def parse_size(text: str) -> int:
    """nccl-tests' sizes: a number of bytes with an optional K, M, G or T (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", text.upper())
    if not match:
        raise UsageError(f"size {text!r}: expected bytes such as 8, 64K, 128M or 4G")
    return int(match.group(1)) * _UNITS[match.group(2)]


def sizes(begin: int, end: int, factor: float | None, step: int | None) -> list[int]:
    """begin, then times factor (or plus step) while not past end, as nccl-tests scans them."""
    if begin <= 0 or end < begin:
        raise UsageError(f"sizes: need 0 < begin <= end, got begin {begin} and end {end}")
    if factor is not None and factor <= 1:
        raise UsageError(f"-f/--stepfactor must be greater than 1, got {factor}")
    out, size = [], begin
    while size <= end:
        out.append(size)
        size = max(size + 1, int(size * factor)) if factor else size + (step or (1 << 20))
    return out


def _world_sizes(text: str | None, available: int, available_what: str = "this machine can give") -> list[int]:
    if text is None:
        return [available]
    try:
        wanted = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"-g/--gpus {text!r}: expected world sizes such as 4 or 2,4") from None
    too_many = [w for w in wanted if w > available or w < 1]
    if too_many:
        raise UsageError(f"-g/--gpus asks for world size(s) {too_many}; {available_what} 1 to {available}")
    return wanted


def _collectives(text: str) -> list[str]:
    names = list(COLLECTIVES) if text == "all" else [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in names if x not in COLLECTIVES]
    if unknown:
        raise UsageError(f"--collectives: unknown {unknown}; known: {', '.join(COLLECTIVES)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="realgpu-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size (nccl-tests' -b), e.g. 8, 64K, 1G")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size (nccl-tests' -e)")
    p.add_argument("-f", "--stepfactor", type=float, default=None, help="multiply the size by this each step")
    p.add_argument("-i", "--stepbytes", default=None, help="or add this many bytes each step (default 1M)")
    p.add_argument("-g", "--gpus", default=None, help="world sizes to run, e.g. 4 or 2,4 (default: every visible GPU)")
    p.add_argument("--collectives", default="all", help=f"comma list or 'all': {', '.join(COLLECTIVES)}")
    p.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPE_NAMES), help="element type")
    p.add_argument("-o", "--op", default="sum", choices=sorted(OP_NAMES), help="reduce op of reducing collectives")
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast, reduce, scatter, gather")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed launches per size")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed launches first")
    p.add_argument("--trials", type=int, default=1, help="repeat the timed -n launches this many times and "
                   "report the median (a host hiccup in one trial no longer counts; nccl-tests times one)")
    p.add_argument("-G", "--cudagraph", type=int, default=0, help="capture the -n launches in a CUDA graph and "
                   "replay it this many times (0: eager)")
    p.add_argument("--placement", default="out,in", help="out (separate buffers), in (in place), or both")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="check each result against the oracle")
    p.add_argument("--backend", default="nccl", help="nccl (GPUs), or gloo/sim on CPU processes (no GPU figures)")
    p.add_argument("--cpu-ranks", type=int, default=2, help="world size available to CPU backends")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one collective's sweep")
    p.add_argument("--json", dest="json_path", default=None, help="write every figure and the environment here")
    p.add_argument("--png", dest="png_path", default=None, help="plot busbw against size (needs matplotlib)")
    return p


def _binding(backend: str) -> tuple[Any, int]:
    """The pool binding for the backend and how many ranks it can have."""
    import dataclasses

    from simgpu.selection import binding_for

    if backend == "nccl":
        from realgpu.leases import worker_lease

        lease = worker_lease()
        if lease.held < 1:
            raise UsageError(f"--backend nccl needs CUDA GPUs; {lease.describe()}")
        return dataclasses.replace(binding_for("nccl", lease=lease), init_timeout=180.0), lease.held
    import torch.distributed as dist

    if backend == "sim":
        import simgpu.backend  # noqa: F401  (importing it registers "sim")
    if backend not in dist.Backend.backend_list:
        raise UsageError(f"--backend {backend!r} is not a registered torch.distributed backend "
                         f"(registered: {', '.join(dist.Backend.backend_list)})")
    return binding_for(backend), 0


def summarize(collective: str, world_size: int, mode: str, per_rank: list[list[Result]], plan: Plan) -> list[dict]:
    """One row per (size, placement): the median time across ranks, algbw, busbw, and the check."""
    factor = COLLECTIVES[collective].spec().busbw_factor(world_size)
    rows = []
    for i, first in enumerate(per_rank[0]):
        at = [results[i] for results in per_rank]
        times = [r.time_us for r in at]
        median = statistics.median(times)
        algbw = first.size / (median * 1e-6) / 1e9 if median > 0 else 0.0
        bad = [f"rank {rank}: {r.detail}" for rank, r in enumerate(at) if not r.ok]
        rows.append({"collective": collective, "world_size": world_size, "mode": mode, "placement": first.placement,
                     "size": first.size, "count": first.count, "type": plan.dtype,
                     "redop": plan.op if COLLECTIVES[collective].reduces else "none",
                     "root": plan.root if COLLECTIVES[collective].rooted else -1,
                     "time_us": median, "time_us_ranks": times, "algbw": algbw, "busbw": algbw * factor,
                     "ok": not bad, "wrong": "; ".join(bad)[:2000],
                     "checked": plan.check})
    return rows


def write_json(doc: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def run(args: argparse.Namespace, out: Any = None) -> dict:
    """Run the whole sweep; returns the JSON document (also printed as tables, to `out` or stdout)."""
    out = sys.stdout if out is None else out
    from simgpu.pool import RankPool, RankPoolError

    from realgpu.bench_report import format_table

    begin, end = parse_size(args.minbytes), parse_size(args.maxbytes)
    step = parse_size(args.stepbytes) if args.stepbytes else None
    size_list = sizes(begin, end, args.stepfactor, step)
    names = _collectives(args.collectives)
    placements = tuple(x.strip() for x in args.placement.split(",") if x.strip())
    if not placements or set(placements) - {"in", "out"}:
        raise UsageError(f"--placement {args.placement!r}: expected out, in, or out,in")
    if args.iters < 1 or args.warmup_iters < 0 or args.cudagraph < 0 or args.trials < 1:
        raise UsageError("-n and --trials must be at least 1, -w and -G at least 0")
    binding, gpus = _binding(args.backend)
    if args.cudagraph and binding.device != "cuda":
        raise UsageError("-G/--cudagraph needs GPUs (CUDA graphs); drop it for CPU backends")
    if not gpus and args.cpu_ranks < 1:
        raise UsageError(f"--cpu-ranks must be at least 1, got {args.cpu_ranks}")
    world_sizes = _world_sizes(args.gpus, gpus or args.cpu_ranks,
                               "this machine can give" if gpus else "--cpu-ranks allows")
    flavor = "gloo" if args.backend == "gloo" else "nccl"
    mode = f"graph x{args.cudagraph}" if args.cudagraph else "eager"
    doc: dict = {"tool": "realgpu.bench", "command": "realgpu-bench " + " ".join(shlex.quote(a) for a in args.argv),
                 "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "settings": {"iters": args.iters, "warmup": args.warmup_iters, "cudagraph": args.cudagraph,
                              "trials": args.trials,
                              "datatype": args.datatype, "op": args.op, "root": args.root,
                              "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}},
                 "environment": {}, "results": []}
    for world_size in world_sizes:
        if not 0 <= args.root < world_size:
            raise UsageError(f"-r/--root {args.root} is not a rank of world size {world_size}")
        pool = RankPool(world_size, binding, timeout=args.timeout)
        try:
            env = pool.run(rank_environment)[0]
            if not env.ok:
                raise UsageError(f"rank 0 could not describe its device: {env.error_type}: {env.error}")
            doc["environment"] = {k: v for k, v in env.value.items() if k != "world_size"}
            for name in names:
                col = COLLECTIVES[name]
                if name == "sendrecv" and world_size < 2:
                    continue
                plan = Plan(name, size_list, DTYPE_NAMES[args.datatype], OP_NAMES[args.op], args.root,
                            args.iters, args.warmup_iters, args.cudagraph, placements, bool(args.check), flavor,
                            args.trials)
                outcomes = pool.run(bench_rank, plan)
                failed = [o for o in outcomes if not o.ok]
                if failed:
                    raise RuntimeError(f"{name} at world size {world_size}: " +
                                       "; ".join(o.describe() for o in failed))
                rows = summarize(name, world_size, mode, [o.value for o in outcomes], plan)
                doc["results"].extend(rows)
                if args.json_path:  # kept current, so a run cut off by a time limit keeps what it measured
                    write_json(doc, args.json_path)
                print(format_table(rows, doc["environment"], plan, world_size, mode, col.placements), file=out,
                      flush=True)
        except RankPoolError as exc:
            raise RuntimeError(f"world size {world_size}: {exc}") from None
        finally:
            pool.close()
    return doc


def check_suite_is_ours() -> None:
    """The benchmark checks results with simgpu's conformance suite, imported as `conformance`; a
    project's own package of that name, first on sys.path, is named in one line instead of an
    ImportError from deep inside."""
    import importlib.util

    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance")
    found = importlib.util.find_spec("conformance")
    where = os.path.dirname(found.origin) if found is not None and found.origin else None
    if where is None or os.path.realpath(where) != os.path.realpath(ours):
        raise UsageError(f"the package 'conformance' here is {where or 'missing'}, not simgpu's suite ({ours}): "
                         "a package of your project shadows it; run from another directory")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_suite_is_ours()
        doc = run(args)
    except UsageError as exc:
        print(f"realgpu-bench: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"realgpu-bench: failed: {exc}", file=sys.stderr)
        return 1
    if args.json_path:
        write_json(doc, args.json_path)
    status = 0
    wrong = [r for r in doc["results"] if not r["ok"]]
    if wrong:
        print(f"realgpu-bench: {len(wrong)} result(s) disagree with the oracle, first: {wrong[0]['collective']} "
              f"{wrong[0]['size']} B {PLACEMENT_WORDS[wrong[0]['placement']]}: {wrong[0]['wrong']}", file=sys.stderr)
        status = 1
    if args.png_path:
        from realgpu.bench_report import plot_busbw

        try:
            plot_busbw(doc, args.png_path)
        except ImportError:
            print("realgpu-bench: --png needs matplotlib (pip install 'simgpu[plot]'); the tables and JSON "
                  "were written", file=sys.stderr)
            status = status or 2
    return status


if __name__ == "__main__":
    sys.exit(main())
