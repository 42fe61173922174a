"""The GPUs a plan (`simgpu run --plan GPU`) can be made for: memory, rates, and which cost-model preset
prices their collectives.

h200-141g carries rates measured on the GPU (benchmarks/plan_reference/calibrate.py, issue 33): one
achieved matmul rate per dtype at large shapes and one streaming bandwidth (`calibrated`). h100-80g has
not been measured: its rates are the datasheet's dense peaks times a stated derating (a large GEMM
reaches typically 60-75% of the datasheet's dense figure, a streaming kernel 80-90% of HBM bandwidth).
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
    calibrated: bool = False  # True: tflops and hbm_gbs are measured achieved rates, used as they are
    source: str = "datasheet"

    def matmul_rate(self, dtype: str) -> float:
        """FLOP/s a large matmul in this dtype reaches (fp32 without TF32 at the fp32 rate)."""
        return self.tflops.get(dtype, self.tflops["fp32"]) * 1e12 * (1.0 if self.calibrated else MATMUL_DERATE)

    @property
    def bandwidth(self) -> float:
        """Bytes/s a streaming kernel reaches."""
        return self.hbm_gbs * 1e9 * (1.0 if self.calibrated else BANDWIDTH_DERATE)


# Measured on 4x H200 (benchmarks/results/plan33-h200-x4-2026-11-26/steps.jsonl, torch 2.11.0+cu130, NCCL
# 2.28.9, NVLS off): the CUDA context 526-528 MiB (mem_get_info before init_process_group), the world
# communicator 934 MiB more after its first all_reduce, at 2 and at 4 GPUs. The H100 is given the same
# figures until measured there.
_CONTEXT = 527 << 20
_NCCL_PER_COMM = 934 << 20
# H200 achieved rates (the same run's calibrate.json, CUDA-event medians): torch.mm at the large shapes
# (4096^3 up, 8192x50304x1024) 637-766 TFLOP/s bf16, median 690; fp16 600-735, 650; TF32 279-364, 330;
# fp32 50 (4096^3 and 1024x8192x8192); a 512 MiB fp32 add/copy/gelu 3.9-4.1 TB/s: 4000 GB/s.

GPUS: dict[str, GPUSpec] = {
    spec.name: spec for spec in (
        GPUSpec("h100-80g", "NVIDIA H100 SXM 80 GB (torch reports 79.11 GiB)", int(79.11 * _GIB),
                {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9, "fp8": 1979.0}, 3350.0,
                "h100-nvlink4-nccl-defaults", _CONTEXT, _NCCL_PER_COMM),
        GPUSpec("h200-141g", "NVIDIA H200 SXM 141 GB (torch reports 139.80 GiB)", 150109880320,
                {"bf16": 690.0, "fp16": 650.0, "tf32": 330.0, "fp32": 50.0}, 4000.0,
                "h200-nvlink4", _CONTEXT, _NCCL_PER_COMM, calibrated=True,
                source="benchmarks/results/plan33-h200-x4-2026-11-26/calibrate.json"),
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
