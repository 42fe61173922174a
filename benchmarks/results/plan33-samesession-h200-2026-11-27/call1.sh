#!/bin/bash
# Stop 33, call 1 (2x H200): the host's time per op on CUDA and under a plan on the same CPU
# (benchmarks/plan_reference/host_ops.py), step_reference tiny (host-bound) and small on the GPUs and planned
# on the box's CPU (GPUs hidden), llama_3d small 1x2x1 and 1x1x2 on the GPUs and planned.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
W=/tmp/c1; mkdir -p $W "$OUT"
python -m pip install -q --no-deps --no-build-isolation -e . > $W/inst.log 2>&1 || tail -3 $W/inst.log
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } > $W/env.txt 2>&1
for i in 1 2 3; do python -m simgpu.cuda_sim.plan_host; done > $W/probe.txt 2>&1
P=$(sort -n $W/probe.txt | sed -n 2p)
t() { echo "$1 rc=$2 at $(( $(date +%s) - t0 )) s" >> $W/times.txt; }
for i in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 120 python benchmarks/plan_reference/host_ops.py --out $W/host_ops_cuda.jsonl > $W/host_ops_cuda_$i.txt 2>&1; t "cuda ops $i" $?; done
timeout 120 torchrun --nproc-per-node 2 --master-port 29511 benchmarks/plan_reference/step_reference.py --size tiny --warmup 3 --steps 10 --out $W/real-sr-tiny.jsonl > $W/real-sr-tiny.log 2>&1; t "real tiny" $?
timeout 150 torchrun --nproc-per-node 2 --master-port 29512 benchmarks/plan_reference/step_reference.py --size small --layouts ddp fsdp2 fsdp2_mp tp --out $W/real-sr-small.jsonl > $W/real-sr-small.log 2>&1; t "real small" $?
for mesh in "1 2 1" "1 1 2"; do
  timeout 100 torchrun --nproc-per-node 2 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 6 --warmup 2 > $W/out.txt 2>>$W/llama.log
  t "real llama $mesh" $?
  grep '^{' $W/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", /" >> $W/real-llama.jsonl
done
export CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1 SIMGPU_PLAN_HOST_PROBE_US=$P
SIMGPU_PLAN_DIR=$W/plan-ops timeout 120 python -m simgpu run --plan h200-141g --gpus 1 python benchmarks/plan_reference/host_ops.py --out $W/host_ops_plan.jsonl > $W/host_ops_plan.txt 2>&1; t "plan ops" $?
mkdir -p $W/plan-tiny $W/plan-small $W/plan-l121 $W/plan-l112
SIMGPU_PLAN_DIR=$W/plan-tiny timeout 120 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29531 \
  benchmarks/plan_reference/step_reference.py --size tiny --layouts ddp fsdp2 fsdp2_mp tp --warmup 2 --steps 5 --out $W/plan-tiny/steps.jsonl > $W/plan-tiny.log 2>&1; t "plan tiny" $?
SIMGPU_PLAN_DIR=$W/plan-small timeout 150 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29532 \
  benchmarks/plan_reference/step_reference.py --size small --layouts ddp fsdp2 fsdp2_mp tp --warmup 1 --steps 3 --out $W/plan-small/steps.jsonl > $W/plan-small.log 2>&1; t "plan small" $?
for mesh in "1 2 1" "1 1 2"; do
  tag=$(echo $mesh | tr -d ' ')
  SIMGPU_PLAN_DIR=$W/plan-l$tag timeout 100 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29533 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > $W/plan-l$tag.log 2>&1; t "plan llama $mesh" $?
done
rm -f $W/out.txt
tar czf "$OUT/c1.tgz" -C /tmp c1
cat $W/env.txt $W/probe.txt $W/times.txt $W/host_ops_cuda_1.txt $W/host_ops_plan.txt | grep -v "^W11" | cut -c1-220
for f in $W/plan-*.log; do echo "== $f"; grep -v "^W11\|Warning" $f | grep -A6 "^rank" | cut -c1-160; done
echo "call took $(( $(date +%s) - t0 )) s"
