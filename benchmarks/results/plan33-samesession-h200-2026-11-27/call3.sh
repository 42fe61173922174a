#!/bin/bash
# Stop 33, call 3 (4x H200): as call 2, each real rank now records its host speed probe between steps (probe_us);
# then the same programs planned on the box's own CPU (GPUs hidden) for the box's probe.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
W=/tmp/c3; mkdir -p $W "$OUT"
python -m pip install -q --no-deps --no-build-isolation -e . > $W/inst.log 2>&1 || tail -3 $W/inst.log
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } > $W/env.txt 2>&1
for i in 1 2 3; do python -m simgpu.cuda_sim.plan_host; done > $W/probe.txt 2>&1
t() { echo "$1 rc=$2 at $(( $(date +%s) - t0 )) s" >> $W/times.txt; }
for round in 1 2; do
for mesh in "4 1 1" "2 2 1" "2 1 2"; do
  timeout 100 torchrun --nproc-per-node 4 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 6 --warmup 2 > $W/out.txt 2>>$W/llama.log
  t "real llama $mesh round $round" $?
  grep '^{' $W/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", \"round\": $round, /" >> $W/real-llama.jsonl
done; done
timeout 150 torchrun --nproc-per-node 4 --master-port 29511 benchmarks/plan_reference/step_reference.py --size tiny small --layouts ddp fsdp2 fsdp2_mp tp fsdp2_tp --warmup 3 --steps 7 --out $W/real-sr.jsonl > $W/real-sr.log 2>&1; t "real sr" $?
P=$(python -c "import json,statistics; print(round(statistics.median(json.loads(l)['probe_us'] for l in open('$W/real-llama.jsonl'))))")
echo "median probe of the real llama ranks: $P" >> $W/times.txt
export CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 SIMGPU_PLAN_HOST_PROBE_US=$P
for mesh in "4 1 1" "2 2 1" "2 1 2"; do
  tag=$(echo $mesh | tr -d ' '); mkdir -p $W/plan-l$tag
  SIMGPU_PLAN_DIR=$W/plan-l$tag timeout 100 python -m simgpu run --plan h200-141g --gpus 4 --ranks 0-3 torchrun --nproc-per-node 4 --master-port 29533 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > $W/plan-l$tag.log 2>&1; t "plan llama $mesh" $?
done
mkdir -p $W/plan-sr
SIMGPU_PLAN_DIR=$W/plan-sr timeout 150 python -m simgpu run --plan h200-141g --gpus 4 torchrun --nproc-per-node 4 --master-port 29532 \
  benchmarks/plan_reference/step_reference.py --size tiny small --layouts ddp fsdp2 fsdp2_mp tp fsdp2_tp --warmup 1 --steps 3 --out $W/plan-sr/steps.jsonl > $W/plan-sr.log 2>&1; t "plan sr" $?
rm -f $W/out.txt
tar czf "$OUT/c3.tgz" -C /tmp c3
cat $W/env.txt $W/probe.txt $W/times.txt | cut -c1-220
python -c "
import json
for l in open('$W/real-llama.jsonl'):
    d = json.loads(l); print(d['mesh'], d['round'], d['rank'], round(d['step_ms'], 1), round(d['issue_ms'], 1), d['probe_us'] and round(d['probe_us']))
for l in open('$W/real-sr.jsonl'):
    d = json.loads(l); print(d['size'], d['layout'], [(round(r['step_ms'], 1), r.get('probe_us') and round(r['probe_us'])) for r in d['ranks']])
"
for f in $W/plan-*.log; do echo "== $f"; grep -v "^W11\|Warning" $f | grep -A5 "^rank" | cut -c1-140; grep -i "error" $f | tail -2; done
echo "call took $(( $(date +%s) - t0 )) s"
