"""simgpu: run multi-GPU PyTorch code on N simulated GPUs (CPU rank processes over gloo).

The rank pool (`simgpu.pool`) is the one process-pool implementation of the project; the
strict "sim" torch.distributed backend (`simgpu.backend`) holds CPU ranks to NCCL's rules.
"""
from simgpu.pool import Binding, RankOutcome, RankPool, RankPoolError

__all__ = ["Binding", "RankOutcome", "RankPool", "RankPoolError"]
