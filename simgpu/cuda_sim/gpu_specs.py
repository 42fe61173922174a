"""The GPUs a plan (`simgpu run --plan GPU`) can be made for: memory, peak rates, and which cost-model
preset prices their collectives.

Until the GPU box's calibration (benchmarks/plan_reference/calibrate.py, issue 33) is in, the rates are
the datasheets' dense peaks times one stated derating: what a large GEMM reaches on these parts is
typically 60-75% of the datasheet's dense figure, and a streaming kernel 80-90% of HBM bandwidth. They
are placeholders with their origin said, not measurements; `calibrated` stays False until a measured
table replaces them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

_GIB = 1 << 30
MATMUL_DERATE = 0.7    # achieved / datasheet dense peak of a large GEMM (assumed until calibrated)
BANDWIDTH_DERATE = 0.85  # achieved / datasheet HBM bandwidth of a streaming kernel (assumed until calibrated)


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model. `total_memory` is what torch.cuda.get_device_properties reports there;
    `context_bytes` and `nccl_bytes` are the device memory outside the caching allocator (CUDA context,
    NCCL's buffers per communicator), which a plan adds to each GPU's reserved peak."""

    name: str
    description: str
    total_memory: int
    tflops: dict[str, float] = field(default_factory=dict)  # dense peak by compute dtype, datasheet
    hbm_gbs: float = 0.0
    comm_machine: str = ""
    context_bytes: int = 0
    nccl_bytes_per_comm: int = 0
    calibrated: bool = False

    def matmul_rate(self, dtype: str) -> float:
        """FLOP/s a large matmul in this dtype reaches (fp32 without TF32 at the fp32 rate)."""
        return self.tflops.get(dtype, self.tflops["fp32"]) * 1e12 * MATMUL_DERATE

    @property
    def bandwidth(self) -> float:
        """Bytes/s a streaming kernel reaches."""
        return self.hbm_gbs * 1e9 * BANDWIDTH_DERATE


# Context and NCCL figures: stated constants until step_reference.py's mem_get_info figures are in
# (a CUDA 12/13 context on Hopper holds about 500 MiB; NCCL's buffers per communicator on one NVLink
# node, default NCCL_BUFFSIZE 4 MiB x channels x peers, are of the order of 200-400 MiB).
_CONTEXT = 512 << 20
_NCCL_PER_COMM = 256 << 20

GPUS: dict[str, GPUSpec] = {
    spec.name: spec for spec in (
        GPUSpec("h100-80g", "NVIDIA H100 SXM 80 GB (torch reports 79.11 GiB)", int(79.11 * _GIB),
                {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9, "fp8": 1979.0}, 3350.0,
                "h100-nvlink4-nccl-defaults", _CONTEXT, _NCCL_PER_COMM),
        GPUSpec("h200-141g", "NVIDIA H200 SXM 141 GB (torch reports 139.81 GiB)", int(139.81 * _GIB),
                {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9, "fp8": 1979.0}, 4800.0,
                "h200-nvlink4", _CONTEXT, _NCCL_PER_COMM),
    )
}


class UnknownGPU(ValueError):
    pass


def gpu(name: str) -> GPUSpec:
    """The named GPU, or a one-line error listing the known ones."""
    try:
        return GPUS[name]
    except KeyError:
        raise UnknownGPU(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}") from None
