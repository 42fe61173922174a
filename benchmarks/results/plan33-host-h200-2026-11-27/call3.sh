#!/bin/bash
# Stop 32, call 3 (2-GPU box): (A) the host's issue time per op on CUDA (.devrun/perop_cuda.py); (B) plans run on
# the box's own CPU (GPUs hidden): the per-op probe under a plan, step_reference small and llama_3d small at 2
# GPUs -- the measured host model predicting the host it runs on; (C) step_reference small again on the GPUs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/e3
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; git status --short | head -20; uptime; } > /tmp/e3/env.txt 2>&1
python -c 'from simgpu.cuda_sim import plan_host as p; print(p.speed_probe_us())' > /tmp/e3/warm.txt 2>&1
for i in 1 2; do CUDA_VISIBLE_DEVICES=0 python .devrun/perop_cuda.py >> /tmp/e3/perop_cuda.jsonl 2>> /tmp/e3/perop_cuda.err; done
for i in 1 2; do python -c 'import json; from simgpu.cuda_sim import plan_host as p; print(json.dumps({"least5": p.speed_probe_us(), "baseline": p.baseline()}))' >> /tmp/e3/probe.jsonl 2>&1; done
export CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1
mkdir -p /tmp/e3/plan-perop /tmp/e3/plan-sr /tmp/e3/plan-l211 /tmp/e3/plan-l121 /tmp/e3/plan-l112
SIMGPU_PLAN_DIR=/tmp/e3/plan-perop timeout 100 python -m simgpu run --plan h200-141g --gpus 1 python .devrun/perop_plan.py > /tmp/e3/plan-perop.log 2>&1
echo "perop rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e3/times.txt
SIMGPU_PLAN_DIR=/tmp/e3/plan-sr timeout 150 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29531 \
  benchmarks/plan_reference/step_reference.py --size small --layouts ddp fsdp2 fsdp2_mp tp --warmup 1 --steps 3 --out /tmp/e3/plan-sr/steps.jsonl > /tmp/e3/plan-sr.log 2>&1
echo "sr rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e3/times.txt
for mesh in "2 1 1" "1 2 1" "1 1 2"; do
  tag=$(echo $mesh | tr -d ' ')
  extra=""; [ "$mesh" = "2 1 1" ] && extra="--ranks 0,1"
  SIMGPU_PLAN_DIR=/tmp/e3/plan-l$tag timeout 100 python -m simgpu run --plan h200-141g --gpus 2 $extra torchrun --nproc-per-node 2 --master-port 29532 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > /tmp/e3/plan-l$tag.log 2>&1
  echo "llama $mesh rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e3/times.txt
done
unset CUDA_VISIBLE_DEVICES SIMGPU_VISIBLE_DEVICES
left=$(( t0 + 560 - $(date +%s) ))
[ $left -gt 60 ] && timeout $left torchrun --nproc-per-node 2 --master-port 29511 benchmarks/plan_reference/step_reference.py --size small \
  --out /tmp/e3/steps.jsonl > /tmp/e3/steps.log 2>&1; echo "real sr rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e3/times.txt
tar czf "$OUT/e3.tgz" -C /tmp e3
cat /tmp/e3/env.txt /tmp/e3/times.txt /tmp/e3/warm.txt /tmp/e3/perop_cuda.jsonl; tail -3 /tmp/e3/perop_cuda.err; cut -c1-200 /tmp/e3/probe.jsonl
grep -v "^W11" /tmp/e3/plan-perop.log | head -9
for f in /tmp/e3/plan-*.log; do echo "== $f"; grep -v "^W11\|Warning" $f | tail -n 6 | cut -c1-160; done
echo "call took $(( $(date +%s) - t0 )) s"
