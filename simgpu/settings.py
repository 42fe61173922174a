"""Environment settings the ranks read, checked once, up front, in the process that starts them.

A malformed SIMGPU_FAULTS or SIMGPU_STRICT_TIMEOUT would otherwise be found by every rank at its
first collective, once per test, as a traceback; here it is one line before anything starts
(RankPool, the pytest plugins, `simgpu run`). No torch import: the launcher uses it too.
"""
from __future__ import annotations

import math
import os
from typing import Mapping

STRICT_TIMEOUT_ENV = "SIMGPU_STRICT_TIMEOUT"
GROUP_SECRET_ENV = "SIMGPU_GROUP_SECRET"  # per start of a pool (or per `simgpu run`): signs strict-check records
SIM_INTERFACE_ENV = "SIMGPU_SIM_INTERFACE"  # `simgpu run --sim-interface`: the sim groups' network (default loopback)


def sim_interface(name: str, available: list[str]) -> str:
    """A network interface for the sim backend's gloo groups: one of `available`, or ValueError naming them."""
    if name not in available:
        raise ValueError(f"no network interface named {name!r} here (this host has: {', '.join(sorted(available))})")
    return name


def strict_timeout(value: str) -> float:
    """SIMGPU_STRICT_TIMEOUT's value as seconds (a finite number > 0), or ValueError saying what is wrong."""
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{STRICT_TIMEOUT_ENV} must be a number of seconds, got {value!r}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"{STRICT_TIMEOUT_ENV} must be a finite number of seconds > 0, got {value!r}")
    return seconds


STRICT_LEADER_FROM_ENV = "SIMGPU_STRICT_LEADER_FROM"  # group size from which rank 0 checks for the group


def strict_leader_from(value: str) -> int:
    """SIMGPU_STRICT_LEADER_FROM's value: a whole number >= 2, or ValueError saying what is wrong."""
    if not value.strip().isdigit() or int(value) < 2:
        raise ValueError(f"{STRICT_LEADER_FROM_ENV} must be a whole number of ranks >= 2, got {value!r}")
    return int(value)


STRICT_DEFAULT_S = 30.0  # the strict check's deadline when nothing sets it (docs/simulator.md)


def strict_deadline_below(call_deadline: float, env: Mapping[str, str] | None = None) -> str | None:
    """The SIMGPU_STRICT_TIMEOUT to give ranks whose calls end at `call_deadline` seconds (None: the
    environment already sets one). Half the call's deadline, at most the documented 30 s: the ranks
    that waited in a collective then raise CollectiveTimeout naming the missing rank while the hung
    one still runs, so the blame falls on it, not on every rank at the outer deadline."""
    env = os.environ if env is None else env
    if env.get(STRICT_TIMEOUT_ENV):
        return None
    return f"{min(STRICT_DEFAULT_S, call_deadline / 2):g}"


GPU_MEMORY_ENV = "SIMGPU_GPU_MEMORY_GB"  # simgpu.cuda_sim.devices reads it (memory of each simulated GPU)
MAX_GPUS = 1024  # simulated GPUs a run may declare: each is a rank process on this host in practice


def gpu_count(value: str | int, name: str = "--gpus") -> int:
    """A number of simulated GPUs: an int from 1 to MAX_GPUS, or ValueError naming `name`."""
    try:
        gpus = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number of GPUs, got {value!r}") from None
    if gpus < 1:
        raise ValueError(f"{name} must be at least 1, got {gpus}")
    if gpus > MAX_GPUS:
        raise ValueError(f"{name} must be at most {MAX_GPUS} (each simulated GPU's rank is a process on this "
                         f"host), got {gpus}")
    return gpus


def gpu_memory_gb(value: str, name: str = GPU_MEMORY_ENV) -> float:
    """Memory of one simulated GPU in GiB: a finite number > 0, or ValueError naming `name`."""
    try:
        gb = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of GiB, got {value!r}") from None
    if not (gb > 0 and math.isfinite(gb)):
        raise ValueError(f"{name} must be a finite number of GiB > 0, got {value!r}")
    return gb


def check_environment(env: Mapping[str, str] | None = None, world_size: int | None = None,
                      where: str = "the run") -> None:
    """Raise ValueError (one line, naming the variable) if a setting the ranks will read is malformed;
    with world_size, also if SIMGPU_FAULTS names a rank `where` does not have (it would never fire)."""
    from simgpu import faults

    env = os.environ if env is None else env
    if env.get(STRICT_TIMEOUT_ENV):
        strict_timeout(env[STRICT_TIMEOUT_ENV])
    if env.get(STRICT_LEADER_FROM_ENV):
        strict_leader_from(env[STRICT_LEADER_FROM_ENV])
    if env.get(GPU_MEMORY_ENV):
        gpu_memory_gb(env[GPU_MEMORY_ENV])
    if env.get(faults.ENV_VAR):
        try:
            armed = faults.from_json(env[faults.ENV_VAR])
            if world_size is not None:
                faults.check_ranks(armed, world_size, where)
        except (ValueError, TypeError) as exc:
            text = str(exc)
            text = text[len("simgpu.faults: "):] if text.startswith("simgpu.faults: ") else text
            raise ValueError(text if faults.ENV_VAR in text else f"{faults.ENV_VAR}: {text}") from None


def positive_seconds(name: str, value: float | None) -> None:
    """A timeout given in seconds must be a finite number > 0 (None: not given)."""
    if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
