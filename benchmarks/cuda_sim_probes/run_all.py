"""Run every probe on both environments, with and without the torch.cuda shim,
and print markdown tables (steps x environment).

Run: python3 benchmarks/cuda_sim_probes/run_all.py > /tmp/probe_tables.md
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYS = [("2.13 CPU wheel", "/work/main/.venv/bin/python"),
       ("2.14.1+cu130 (no GPU)", "/work/venv214/bin/python")]
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


only = sys.argv[1:]
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
