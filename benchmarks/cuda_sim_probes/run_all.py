"""Run every probe on both environments, with and without the torch.cuda shim,
and print markdown tables (steps x environment).

Run: python3 benchmarks/cuda_sim_probes/run_all.py [--python LABEL=PATH ...] [CANDIDATE ...] > probe_tables.md
Each --python is an interpreter with its own torch (a column pair: without and with the shim); the
default is the project's venv, .venv/bin/python, else the interpreter running this script.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT_VENV_PY = os.path.join(HERE, "..", "..", ".venv", "bin", "python")
PROBES = [
    ("A", "probe_function_mode.py", {}),
    ("B", "probe_dispatch_mode.py", {}),
    ("C", "probe_wrapper_subclass.py", {}),
    ("C+guard", "probe_wrapper_subclass.py", {"PROBE_C_GUARD": "1"}),
    ("D", "probe_privateuse1.py", {}),
]


def run(py, script, env_extra):
    env = dict(os.environ, **env_extra)
    p = subprocess.run([py, os.path.join(HERE, script)], env=env, capture_output=True,
                       text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])["results"]
    tail = (p.stderr.strip().splitlines() or ["?"])[-1]
    return {"(probe crashed)": f"rc {p.returncode}: {tail}"}


def cell(v):
    return (v or "").replace("|", "\\|")


def interpreters_and_candidates(argv):
    """(label, python) pairs from --python LABEL=PATH, and the candidate labels named."""
    parser = argparse.ArgumentParser(description="the CUDA presentation probes, as markdown tables")
    parser.add_argument("--python", action="append", default=[], metavar="LABEL=PATH",
                        help="an interpreter with its own torch; repeat for more columns")
    parser.add_argument("candidates", nargs="*", help="A, B, C, C+guard, D (default: all)")
    args = parser.parse_args(argv)
    pys = [tuple(spec.split("=", 1)) for spec in args.python if "=" in spec]
    if len(pys) != len(args.python):
        parser.error("--python takes LABEL=PATH")
    if not pys:
        py = ROOT_VENV_PY if os.path.exists(ROOT_VENV_PY) else sys.executable
        version = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                 text=True).stdout.strip() or "?"
        pys = [(f"torch {version}", py)]
    return pys, args.candidates


PYS, only = interpreters_and_candidates(sys.argv[1:])
for label, script, extra in PROBES:
    if only and label not in only:
        continue
    cols = []
    for pyname, py in PYS:
        for shim in ("0", "1"):
            res = run(py, script, dict(extra, SIM_CUDA_SHIM=shim))
            cols.append((pyname + (" + shim" if shim == "1" else ""), res))
    keys = []
    for _, res in cols:
        for k in res:
            if k not in keys and k != "shim":
                keys.append(k)
    print(f"\n### {label} ({script}{' ' + str(extra) if extra else ''})\n")
    print("| step | " + " | ".join(c for c, _ in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for k in keys:
        print(f"| {cell(k)} | " + " | ".join(cell(res.get(k, "-")) for _, res in cols) + " |")
    sys.stdout.flush()
