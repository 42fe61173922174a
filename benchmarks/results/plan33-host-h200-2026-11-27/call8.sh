#!/bin/bash
# Stop 32, call 8 (4-GPU box; the plans of call 4 again, with plan_roles reading bytes through .cpu()): llama_3d.py small at 4x1x1, 2x2x1, 2x1x2 on the GPUs with issue times, and planned on
# the box's own CPU (GPUs hidden, --ranks 0-3): the measured host model on pipelines, without the laptop's load.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/e8
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; git status --short | head -20; lscpu | grep 'Model name'; uptime; } > /tmp/e8/env.txt 2>&1
for i in 1 2; do python -c 'import json; from simgpu.cuda_sim import plan_host as p; print(json.dumps({"least5": p.speed_probe_us(), "baseline": p.baseline()}))' >> /tmp/e8/probe.jsonl 2>&1; done
echo "real done at $(( $(date +%s) - t0 )) s" >> /tmp/e8/times.txt
export CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3
for mesh in "4 1 1" "2 2 1" "2 1 2"; do
  tag=$(echo $mesh | tr -d ' ')
  mkdir -p /tmp/e8/plan-l$tag
  SIMGPU_PLAN_DIR=/tmp/e8/plan-l$tag timeout 170 python -m simgpu run --plan h200-141g --gpus 4 --ranks 0-3 torchrun --nproc-per-node 4 --master-port 29532 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > /tmp/e8/plan-l$tag.log 2>&1
  echo "plan $mesh rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e8/times.txt
done
tar czf "$OUT/e8.tgz" -C /tmp e7
cat /tmp/e8/env.txt /tmp/e8/times.txt; cut -c1-200 /tmp/e8/probe.jsonl
for f in /tmp/e8/plan-*.log; do echo "== $f"; grep -v "^W11\|Warning" $f | grep -A6 "^rank gpu" | cut -c1-140; grep -h "Error" $f | head -3; done
echo "call took $(( $(date +%s) - t0 )) s"
