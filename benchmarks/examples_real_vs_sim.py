"""The example programs (examples/programs/) on real GPUs or on simulated ones, their printed numbers
collected side by side: the fidelity of `simgpu run` against the hardware it stands in for.

    python benchmarks/examples_real_vs_sim.py --gpus 2 --json real-g2.json              # on a GPU box
    python benchmarks/examples_real_vs_sim.py --gpus 2 --simulated --json sim-g2.json   # anywhere
    python benchmarks/examples_real_vs_sim.py --compare real-g2.json sim-g2.json         # the table

Each program prints `step <i> loss <x>` and `final <x>`; a program that exits non-zero is recorded
with the end of its stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"
NCCL_SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# name -> (launched by torchrun, the smallest GPU count it runs on)
LAUNCH = {"ddp_spawn": (False, 2), "ddp_torchrun": (True, 2), "data_parallel": (False, 2),
          "model_parallel": (False, 2), "fsdp2": (True, 2), "fsdp2_mesh": (True, 2), "fsdp1": (True, 2),
          "hsdp": (True, 4), "tensor_parallel": (True, 2), "sequence_parallel": (True, 2), "fsdp_tp": (True, 4),
          "dcp_checkpoint": (True, 2), "pipeline": (True, 2), "funcol": (True, 2), "compile_ddp": (True, 2),
          "amp_ddp": (True, 2), "cuda_graph_dp": (True, 2)}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# mp.spawn's children re-import the parent's main module, which the memory probe would replace
NO_MEMORY_PROBE = {"ddp_spawn"}


def run(name: str, gpus: int, simulated: bool, timeout: float, memory: bool = False) -> dict:
    torchrun, _ = LAUNCH[name]
    script = str(PROGRAMS / f"{name}.py")
    extra = [str(_port())] if name == "ddp_spawn" else [tempfile.mkdtemp()] if name == "dcp_checkpoint" else []
    probe = memory and name not in NO_MEMORY_PROBE
    program = ["-m", "benchmarks.peak_memory_probe", script, *extra] if probe else [script, *extra]
    cmd = ([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={gpus}", f"--master-port={_port()}",
            *program] if torchrun else [sys.executable, *program])
    if simulated:
        cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(gpus), *cmd]
    memory_dir = tempfile.mkdtemp(prefix="peak-memory-")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **NCCL_SAFE, "PEAK_MEMORY_DIR": memory_dir})
    losses = {int(m[1]): float(m[2]) for m in re.finditer(r"^step (\d+) loss (\S+)$", done.stdout, re.M)}
    finals = [float(x) for x in re.findall(r"^final (\S+)$", done.stdout, re.M)]
    out = {"returncode": done.returncode, "losses": [losses[i] for i in sorted(losses)],
           "final": finals[0] if finals else None, "stderr_tail": done.stderr[-3000:] if done.returncode else ""}
    if probe:
        out["memory"] = _gather_memory(Path(memory_dir))
    return out


def _gather_memory(folder: Path) -> dict[str, dict[str, int]]:
    """The probe's files merged: GPU index -> peaks (each GPU is touched by one process in these programs)."""
    merged: dict[str, dict[str, int]] = {}
    for path in sorted(folder.glob("*.json")):
        merged.update(json.loads(path.read_text())["gpus"])
    return merged


def compare(real_path: str, sim_path: str) -> None:
    real, sim = json.loads(Path(real_path).read_text()), json.loads(Path(sim_path).read_text())
    print(f"real: {real['meta']}\nsimulated: {sim['meta']}\n")
    print("| program | real | simulated | largest relative difference (losses and final) |\n|---|---|---|---|")
    for name in real["programs"]:
        r, s = real["programs"][name], sim["programs"].get(name)
        if s is None:
            continue
        status = lambda x: "ok" if x["returncode"] == 0 else f"exit {x['returncode']}"  # noqa: E731
        diff = "-"
        if r["returncode"] == 0 and s["returncode"] == 0 and len(r["losses"]) == len(s["losses"]):
            pairs = list(zip(r["losses"] + [r["final"]], s["losses"] + [s["final"]]))
            diff = f"{max(abs(a - b) / max(abs(a), 1e-12) for a, b in pairs):.2e}"
        print(f"| {name} | {status(r)} | {status(s)} | {diff} |")
    memory_rows = [name for name in real["programs"] if real["programs"][name].get("memory")
                   and sim["programs"].get(name, {}).get("memory")]
    if memory_rows:
        print("\n| program | GPU | peak allocated real / simulated (MiB) | difference | "
              "peak reserved real / simulated (MiB) | difference |\n|---|---|---|---|---|---|")
    for name in memory_rows:
        r, s = real["programs"][name]["memory"], sim["programs"][name]["memory"]
        for gpu in sorted(r, key=int):
            if gpu in s:
                cells = []
                for key in ("max_allocated", "max_reserved"):
                    a, b = r[gpu][key], s[gpu][key]
                    cells += [f"{a / 2**20:.2f} / {b / 2**20:.2f}", f"{(b - a) / max(a, 1):+.1%}"]
                print(f"| {name} | {gpu} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--simulated", action="store_true", help="under simgpu run instead of real GPUs")
    parser.add_argument("--programs", nargs="*", default=None)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", default=None)
    parser.add_argument("--memory", action="store_true",
                        help="also record each GPU's peak allocated/reserved memory (benchmarks/peak_memory_probe.py)")
    parser.add_argument("--compare", nargs=2, metavar=("REAL", "SIMULATED"))
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    import torch

    names = args.programs or [n for n, (_, least) in LAUNCH.items() if least <= args.gpus]
    results = {}
    for name in names:
        results[name] = run(name, args.gpus, args.simulated, args.timeout, args.memory)
        print(f"{name}: exit {results[name]['returncode']} losses {results[name]['losses']} "
              f"final {results[name]['final']}", flush=True)
    meta = {"gpus": args.gpus, "simulated": args.simulated, "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                                                   and not args.simulated else "simulated"),
            "command": " ".join(sys.argv)}
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "programs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
