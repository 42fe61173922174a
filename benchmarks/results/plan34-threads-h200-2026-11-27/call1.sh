#!/bin/bash
# Stop 34, call 1 (2x H200): where a real step's host time goes, by thread (benchmarks/plan_reference/thread_cpu.py):
# step_reference tiny and small on the GPUs and on the box's CPU over gloo (the same program without CUDA),
# llama_3d small 1x2x1 and 1x1x2 on the GPUs, 1x2x1 once more under torch.profiler; the same planned on the
# box's CPU (GPUs hidden) for the box's own probe.
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
SR=benchmarks/plan_reference/step_reference.py
LL=benchmarks/plan_reference/llama_3d.py
timeout 120 torchrun --nproc-per-node 2 --master-port 29511 $SR --size tiny small --layouts ddp fsdp2 fsdp2_mp tp --warmup 3 --steps 8 --out $W/real-sr.jsonl > $W/real-sr.log 2>&1; t "real sr" $?
CUDA_VISIBLE_DEVICES= timeout 90 torchrun --nproc-per-node 2 --master-port 29512 $SR --device cpu --size tiny --layouts ddp fsdp2 fsdp2_mp tp --warmup 3 --steps 8 --out $W/cpu-sr.jsonl > $W/cpu-sr.log 2>&1; t "cpu sr" $?
for mesh in "1 2 1" "1 1 2"; do
  timeout 100 torchrun --nproc-per-node 2 --master-port 29517 $LL --mesh $mesh --size small --steps 6 --warmup 2 > $W/out.txt 2>>$W/llama.log
  t "real llama $mesh" $?
  grep '^{' $W/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", /" >> $W/real-llama.jsonl
done
timeout 100 torchrun --nproc-per-node 2 --master-port 29518 $LL --mesh 1 2 1 --size small --steps 4 --warmup 2 --profile $W/prof121 > $W/out.txt 2>>$W/llama.log; t "real llama profiled" $?
grep '^{' $W/out.txt >> $W/real-llama-profiled.jsonl
gzip $W/prof121/*.json
export CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1 SIMGPU_PLAN_HOST_PROBE_US=$P
mkdir -p $W/plan-sr $W/plan-l121 $W/plan-l112
SIMGPU_PLAN_DIR=$W/plan-sr timeout 150 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29531 \
  $SR --size tiny small --layouts ddp fsdp2 fsdp2_mp tp --warmup 2 --steps 4 --out $W/plan-sr/steps.jsonl > $W/plan-sr.log 2>&1; t "plan sr" $?
for mesh in "1 2 1" "1 1 2"; do
  tag=$(echo $mesh | tr -d ' ')
  SIMGPU_PLAN_DIR=$W/plan-l$tag timeout 100 python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 --master-port 29533 \
    $LL --mesh $mesh --size small --steps 4 --warmup 1 > $W/plan-l$tag.log 2>&1; t "plan llama $mesh" $?
done
rm -f $W/out.txt
tar czf "$OUT/c1.tgz" -C /tmp c1
cat $W/env.txt $W/probe.txt $W/times.txt | cut -c1-220
python - <<'PY'
import json
for f in ["/tmp/c1/real-sr.jsonl", "/tmp/c1/cpu-sr.jsonl"]:
    for l in open(f):
        r = json.loads(l)
        for x in r["ranks"]:
            print(f[8:12], r["size"], r["layout"], x["rank"], round(x["step_ms"], 1), round(x["issue_cpu_ms"], 1), {k: round(v, 1) for k, v in x.get("thread_cpu_ms", {}).items() if v > 0.2})
for l in open("/tmp/c1/real-llama.jsonl"):
    x = json.loads(l); print(x["mesh"], x["rank"], round(x["step_ms"], 1), round(x["issue_cpu_ms"], 1), {k: round(v, 1) for k, v in x["thread_cpu_ms"].items() if v > 0.2})
PY
echo "call took $(( $(date +%s) - t0 )) s"
