"""Where a run ran: torch, CUDA, NCCL, driver and device, collected on a rank and printed in one line.

Both realgpu-bench's outputs and the conformance suite's capability report and failure messages carry
it, so that a figure or a finding names the versions it holds for.
"""
from __future__ import annotations

from typing import Any


def rank_environment(ctx: Any) -> dict:
    """Rank function: the versions and device every output records (CUDA is touched on the ranks only,
    never in a controller)."""
    env = {"backend": ctx.backend, "world_size": ctx.world_size}
    return {**env, **_versions(ctx.device if getattr(ctx.device, "type", "cpu") == "cuda" else None)}


def process_environment(backend: str) -> dict:
    """The same, for a process that drives GPUs itself (the single-process worker): its first GPU on
    real hardware (--backend=nccl), the host's processor otherwise."""
    import torch

    return {"backend": backend, **_versions(torch.device("cuda", 0) if backend == "nccl" else None)}


def host_run_facts(repo: Any) -> dict:
    """What a CPU benchmark's figures depend on besides torch's versions: when, on how many CPUs (and how
    many this process may use), on which platform, at which commit of `repo` (None outside git)."""
    import datetime
    import os
    import platform
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    try:
        usable_cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cpus = os.cpu_count()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "usable_cpus": usable_cpus,
            "git_commit": commit}


def _versions(device: Any) -> dict:
    import os
    import platform

    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(), "host": platform.node()}
    if device is None:
        return {**env, "device": platform.processor() or platform.machine()}
    return {**env, "cuda": torch.version.cuda, "nccl": ".".join(str(x) for x in torch.cuda.nccl.version()),
            "device": torch.cuda.get_device_name(device), "driver": driver_version(),
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def driver_version() -> str:
    """The NVIDIA kernel driver's version, from /proc or nvidia-smi; "unknown" without either."""
    import re

    try:
        with open("/proc/driver/nvidia/version") as f:
            match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", f.read())
            if match:
                return match.group(1)
    except OSError:
        pass
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def environment_line(env: dict) -> str:
    """'torch 2.11.0+cu130 | CUDA 13.0 | NCCL 2.28.9 | driver 580.159.04 | NVIDIA H200' (what is known)."""
    parts = [f"torch {env.get('torch', '?')}"]
    for key, label in (("cuda", "CUDA"), ("nccl", "NCCL"), ("driver", "driver"), ("backend", "backend")):
        if env.get(key):
            parts.append(f"{label} {env[key]}")
    parts.append(str(env.get("device", "?")))
    return " | ".join(parts)
