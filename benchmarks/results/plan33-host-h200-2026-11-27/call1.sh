#!/bin/bash
# Stop 32, call 1 (2-GPU box): the host's side of a step. llama_3d.py small and step_reference.py (small,
# medium) at 2 GPUs with each step's issue time (the host's time to issue the step, before its synchronize);
# the host speed probe (plan_host.speed_probe_us) on the box's CPU; tf32_probe.py; stream_clock_probe.py.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/e1
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.git_version, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; lscpu | grep -E 'Model name|^CPU\(s\)|MHz'; uptime; } > /tmp/e1/env.txt 2>&1
for i in 1 2 3 4 5; do python -c 'from simgpu.cuda_sim import plan_host as p; print(p.speed_probe_us())'; done > /tmp/e1/probe.txt 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 60 python benchmarks/cuda_references/tf32_probe.py > /tmp/e1/tf32.json 2> /tmp/e1/tf32.err
timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/torch_suite/stream_clock_probe.py > /tmp/e1/stream_clock.txt 2> /tmp/e1/stream_clock.err
for rep in 1 2; do
for mesh in "2 1 1" "1 2 1" "1 1 2"; do
  timeout 100 torchrun --nproc-per-node 2 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small \
    --steps 8 --warmup 3 > /tmp/e1/out.txt 2>>/tmp/e1/llama.log
  echo "mesh $mesh rep $rep rc=$?" >> /tmp/e1/llama.log
  grep '^{' /tmp/e1/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", \"rep\": $rep, /" >> /tmp/e1/llama-steps.jsonl
done; done
left=$(( t0 + 570 - $(date +%s) ))
timeout $left torchrun --nproc-per-node 2 --master-port 29511 benchmarks/plan_reference/step_reference.py --size small medium \
  --out /tmp/e1/steps.jsonl > /tmp/e1/steps.log 2>&1; echo "step_reference rc=$?" >> /tmp/e1/steps.log
tar czf "$OUT/e1.tgz" -C /tmp e1
cat /tmp/e1/env.txt /tmp/e1/probe.txt; head -c 600 /tmp/e1/tf32.json; tail -2 /tmp/e1/tf32.err; cat /tmp/e1/stream_clock.txt; tail -3 /tmp/e1/stream_clock.err
cat /tmp/e1/llama.log | grep rc=; cut -c1-330 /tmp/e1/llama-steps.jsonl; tail -3 /tmp/e1/steps.log
python - <<'P'
import json
for l in open('/tmp/e1/steps.jsonl'):
    r = json.loads(l); print(r.get('size') or r.get('config'), r.get('layout'), [(x.get('step_ms'), x.get('issue_ms'), x.get('issue_cpu_ms')) for x in r.get('ranks', [])])
P
echo "call took $(( $(date +%s) - t0 )) s"
