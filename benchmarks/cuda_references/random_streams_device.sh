#!/bin/bash
# On a GPU box: record what CUDA's random kernels draw (tests/sim_scripts/random_streams.py --record), build
# curand_math_probe.cu and dump __sincosf's table (packed by sincos_table_pack.py), and keep the torch and
# cuRAND headers the simulation follows, for reading. Everything goes to $OUT.
#   bash benchmarks/cuda_references/random_streams_device.sh [DIR holding the three scripts]
# (the device tool returns no file names with '+': the recording comes back as random_streams-2.11.0-cu130.json.gz
# and is committed as tests/cuda_reference/random-streams-2.11.0+cu130.json.gz; build_mufu_table.py reads sin*.xz)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-}
script=${dir:-$here/../../tests/sim_scripts}/random_streams.py
probe=${dir:-$here}/curand_math_probe.cu
pack=${dir:-$here}/sincos_table_pack.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
version=$(python3 -c 'import torch; print(torch.__version__.replace("+", "-"))')
time python3 "$script" --record "$OUT/random_streams-$version.json.gz"
nvcc -O3 -arch=sm_90 -o /tmp/curand_math_probe "$probe" || exit 1
mkdir -p /tmp/sincos && time /tmp/curand_math_probe table /tmp/sincos && time python3 "$pack" /tmp/sincos "$OUT" 3
include=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
curand=$(dirname "$(find /usr/local /opt /usr/include -name curand_philox4x32_x.h 2>/dev/null | head -1)")
tar czf "$OUT/headers.tgz" -C "$include" ATen/native/cuda/DistributionTemplates.h ATen/native/cuda/Randperm.cuh \
  ATen/core/TransformationHelper.h ATen/core/DistributionsHelper.h ATen/cuda/CUDAGeneratorImpl.h \
  -C "$curand" curand_philox4x32_x.h curand_normal.h curand_uniform.h curand_kernel.h curand_globals.h
ls -la "$OUT"
