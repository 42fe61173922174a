#!/bin/bash
# Stop 32, call 2 (2-GPU box): the measured host model's reference. (A) the pure-Python speed probe and the
# launcher's baseline on the box's CPU; (B) llama_3d.py small at 1x2x1, 1x1x2 (fixed for pp=1) and 2x1x1 on the
# GPUs, with issue times; (C) plans of step_reference small and llama_3d small at 2 GPUs run on the box's CPU
# (GPUs hidden): the model's prediction of the box's own host; (D) test_reduce_scatter_tensor_coalesced
# simulated on torch 2.11 with a 480 s limit (beside C).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
python -m pip install -q --no-deps --no-index --find-links .torchsrc/wheels expecttest >> /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/e2
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.git_version, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; git status --short | head; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } > /tmp/e2/env.txt 2>&1
for i in 1 2 3; do python -c 'import json; from simgpu.cuda_sim import plan_host as p; print(json.dumps({"samples": [p.speed_probe_us(1) for _ in range(20)], "least5": p.speed_probe_us(), "baseline": p.baseline()}))'; done > /tmp/e2/probe.jsonl 2>&1
for mesh in "1 2 1" "1 1 2" "2 1 1" "1 2 1" "1 1 2"; do
  timeout 100 torchrun --nproc-per-node 2 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small \
    --steps 8 --warmup 3 > /tmp/e2/out.txt 2>>/tmp/e2/llama.log
  echo "mesh $mesh rc=$?" >> /tmp/e2/llama.log
  grep '^{' /tmp/e2/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", /" >> /tmp/e2/llama-steps.jsonl
done
echo "B done at $(( $(date +%s) - t0 )) s" >> /tmp/e2/times.txt
left=$(( t0 + 575 - $(date +%s) ))
( cd /tmp/e2; mkdir -p t27; cd $OLDPWD; CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 python benchmarks/torch_suite/upstream.py --gpus 4 --pytorch-src .torchsrc/pytorch-src \
  --files test_c10d_functional_native --only "TestWithNCCL::test_reduce_scatter_tensor_coalesced" \
  --chunk 1 --jobs 1 --budget $(( left - 10 )) --timeout $(( left - 20 )) --out /tmp/sim-g > /tmp/e2/t27/sim-g.log 2>&1; cp /tmp/sim-g/results.json /tmp/e2/t27/sim-g-results.json ) &
mkdir -p /tmp/e2/plan-sr /tmp/e2/plan-l211 /tmp/e2/plan-l121 /tmp/e2/plan-l112
export CUDA_VISIBLE_DEVICES=
SIMGPU_PLAN_DIR=/tmp/e2/plan-sr timeout 200 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29531 \
  benchmarks/plan_reference/step_reference.py --size small --layouts ddp fsdp2 fsdp2_mp tp --warmup 1 --steps 3 --out /tmp/e2/plan-sr/steps.jsonl > /tmp/e2/plan-sr.log 2>&1
echo "C1 rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e2/times.txt
for mesh in "2 1 1" "1 2 1" "1 1 2"; do
  tag=$(echo $mesh | tr -d ' ')
  extra=""; [ "$mesh" = "2 1 1" ] && extra="--ranks 0,1"
  SIMGPU_PLAN_DIR=/tmp/e2/plan-l$tag timeout 100 python -m simgpu run --plan h200-141g --gpus 2 $extra torchrun --nproc-per-node 2 --master-port 29532 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > /tmp/e2/plan-l$tag.log 2>&1
  echo "C2 $mesh rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/e2/times.txt
done
unset CUDA_VISIBLE_DEVICES
wait
tar czf "$OUT/e2.tgz" -C /tmp e2
cat /tmp/e2/env.txt /tmp/e2/times.txt; cut -c1-300 /tmp/e2/probe.jsonl; grep rc= /tmp/e2/llama.log; cut -c1-260 /tmp/e2/llama-steps.jsonl
tail -n 4 /tmp/e2/t27/sim-g.log; for f in /tmp/e2/plan-*.log; do echo "== $f"; tail -n 6 $f | cut -c1-200; done
echo "call took $(( $(date +%s) - t0 )) s"
