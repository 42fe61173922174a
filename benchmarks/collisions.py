"""No fixed ports, no shared files: run the conformance suite under `pytest -n 2` many times in a row.

    python benchmarks/collisions.py --runs 20

Each run is `python -m pytest conformance --backend=sim -n 2 -p no:cacheprovider -q` in the
repository root. A run counts as a collision when its output shows an address/port or file clash
("Address already in use", "EADDRINUSE", "FileExistsError", "collision"); any non-zero exit counts
as a failure. Every run carries a marker in its environment (SIMGPU_BENCH_MARK=<uuid>), inherited
by the xdist workers, the fork servers and the ranks; after all runs the processes still carrying
it are counted as leftovers. Exits non-zero on any collision, failure or leftover.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from simgpu.reaper import with_env

ROOT = Path(__file__).resolve().parent.parent
MARK_VAR = "SIMGPU_BENCH_MARK"
SIGNATURES = re.compile(r"Address already in use|EADDRINUSE|FileExistsError|\bcollision\b", re.IGNORECASE)
SUMMARY = re.compile(r"\d+ (passed|failed|error)")


def marked_pids(mark: str) -> list[int]:
    return with_env(MARK_VAR, mark)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", default="2", help="pytest-xdist -n value (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before one run is killed")
    parser.add_argument("--log-dir", default=None, help="keep every run's output here (default: a temp dir)")
    args = parser.parse_args()

    mark = uuid.uuid4().hex
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="simgpu-bench-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    report_dir = tempfile.mkdtemp(prefix="simgpu-bench-report-")
    env = dict(os.environ, **{MARK_VAR: mark})
    cmd = [sys.executable, "-m", "pytest", "conformance", "--backend=sim", "-n", args.workers,
           "-p", "no:cacheprovider", "-q", f"--report-dir={report_dir}"]
    print(f"{args.runs} runs of: {' '.join(cmd[1:])}  (cwd {ROOT}, logs {log_dir})", flush=True)
    print(f"{'run':>4} {'exit':>5} {'seconds':>8} {'collision':>9}  summary", flush=True)

    rows = []
    for i in range(1, args.runs + 1):
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
            code, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = "T/O"
            out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        seconds = time.monotonic() - start
        (log_dir / f"run{i:02d}.log").write_text(out)
        hits = sorted(set(m.group(0) for m in SIGNATURES.finditer(out)))
        summary = next((ln.strip() for ln in reversed(out.splitlines()) if SUMMARY.search(ln)), "")
        rows.append((i, code, seconds, hits))
        print(f"{i:>4} {code!s:>5} {seconds:>8.1f} {'YES' if hits else 'no':>9}  {summary[:70]}"
              + (f"  {hits}" if hits else ""), flush=True)

    time.sleep(2.0)  # let the kernel reap the last run's processes
    leftovers = marked_pids(mark)
    collisions = sum(1 for r in rows if r[3])
    failures = sum(1 for r in rows if r[1] != 0)
    times = [r[2] for r in rows]
    print()
    print(f"runs {len(rows)}  collisions {collisions}  failed runs {failures}  leftover processes {len(leftovers)}")
    if times:
        print(f"seconds per run: min {min(times):.1f}  mean {sum(times) / len(times):.1f}  max {max(times):.1f}"
              f"  total {sum(times):.1f}")
    for pid in leftovers:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = "(gone)"
        print(f"  leftover pid {pid}: {cmdline[:150]}")
    return 1 if (collisions or failures or leftovers) else 0


if __name__ == "__main__":
    sys.exit(main())
