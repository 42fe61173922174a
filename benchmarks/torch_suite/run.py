"""Run PyTorch's own distributed tests (benchmarks/torch_suite/test_torch_distributed.py) on simulated GPUs.

    python benchmarks/torch_suite/run.py                      # W=2, both subsets
    python benchmarks/torch_suite/run.py --world-size 4 --subset ddp --timeout 3600

Two subsets, each its own `simgpu run --gpus W python -m pytest ...` with BACKEND=nccl WORLD_SIZE=W and a
fresh TEMP_DIR (what test_distributed_spawn.py needs):

  collectives  test names matching COLLECTIVES (re.match, i.e. anchored at the start of the name)
  ddp          test names matching DDP

The names are taken from `pytest --collect-only` (run under simgpu too) and passed to pytest as node ids,
so exactly the collected names that match run (pytest's -k would match substrings: `-k test_reduce` also
picks test_all_reduce_*). Per-test outcomes come from pytest's --junitxml; the summary (JSON) lands in
--out, with each subset's full log and junit file. See docs/torch-distributed-suite.md.

Each subset is bounded by --timeout: after it, pytest gets SIGINT (it still writes its junit file, the
interrupted test is lost), then SIGTERM, then SIGKILL. Every process started for a subset carries a unique
marker in its environment; whatever still carries it when the subset ends is killed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TEST_FILE = HERE / "test_torch_distributed.py"
TEST_CLASS = "TestDistBackendWithSpawn"

COLLECTIVES = re.compile(
    r"test_(all_reduce|reduce|broadcast|all_gather|gather|scatter|all_to_all|reduce_scatter|barrier|send_recv"
    r"|isend|irecv|batch_isend_irecv|all_gather_object|gather_object|scatter_object|broadcast_object)")
DDP = re.compile(r"test_(DistributedDataParallel|ddp)")
SUBSETS = {"collectives": COLLECTIVES, "ddp": DDP}
MARKER_VAR = "SIMGPU_TORCH_SUITE_RUN"


def log(msg: str) -> None:
    print(f"[torch_suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def environment(world_size: int, temp_dir: str, marker: str, cpp_stacktraces: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BACKEND="nccl", WORLD_SIZE=str(world_size), TEMP_DIR=temp_dir, PYTHONUNBUFFERED="1")
    env[MARKER_VAR] = marker
    if cpp_stacktraces:
        env["TORCH_SHOW_CPP_STACKTRACES"] = "1"
    return env


def simgpu_cmd(world_size: int, timeout: float, pytest_args: list[str]) -> list[str]:
    # simgpu's own --timeout (SIGKILL, no junit file) is only the backstop behind ours.
    return [sys.executable, "-m", "simgpu", "run", "--gpus", str(world_size), "--timeout", str(timeout + 120),
            "-m", "pytest", *pytest_args]


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries this run's marker (only ever the ones this script started)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


def kill_leftovers(marker: str) -> int:
    pids = marked_pids(marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(1)
        pids = marked_pids(marker)
        if not pids:
            break
    return len(pids)


def run_bounded(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float,
                cwd: Path = REPO) -> tuple[int, bool, float]:
    """Run cmd, output to log_path; SIGINT/SIGTERM/SIGKILL after timeout. (exit status, timed out, seconds)."""
    start = time.monotonic()
    timed_out = False
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            log(f"past --timeout {timeout:g} s: interrupting")
            for sig, grace in ((signal.SIGINT, 60), (signal.SIGTERM, 15), (signal.SIGKILL, 15)):
                try:
                    os.killpg(proc.pid, sig)  # simgpu forwards SIGINT/SIGTERM to the program's group
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
            raise
    return proc.returncode, timed_out, time.monotonic() - start


def collect(world_size: int, marker: str, out_dir: Path, timeout: float) -> list[str]:
    temp_dir = tempfile.mkdtemp(prefix="torch_suite_collect_")
    log_path = out_dir / "collect.log"
    rc, timed_out, _ = run_bounded(
        simgpu_cmd(world_size, timeout, [str(TEST_FILE), "--collect-only", "-q", "-p", "no:cacheprovider"]),
        environment(world_size, temp_dir, marker, False), log_path, timeout)
    prefix = f"{TEST_FILE.relative_to(REPO)}::{TEST_CLASS}::"
    names = [line.strip()[len(prefix):] for line in log_path.read_text().splitlines()
             if line.strip().startswith(prefix)]
    if rc != 0 or timed_out or not names:
        sys.exit(f"torch_suite: collecting the tests failed (exit {rc}); see {log_path}")
    return names


def parse_junit(path: Path) -> dict[str, dict]:
    results: dict[str, dict] = {}
    if not path.exists():
        return results
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        entry = {"outcome": "passed", "time_s": round(float(case.get("time") or 0), 2)}
        for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            el = case.find(tag)
            if el is not None:
                entry["outcome"] = outcome
                entry["message"] = (el.get("message") or "").strip()
                if outcome != "skipped":
                    entry["details"] = (el.text or "").strip()
                    entry["decisive"] = decisive_errors(entry["details"]) or [{"error": entry["message"][:600]}]
                break
        results[name] = entry
    return results


PROCESS_ERROR = re.compile(r"Process (\d+) exited with error code \d+ and exception:\n")


def decisive_errors(details: str) -> list[dict]:
    """Per failing rank: the exception text and the innermost frame, from the failure's full report.

    MultiProcessTestCase reports each rank that raised as "Process i exited with error code 10 and
    exception:" followed by the rank's traceback; a hang as "Process i terminated or timed out".
    """
    lines = [ln[12:] if ln.startswith("E ") else ln for ln in details.splitlines()]  # pytest's "E    " prefix
    text = "\n".join(lines)
    found = []
    blocks = PROCESS_ERROR.split(text)
    for rank, block in zip(blocks[1::2], blocks[2::2]):
        tb = block.split("\n")
        files = [i for i, ln in enumerate(tb) if ln.startswith('  File "')]
        if not files:
            continue
        i = files[-1] + 1
        while i < len(tb) and (tb[i].startswith("    ") or not tb[i].strip()):
            i += 1
        exc = []
        for ln in tb[i:]:
            if ln.startswith("To execute this test") or re.match(r"^\S+\.py:\d+: ", ln):
                break
            if ln.strip():
                exc.append(ln.strip())
        # the frame to name: the innermost in simgpu, else in the test file, else the innermost
        pick = ([f for f in files if "/simgpu/" in tb[f]] or [f for f in files if "distributed_test.py" in tb[f]]
                or files)[-1]
        where = re.sub(r'^  File "(?:.*/site-packages/|.*/(?=simgpu/))?', "", tb[pick]).replace('", line ', ":")
        found.append({"rank": int(rank), "error": " | ".join(exc[:4])[:600], "where": where})
    timed_out = re.search(r"Process (\d+) terminated or timed out after ([\d.]+) seconds", text)
    if timed_out and not found:
        found.append({"rank": int(timed_out.group(1)), "error": f"timed out after {float(timed_out.group(2)):.0f} s",
                      "where": "(see the log for each rank's stack)"})
    return found


def skip_reason(message: str) -> str:
    # pytest's junit message for a unittest.SkipTest is the reason, sometimes prefixed by "Skipped: ".
    return re.sub(r"^(Skipped|skipped)[: ]+", "", message.strip()).strip() or "(no reason given)"


def run_subset(name: str, tests: list[str], args: argparse.Namespace, marker: str, out_dir: Path) -> dict:
    temp_dir = tempfile.mkdtemp(prefix=f"torch_suite_{name}_")
    junit = out_dir / f"{name}.junit.xml"
    log_path = out_dir / f"{name}.log"
    junit.unlink(missing_ok=True)
    node_ids = [f"{TEST_FILE.relative_to(REPO)}::{TEST_CLASS}::{t}" for t in tests]
    pytest_args = [*node_ids, "-v", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}",
                   "-o", "junit_logging=no", "-o", "junit_family=xunit2"]
    log(f"{name}: {len(tests)} tests, W={args.world_size}, TEMP_DIR={temp_dir}, log {log_path}")
    rc, timed_out, seconds = run_bounded(simgpu_cmd(args.world_size, args.timeout, pytest_args),
                                         environment(args.world_size, temp_dir, marker, args.cpp_stacktraces),
                                         log_path, args.timeout)
    left = kill_leftovers(marker)
    results = parse_junit(junit)
    for t in tests:
        results.setdefault(t, {"outcome": "not run"})  # interrupted, or pytest died before writing junit
    counts = Counter(r["outcome"] for r in results.values())
    skips = Counter(skip_reason(r.get("message", "")) for r in results.values() if r["outcome"] == "skipped")
    log(f"{name}: exit {rc}{' (timed out)' if timed_out else ''} in {seconds:.0f} s: "
        + ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped", "not run") if counts[k]))
    return {"tests": len(tests), "exit_status": rc, "timed_out": timed_out, "wall_s": round(seconds, 1),
            "leftover_processes_killed": left, "counts": dict(counts), "skip_reasons": dict(skips.most_common()),
            "log": str(log_path), "junit": str(junit), "results": dict(sorted(results.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", "-W", type=int, default=2, help="simulated GPUs and ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=2400, help="seconds per subset (default 2400)")
    parser.add_argument("--subset", choices=[*SUBSETS, "all"], default="all")
    parser.add_argument("-k", dest="only", default=None, help="further restrict to names matching this regex")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "torch_suite",
                        help="folder for summary.json, logs and junit files (default reports/torch_suite)")
    parser.add_argument("--cpp-stacktraces", action="store_true", help="set TORCH_SHOW_CPP_STACKTRACES=1")
    args = parser.parse_args(argv)

    import importlib.util
    import torch
    missing = [m for m in ("pytest", "expecttest") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"torch_suite: {', '.join(missing)} missing: torch's distributed tests need it "
              f"({sys.executable} -m pip install {' '.join(missing)})", file=sys.stderr)
        return 2

    args.out.mkdir(parents=True, exist_ok=True)
    marker = uuid.uuid4().hex
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    summary: dict = {"torch": torch.__version__, "python": sys.version.split()[0],
                     "world_size": args.world_size, "date": started.isoformat(timespec="seconds"),
                     "patterns": {k: v.pattern for k, v in SUBSETS.items()}, "subsets": {}}
    try:
        names = collect(args.world_size, marker, args.out, 300)
        log(f"collected {len(names)} tests")
        for subset, pattern in SUBSETS.items():
            if args.subset not in ("all", subset):
                continue
            tests = [n for n in names if pattern.match(n) and (args.only is None or re.search(args.only, n))]
            summary["subsets"][subset] = run_subset(subset, tests, args, marker, args.out)
            summary["wall_s"] = round(time.monotonic() - t0, 1)
            (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    finally:
        kill_leftovers(marker)

    summary["wall_s"] = round(time.monotonic() - t0, 1)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\ntorch {summary['torch']}, W={args.world_size}, {summary['wall_s']:.0f} s; summary {args.out / 'summary.json'}")
    for subset, s in summary["subsets"].items():
        c = s["counts"]
        print(f"  {subset:12s} {s['tests']:4d} tests: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
              f"{c.get('error', 0)} errors, {c.get('skipped', 0)} skipped, {c.get('not run', 0)} not run"
              + ("  (timed out)" if s["timed_out"] else ""))
        for reason, n in s["skip_reasons"].items():
            print(f"      skip x{n}: {reason}")
        for t, r in s["results"].items():
            if r["outcome"] in ("failed", "error", "not run"):
                print(f"      {r['outcome'].upper():8s} {t}")
                for d in r.get("decisive", []):
                    print(f"          rank {d.get('rank', '?')}: {d['error'][:200]}  [{d.get('where', '')}]")
    bad = any(c in s["counts"] for s in summary["subsets"].values() for c in ("failed", "error", "not run"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
