#!/bin/bash
# On a 2-GPU box: run the public-style programs on the real GPUs; logs and versions to $OUT.
#   bash benchmarks/public_style/run_real.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd); out=${OUT:-/tmp/public_style_out}; mkdir -p "$out"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch;print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; } > "$out/versions.txt" 2>&1
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/nanogpt_style.py" > "$out/nanogpt_style.log" 2>&1; echo "nanogpt rc=$?"
timeout 200 python "$here/timm_style.py" > "$out/timm_style.log" 2>&1; echo "timm rc=$?"
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/fsdp1_hf_style.py" > "$out/fsdp1_hf_style.log" 2>&1; echo "fsdp1 rc=$?"
COMPILE=0 timeout 200 torchrun --standalone --nproc-per-node 2 "$here/nanogpt_style.py" > "$out/nanogpt_style_eager.log" 2>&1; echo "nanogpt eager rc=$?"
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/moe_ep_style.py" > "$out/moe_ep_style.log" 2>&1; echo "moe rc=$?"
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/resume_style.py" > "$out/resume_style.log" 2>&1; echo "resume rc=$?"
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/clip_style.py" > "$out/clip_style.log" 2>&1; echo "clip_style rc=$?"
timeout 200 torchrun --standalone --nproc-per-node 2 "$here/serve_style.py" > "$out/serve_style.log" 2>&1; echo "serve_style rc=$?"
python "$here/memory_stats_probe.py" "$out/memory_stats.json" > /dev/null 2>&1; echo "probe rc=$?"
