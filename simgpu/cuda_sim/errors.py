"""The simulation's error and environment names, importable without torch: the boot hook that
every Python process of a `simgpu run` loads must not import torch itself (a process that never
imports torch, or a Python without torch, pays nothing and sees nothing)."""

GPUS_ENV = "SIMGPU_GPUS"  # the number of simulated physical GPUs; its presence turns the simulation on


class SimulationError(RuntimeError):
    """Something a CUDA program does that the simulator cannot do on CPU: one line says what."""
