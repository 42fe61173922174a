"""PyTorch's own FSDP2, DTensor, tensor-parallel, DeviceMesh, functional-collective and checkpoint tests,
on simulated GPUs (`simgpu run --gpus N`) or, with --real, on the machine's GPUs; --compare gives the
agreement table of two runs. See docs/torch-distributed-suite.md.

    python benchmarks/torch_suite/upstream.py --pytorch-src DIR --gpus 4            # simulated
    python benchmarks/torch_suite/upstream.py --pytorch-src DIR --real --jobs 8     # GPU box: the reference
    python benchmarks/torch_suite/upstream.py --compare REAL.json SIM.json          # agreement, per family

The test files are not in the torch wheel and are not copied into this repository: --pytorch-src names a
PyTorch source checkout (or a sparse copy holding test/distributed/... of the files below; the helpers
they import from torch.testing._internal are in the wheel). A file of FAMILIES that the checkout lacks is
reported `missing`. DIR/SOURCES.json, where present, says where each file came from (repository, commit);
the runner copies it, with each file's sha256, into its output, so two runs can be checked to have run
byte-identical files. The `distributed_test` family is the wheel's own distributed_test.py (collectives
and DDP subsets of benchmarks/torch_suite/run.py), which needs no checkout.

Each unit (a file, or with --chunk a group of its tests) runs as one pytest process with a junit file,
bounded by --timeout (SIGINT, SIGTERM, SIGKILL, as run.py; every process carries a marker and whatever
still carries it afterwards is killed). Output: --out/results.json (per test: family, kind, outcome,
seconds, the decisive error) and per unit a log and a junit file.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import run as suite  # noqa: E402  (benchmarks/torch_suite/run.py: bounded runs, junit parsing)

# The families of issue 27, as paths under the PyTorch checkout.
FAMILIES: dict[str, list[str]] = {
    "fsdp2": [
        "test/distributed/_composable/fsdp/test_fully_shard_state_dict.py",
        "test/distributed/_composable/fsdp/test_fully_shard_init.py",
        "test/distributed/_composable/fsdp/test_fully_shard_frozen.py",
        "test/distributed/_composable/fsdp/test_fully_shard_clip_grad_norm_.py",
        "test/distributed/_composable/fsdp/test_fully_shard_memory.py",
        "test/distributed/_composable/fsdp/test_fully_shard_overlap.py",
        "test/distributed/_composable/fsdp/test_fully_shard_grad_scaler.py",
        "test/distributed/_composable/fsdp/test_fully_shard_ignore_params.py",
    ],
    "dtensor": [
        "test/distributed/tensor/test_random_ops.py",
        "test/distributed/tensor/test_fake.py",
        "test/distributed/tensor/test_dtensor.py",
        "test/distributed/tensor/test_redistribute.py",
        "test/distributed/tensor/test_init.py",
    ],
    "tensor_parallel": [
        "test/distributed/tensor/parallel/test_parallelize_api.py",
        "test/distributed/tensor/parallel/test_tp_examples.py",
        "test/distributed/tensor/parallel/test_tp_style.py",
        "test/distributed/tensor/parallel/test_tp_random_state.py",
    ],
    "device_mesh": ["test/distributed/test_device_mesh.py"],
    "functional_collectives": ["test/distributed/test_c10d_functional_native.py"],
    "checkpoint": [
        "test/distributed/checkpoint/test_dtensor_checkpoint.py",
        "test/distributed/checkpoint/test_state_dict.py",
        "test/distributed/checkpoint/fsdp/test_fsdp_dsd.py",
        "test/distributed/checkpoint/test_state_dict_utils.py",
    ],
}
# Tests that bind one fixed port (test_device_mesh.py's _set_env_var: MASTER_PORT 25364 with env://): with
# --chunk they are kept together in one unit of their own, so that with --jobs no two of them run at once.
SAME_PORT = re.compile(r"test_device_mesh\.py::(DeviceMeshSetDeviceTest::|DeviceMeshTest::test_init_process_group$)")
DISTRIBUTED_TEST = "distributed_test"  # the wheel's distributed_test.py, run.py's subsets
NCCL_SAFETY = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def log(msg: str) -> None:
    print(f"[upstream {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def kind_of(test_id: str) -> str:
    """LocalTensorMode classes (create_local_tensor_test_class) run every rank in one process; the others
are mostly one process per rank (MultiProcessTestCase), a few one process or threads."""
    return "local_tensor" if "WithLocalTensor" in test_id else "other"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def simulated_visibility(gpus: int, outer: dict[str, str]) -> dict[str, str]:
    """A simulated run hides the host's real GPUs from the CUDA driver (CUDA_VISIBLE_DEVICES=), so that on a
GPU box with a CUDA build of torch anything the simulation misses fails instead of running on a real GPU;
the simulated GPUs are named by SIMGPU_VISIBLE_DEVICES (the caller's CUDA_VISIBLE_DEVICES, else all)."""
    named = outer.get("SIMGPU_VISIBLE_DEVICES", outer.get("CUDA_VISIBLE_DEVICES"))
    return {"CUDA_VISIBLE_DEVICES": "",
            "SIMGPU_VISIBLE_DEVICES": named if named is not None else ",".join(map(str, range(gpus)))}


def environment(args: argparse.Namespace, marker: str, extra: dict | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(NCCL_SAFETY)  # on a GPU box: never NVLink multicast (see the device notes); harmless here
    if not args.real:
        env.update(simulated_visibility(args.gpus, os.environ))
    env["PYTHONUNBUFFERED"] = "1"
    if args.test_timeout:  # MultiProcessTestCase's own per-test limit (300 s), a host-speed bound
        env["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(int(args.test_timeout))
    env[suite.MARKER_VAR] = marker
    if args.cpp_stacktraces:
        env["TORCH_SHOW_CPP_STACKTRACES"] = "1"
    env.update(extra or {})
    return env


def launcher(args: argparse.Namespace) -> list[str]:
    if args.real:
        return [sys.executable, "-m", "pytest"]
    return [sys.executable, "-m", "simgpu", "run", "--gpus", str(args.gpus), "--timeout", str(args.timeout + 120),
            "-m", "pytest"]


PYTEST_FLAGS = ["-v", "-rs", "-p", "no:cacheprovider", "-p", "no:simgpu", "-o", "junit_logging=no",
                "-o", "junit_family=xunit2"]


def isolated(out: Path, root: Path) -> list[str]:
    """pytest options that keep this repository's pytest configuration (pyproject.toml) away from
    PyTorch's files: an empty ini file, and the checkout as rootdir (test ids file::Class::test)."""
    ini = out / "pytest.ini"
    if not ini.exists():
        ini.write_text("[pytest]\n")
    return ["-c", str(ini), "--rootdir", str(root)]


def collect(args: argparse.Namespace, src: Path, rel: str, marker: str, out: Path) -> tuple[list[str], str]:
    """(test ids, '') or ([], the decisive error line) when the file does not import here (e.g. a stored
    version newer or older than the installed torch)."""
    log_path = out / f"collect.{safe(rel)}.log"
    rc, _, _ = suite.run_bounded(launcher(args) + [rel, "--collect-only", "-q", "-p", "no:cacheprovider",
                                                   *isolated(out, src)],
                                 environment(args, marker), log_path, collect_limit(args), cwd=src)
    text = log_path.read_text(errors="replace")
    ids = [ln.strip() for ln in text.splitlines() if ln.startswith(rel + "::")]
    if ids or rc == 0:
        return ids, ""
    return [], last_error_line(text) or f"collection failed (exit {rc}), see {log_path.name}"


def collect_limit(args: argparse.Namespace) -> float:
    """A collection's limit: 600 s, or a third of --budget."""
    return min(600.0, args.budget / 3) if args.budget else 600.0


def safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:150]


def units_for(args: argparse.Namespace, src: Path, marker: str, out: Path,
              errors: dict | None = None) -> tuple[list[dict], dict]:
    """(units to run, {path: family} of files the checkout lacks) for the families asked for; a file that
    fails to collect goes into `errors` as a file-level result. Files are collected --jobs at a time."""
    missing, files = {}, []
    for family, paths in FAMILIES.items():
        if args.families and family not in args.families:
            continue
        for rel in paths:
            if args.files and not re.search(args.files, rel):
                continue
            if (src / rel).is_file():
                files.append((family, rel))
            else:
                missing[rel] = family
    if not (args.chunk or args.reference or args.skip_known):
        return [{"family": family, "file": rel, "name": safe(rel),
                 "args": [rel] + (["-k", args.k] if args.k else [])} for family, rel in files], missing
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        collected = list(pool.map(lambda f: collect(args, src, f[1], marker, out), files))
    units = []
    for (family, rel), (ids, error) in zip(files, collected):
        if error and errors is not None:
            errors[rel] = {"family": family, "kind": "file", "outcome": "error", "message": error[:800]}
        ids = [i for i in ids if not args.only or re.search(args.only, i)]
        if args.reference:  # only what passed there (the measure is of those)
            ids = [i for i in ids if args.reference.get(i, {}).get("outcome") == "passed"]
        ids = [i for i in ids if i not in args.skip_known]
        same_port = [i for i in ids if SAME_PORT.search(i)]
        if same_port:
            units.append({"family": family, "file": rel, "args": same_port, "name": f"{safe(rel)}.same_port"})
            ids = [i for i in ids if i not in same_port]
        size = args.chunk or len(ids) or 1
        for n in range(0, len(ids), size):
            units.append({"family": family, "file": rel, "args": ids[n:n + size], "name": f"{safe(rel)}.{n // size}"})
    return units, missing


# What run_bounded may take past a unit's limit: SIGINT's grace (60 s), SIGTERM's and SIGKILL's (15 s each).
STOP_GRACE_S = 90
MIN_UNIT_S = 30  # a unit that would get less than this under --budget is not started


def unit_limit(args: argparse.Namespace, deadline: float | None) -> float:
    """The unit's time limit: --timeout, cut so that the unit ends (grace included) before --budget does."""
    if deadline is None:
        return args.timeout
    return min(args.timeout, deadline - time.monotonic() - STOP_GRACE_S)


def run_unit(unit: dict, args: argparse.Namespace, src: Path, marker: str, out: Path,
             deadline: float | None = None) -> dict:
    limit = unit_limit(args, deadline)
    if limit < MIN_UNIT_S:  # not run: --budget is spent; its tests are listed, not counted as failing
        log(f"{unit['name']}: not started, --budget spent")
        return {"unit": unit["name"], "file": unit["file"], "not_run": "budget spent",
                "tests": [a for a in unit["args"] if "::" in a], "results": {}}
    junit = out / f"{unit['name']}.junit.xml"
    log_path = out / f"{unit['name']}.log"
    junit.unlink(missing_ok=True)
    extra = unit.get("env")
    cwd = unit.get("cwd", src)
    flags = PYTEST_FLAGS + isolated(out, cwd)
    rc, timed_out, seconds = suite.run_bounded(launcher(args) + unit["args"] + flags + [f"--junitxml={junit}"],
                                               environment(args, marker, extra), log_path, limit, cwd=cwd)
    results = {}
    for name, r in parse_junit_ids(junit).items():
        if args.only and not re.search(args.only, name):
            continue
        r["family"] = unit["family"]
        r["kind"] = kind_of(name)
        r.pop("details", None)
        results[name] = r
    status = "timed out" if timed_out else ("ok" if results else f"no results (exit {rc})")
    if not results:
        tail = log_path.read_text(errors="replace").splitlines()[-15:] if log_path.exists() else []
        results[unit["file"]] = {"family": unit["family"], "kind": "file", "outcome": "error",
                                 "message": " | ".join(ln.strip() for ln in tail if ln.strip())[-800:]}
    log(f"{unit['name']}: {status} in {seconds:.0f} s: " + ", ".join(
        f"{n} {k}" for k, n in Counter(r["outcome"] for r in results.values()).items()))
    return {"unit": unit["name"], "file": unit["file"], "exit_status": rc, "timed_out": timed_out,
            "wall_s": round(seconds, 1), "results": results}


def parse_junit_ids(path: Path) -> dict[str, dict]:
    """junit testcases keyed file::Class::test (run.parse_junit keys by bare name)."""
    import xml.etree.ElementTree as ET

    out: dict[str, dict] = {}
    if not path.exists():
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        classname = case.get("classname") or ""
        parts = classname.split(".")
        cls = parts[-1] if parts else ""
        module = "/".join(parts[:-1]) + ".py" if len(parts) > 1 else ""
        key = f"{module}::{cls}::{case.get('name')}"
        entry = {"outcome": "passed", "time_s": round(float(case.get("time") or 0), 2)}
        for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            el = case.find(tag)
            if el is not None:
                entry["outcome"] = outcome
                message = (el.get("message") or "").strip()
                if outcome == "skipped":
                    entry["message"] = suite.skip_reason(message)[:300]
                else:
                    decisive = suite.decisive_errors((el.text or "").strip())
                    entry["message"] = message[:600]
                    if decisive:
                        entry["decisive"] = decisive
                    else:
                        entry["decisive"] = [{"error": last_error_line(el.text or "") or message[:600]}]
                break
        out[key] = entry
    return out


def last_error_line(text: str) -> str:
    lines = [ln[1:].strip() if ln.startswith("E ") else ln.strip() for ln in text.splitlines()]
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Failed)\b", ln)]
    return errors[-1][:600] if errors else ""


def distributed_test_units(args: argparse.Namespace, marker: str, out: Path) -> list[dict]:
    """run.py's collectives and ddp subsets of the wheel's distributed_test.py, chunked."""
    world = str(args.gpus)
    temp = tempfile.mkdtemp(prefix="upstream_dt_collect_")
    env = {"BACKEND": "nccl", "WORLD_SIZE": world, "TEMP_DIR": temp}
    rel = str(suite.TEST_FILE.relative_to(REPO))
    log_path = out / "collect.distributed_test.log"
    suite.run_bounded(launcher(args) + [rel, "--collect-only", "-q", "-p", "no:cacheprovider", *isolated(out, REPO)],
                      environment(args, marker, env), log_path, collect_limit(args), cwd=REPO)
    prefix = f"{rel}::{suite.TEST_CLASS}::"
    names = [ln.strip()[len(prefix):] for ln in log_path.read_text().splitlines() if ln.strip().startswith(prefix)]
    units = []
    for subset, pattern in suite.SUBSETS.items():
        tests = [n for n in names if pattern.match(n) and (not args.only or re.search(args.only, n))]
        if args.reference:  # only what passed there, as for the checkout's files
            tests = [n for n in tests if args.reference.get(prefix + n, {}).get("outcome") == "passed"]
        tests = [n for n in tests if prefix + n not in args.skip_known]
        size = args.chunk or len(tests) or 1
        for n in range(0, len(tests), size):
            units.append({"family": f"{DISTRIBUTED_TEST}:{subset}", "file": rel, "cwd": REPO,
                          "name": f"distributed_test.{subset}.{n // size}",
                          "args": [prefix + t for t in tests[n:n + size]],
                          "env": {"BACKEND": "nccl", "WORLD_SIZE": world,
                                  "TEMP_DIR": tempfile.mkdtemp(prefix=f"upstream_dt_{subset}_")}})
    return units


def machine(args: argparse.Namespace) -> dict:
    import platform

    import torch

    info = {"torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", None),
            "python": platform.python_version(), "host": platform.node(),
            "mode": "real GPUs" if args.real else f"simgpu run --gpus {args.gpus}",
            "torch_cuda_build": torch.version.cuda}
    if not args.real:
        info["simulated_visibility"] = simulated_visibility(args.gpus, dict(os.environ))
    try:
        info["simgpu_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                               text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["simgpu_commit"] = None
    if args.real:
        info["cuda"] = torch.version.cuda
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
            info["driver"] = smi[0] if smi else None
        except Exception as exc:  # noqa: BLE001 - report, don't fail the run
            info["gpu_info_error"] = repr(exc)
    return info


def sources(src: Path | None) -> dict:
    if src is None:
        return {}
    manifest = {}
    if (src / "SOURCES.json").is_file():
        manifest = json.loads((src / "SOURCES.json").read_text())
    files = {}
    for paths in FAMILIES.values():
        for rel in paths:
            if (src / rel).is_file():
                files[rel] = {**manifest.get("files", {}).get(rel, {}), "sha256": sha256(src / rel)}
    return {"manifest_note": manifest.get("note"), "files": files}


def run_main(args: argparse.Namespace) -> int:
    import importlib.util

    missing_mods = [m for m in ("pytest", "expecttest") if importlib.util.find_spec(m) is None]
    if missing_mods:
        print(f"upstream: {', '.join(missing_mods)} missing ({sys.executable} -m pip install "
              f"{' '.join(missing_mods)})", file=sys.stderr)
        return 2
    src = args.pytorch_src.resolve() if args.pytorch_src else None
    want_checkout = any(f != DISTRIBUTED_TEST for f in (args.families or list(FAMILIES)))
    if want_checkout and (src is None or not (src / "test" / "distributed").is_dir()):
        print("upstream: --pytorch-src DIR must hold test/distributed/ of a PyTorch checkout", file=sys.stderr)
        return 2
    out = args.out.resolve()  # units run with the checkout as their cwd
    out.mkdir(parents=True, exist_ok=True)
    marker = uuid.uuid4().hex
    t0 = time.monotonic()

    def stop(signum: int, _frame: object) -> None:  # SIGTERM (a wrapper's timeout): end every unit first, so
        suite.kill_leftovers(marker)  # that no test outlives the runner and the results written so far stand
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    report = {"command": " ".join(shlex.quote(a) for a in sys.argv), "date": datetime.now(timezone.utc)
              .isoformat(timespec="seconds"), "machine": machine(args), "sources": sources(src),
              "gpus": args.gpus, "units": [], "missing": {}, "results": {}}
    try:
        units, report["missing"] = units_for(args, src, marker, out, report["results"]) if want_checkout else ([], {})
        wants_dt = args.families is None or DISTRIBUTED_TEST in args.families
        if wants_dt and not (args.files and not re.search(args.files, str(suite.TEST_FILE.relative_to(REPO)))):
            units += distributed_test_units(args, marker, out)
        log(f"{len(units)} units, {args.jobs} at a time, {len(report['missing'])} files missing from the checkout")

        deadline = t0 + args.budget if args.budget else None

        def one(unit: dict) -> dict:
            return run_unit(unit, args, src or REPO, marker, out, deadline)

        def record(done: dict) -> None:
            report["results"].update(done.pop("results"))
            report["units"].append(done)
            report["wall_s"] = round(time.monotonic() - t0, 1)
            (out / "results.json").write_text(json.dumps(report, indent=1, sort_keys=False))

        if args.jobs == 1:  # in this thread, so that an interrupt reaches run_bounded's handler
            for unit in units:
                record(one(unit))
        else:
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                for done in pool.map(one, units):
                    record(done)
    finally:
        suite.kill_leftovers(marker)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "results.json").write_text(json.dumps(report, indent=1))
    counts = defaultdict(Counter)
    for r in report["results"].values():
        counts[r["family"]][r["outcome"]] += 1
    print(f"\n{report['machine']['mode']}, torch {report['machine']['torch']}, {report['wall_s']:.0f} s: "
          f"{out / 'results.json'}")
    for family, c in sorted(counts.items()):
        print(f"  {family:28s} " + ", ".join(f"{n} {k}" for k, n in sorted(c.items())))
    for rel, family in report["missing"].items():
        print(f"  missing from the checkout ({family}): {rel}")
    skipped = [u for u in report["units"] if u.get("not_run")]
    if skipped:
        print(f"  not started (--budget spent): {len(skipped)} units, "
              f"{sum(len(u['tests']) for u in skipped)} tests listed under units[].tests")
    return 0


def merged(paths: list[Path]) -> dict:
    """Several runs of one mode as one: the first run's description, every run's results and sources (a later
    run's outcome for a test wins)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    return {**runs[0], "results": {k: v for run in runs for k, v in run["results"].items()},
            "sources": {"files": {k: v for run in runs for k, v in run.get("sources", {}).get("files", {}).items()}}}


def compare_main(real_paths: list[str], sim_paths: list[Path], markdown: bool) -> int:
    real = merged([Path(p) for p in real_paths])
    sim = merged(sim_paths)
    sim_path = ", ".join(map(str, sim_paths))
    rows = defaultdict(lambda: Counter())
    disagreements = []
    for test, r in sorted(real["results"].items()):
        s = sim["results"].get(test, {"outcome": "not run"})
        fam = r["family"]
        for key in (fam, f"{fam} [{r['kind']}]", "ALL", f"ALL [{r['kind']}]"):
            rows[key]["tests"] += 1
            rows[key][f"real_{r['outcome']}"] += 1
            if r["outcome"] == "passed":
                rows[key]["real_pass"] += 1
                rows[key]["both_pass"] += s["outcome"] == "passed"
                rows[key]["sim_ran"] += s["outcome"] != "not run"
        if s["outcome"] == "not run" and r["outcome"] != "passed":
            continue  # not run simulated (--reference runs what passed on GPUs)
        if r["outcome"] != s["outcome"]:
            disagreements.append((test, fam, r["outcome"], s["outcome"],
                                  (s.get("decisive") or [{}])[0].get("error") or s.get("message", "")))
    for test, s in sorted(sim["results"].items()):
        if test not in real["results"]:
            disagreements.append((test, s["family"], "absent", s["outcome"], s.get("message", "")[:200]))
    print(f"real: {real['machine'].get('mode')} torch {real['machine'].get('torch')} ({', '.join(real_paths)})")
    print(f"sim:  {sim['machine'].get('mode')} torch {sim['machine'].get('torch')} ({sim_path})")
    real_files = {k: v.get("sha256") for k, v in real.get("sources", {}).get("files", {}).items()}
    sim_files = {k: v.get("sha256") for k, v in sim.get("sources", {}).get("files", {}).items()}
    same = all(real_files.get(k) == h for k, h in sim_files.items() if k in real_files)
    print(f"test files byte-identical on both sides: {same}"
          + "".join(f"\n  only simulated (no GPU reference): {k}" for k in sorted(set(sim_files) - set(real_files))))
    header = ("| family | tests | pass on real GPUs | of those, run simulated | pass simulated | "
              "pass / pass on GPUs | pass / run |")
    print("\n" + header + "\n|---|---|---|---|---|---|---|")
    for key in sorted(rows, key=lambda k: (k.startswith("ALL"), k)):
        c = rows[key]
        pct = f"{100 * c['both_pass'] / c['real_pass']:.0f}%" if c["real_pass"] else "-"
        ran = f"{100 * c['both_pass'] / c['sim_ran']:.0f}%" if c["sim_ran"] else "-"
        print(f"| {key} | {c['tests']} | {c['real_pass']} | {c['sim_ran']} | {c['both_pass']} | {pct} | {ran} |")
    print("\nDisagreements (test, family, real, simulated, simulated error):")
    for d in disagreements:
        print(f"- {d[0]} [{d[1]}]: real {d[2]}, simulated {d[3]}" + (f": {d[4][:300]}" if d[4] else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pytorch-src", type=Path, help="PyTorch checkout (or sparse copy) holding test/distributed/")
    p.add_argument("--gpus", type=int, default=4, help="simulated GPUs (default 4); with --real, recorded only")
    p.add_argument("--real", action="store_true", help="run on this machine's GPUs, not under simgpu")
    p.add_argument("--families", type=lambda s: s.split(","), default=None,
                   help=f"comma-separated subset of {', '.join([*FAMILIES, DISTRIBUTED_TEST])}")
    p.add_argument("--files", default=None, help="regex on the files' paths: run only the files it matches")
    p.add_argument("-k", dest="k", default=None, help="pytest -k expression for every file")
    p.add_argument("--only", default=None, help="regex on test ids (with --chunk, applied before running)")
    p.add_argument("--chunk", type=int, default=0, help="split each file into groups of this many tests")
    p.add_argument("--jobs", type=int, default=1, help="units run at once (default 1)")
    p.add_argument("--reference", default=None,
                   help="results.json of a real-GPU run (several joined with commas, merged as --compare does): "
                        "run only the tests that passed there")
    p.add_argument("--skip-known", type=Path, default=None,
                   help="results.json of an earlier run of the same mode: its tests are not run again (a run that "
                        "continues one cut short by its budget; --compare merges the two)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per unit (default 1800)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run, collection included: each unit's limit is cut so that it ends "
                        f"(stopping grace, {STOP_GRACE_S} s, included) in time; units that would get less than "
                        f"{MIN_UNIT_S} s are not started and are listed under not_run (their tests count as not run)")
    p.add_argument("--test-timeout", type=float, default=None,
                   help="DISTRIBUTED_TESTS_DEFAULT_TIMEOUT: PyTorch's per-test limit for its multi-process tests "
                        "(300 s), which a loaded host can exceed before a test starts")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "torch_suite_upstream")
    p.add_argument("--cpp-stacktraces", action="store_true")
    p.add_argument("--compare", nargs="+", metavar="RESULTS",
                   help="agreement table: the real-GPU results.json (several joined with commas, merged, later "
                        "ones first), then one or more simulated ones (merged)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    if args.compare:
        if len(args.compare) < 2:
            p.error("--compare REAL SIM [SIM ...]")
        return compare_main(args.compare[0].split(","), [Path(p) for p in args.compare[1:]], args.markdown)
    if args.reference:
        args.reference = merged([Path(p) for p in args.reference.split(",")])["results"]
    args.skip_known = set(json.loads(args.skip_known.read_text())["results"]) if args.skip_known else set()
    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
