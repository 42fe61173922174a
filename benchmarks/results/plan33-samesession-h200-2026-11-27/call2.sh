#!/bin/bash
# Stop 33, call 2 (4x H200): llama_3d small at 4x1x1, 2x2x1, 2x1x2 on the GPUs (twice, to see run-to-run), step_reference
# tiny and small at 4 GPUs, the box's probe; the host_ops benchmark on CUDA.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
W=/tmp/c2; mkdir -p $W "$OUT"
python -m pip install -q --no-deps --no-build-isolation -e . > $W/inst.log 2>&1 || tail -3 $W/inst.log
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } > $W/env.txt 2>&1
for i in 1 2 3; do python -m simgpu.cuda_sim.plan_host; done > $W/probe.txt 2>&1
t() { echo "$1 rc=$2 at $(( $(date +%s) - t0 )) s" >> $W/times.txt; }
CUDA_VISIBLE_DEVICES=0 timeout 120 python benchmarks/plan_reference/host_ops.py --out $W/host_ops_cuda.jsonl > $W/host_ops_cuda.txt 2>&1; t "cuda ops" $?
for round in 1 2; do
for mesh in "4 1 1" "2 2 1" "2 1 2"; do
  timeout 100 torchrun --nproc-per-node 4 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 6 --warmup 2 > $W/out.txt 2>>$W/llama.log
  t "real llama $mesh round $round" $?
  grep '^{' $W/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", \"round\": $round, /" >> $W/real-llama.jsonl
done; done
timeout 120 torchrun --nproc-per-node 4 --master-port 29511 benchmarks/plan_reference/step_reference.py --size tiny small --layouts ddp fsdp2 fsdp2_mp tp fsdp2_tp --warmup 3 --steps 7 --out $W/real-sr.jsonl > $W/real-sr.log 2>&1; t "real sr" $?
rm -f $W/out.txt
tar czf "$OUT/c2.tgz" -C /tmp c2
cat $W/env.txt $W/probe.txt $W/times.txt $W/host_ops_cuda.txt | grep -v "^W11" | cut -c1-220
grep -h '^{' $W/real-llama.jsonl | cut -c1-200
echo "call took $(( $(date +%s) - t0 )) s"
