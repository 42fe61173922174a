"""The GPU every simulated device stands for, an H100/H200 SXM: what torch.cuda.get_device_properties
reports, and what CUDA's kernels size their launch grids by (the random kernels' grids, hence which
Philox counters they use: random_kernels.py). Recorded on an H200 and an H100: 132 SMs, 2048 threads each."""
from __future__ import annotations

CAPABILITY = (9, 0)
MULTI_PROCESSOR_COUNT = 132
MAX_THREADS_PER_MULTI_PROCESSOR = 2048
