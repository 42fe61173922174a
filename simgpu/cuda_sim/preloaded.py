"""Imported by a process that forks simulated-GPU ranks (the pool's fork server): the modules
`simgpu.cuda_sim.activate()` installs, imported once for every rank, nothing activated."""
import simgpu.cuda_sim

simgpu.cuda_sim.preload()
