#!/bin/bash
# The same programs as run_real.sh on 2 simulated GPUs (simgpu run); logs to $OUT (default /tmp/public_style_sim).
#   bash benchmarks/public_style/run_sim.sh [path/to/simgpu]
here=$(cd "$(dirname "$0")" && pwd); out=${OUT:-/tmp/public_style_sim}; mkdir -p "$out"
simgpu=${1:-simgpu}; py=$(dirname "$(command -v "$simgpu")")/python
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/nanogpt_style.py" > "$out/nanogpt_style.log" 2>&1; echo "nanogpt rc=$?"
timeout 600 "$simgpu" run --gpus 2 "$py" "$here/timm_style.py" > "$out/timm_style.log" 2>&1; echo "timm rc=$?"
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/fsdp1_hf_style.py" > "$out/fsdp1_hf_style.log" 2>&1; echo "fsdp1 rc=$?"
COMPILE=0 timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/nanogpt_style.py" > "$out/nanogpt_style_eager.log" 2>&1; echo "nanogpt eager rc=$?"
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/moe_ep_style.py" > "$out/moe_ep_style.log" 2>&1; echo "moe rc=$?"
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/resume_style.py" > "$out/resume_style.log" 2>&1; echo "resume rc=$?"
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/clip_style.py" > "$out/clip_style.log" 2>&1; echo "clip_style rc=$?"
timeout 600 "$simgpu" run --gpus 2 torchrun --standalone --nproc-per-node 2 "$here/serve_style.py" > "$out/serve_style.log" 2>&1; echo "serve_style rc=$?"
