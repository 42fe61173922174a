#!/bin/bash
# Stop 31, call 3: llama_3d.py small alone on the 4 GPUs (call 2's ran beside CPU-heavy simulations: steps grew
# 450 -> 900 ms); test_c10d_functional_native's coalesced tests simulated with a longer collection limit; why
# that file's collection is slow under simulation (import times, plain vs simulated, real GPUs hidden).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
python -m pip install -q --no-deps --no-index --find-links .torchsrc/wheels expecttest >> /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/llama3d /tmp/t27
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.git_version, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; } > /tmp/llama3d/env.txt 2>&1
for mesh in "4 1 1" "2 1 2" "2 2 1"; do
  echo "mesh $mesh" >> /tmp/llama3d/run.log
  timeout 150 torchrun --nproc-per-node 4 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small \
    --steps 8 --warmup 3 > /tmp/llama3d/out.txt 2>>/tmp/llama3d/run.log
  echo "rc=$?" >> /tmp/llama3d/run.log
  grep '^{' /tmp/llama3d/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", /" >> /tmp/llama3d/steps.jsonl
done
cat /tmp/llama3d/steps.jsonl | cut -c1-200
tar czf "$OUT/llama3d.tgz" -C /tmp llama3d
( cd .torchsrc/pytorch-src; s=$(date +%s); CUDA_VISIBLE_DEVICES= timeout 300 python -X importtime -m pytest test/distributed/test_c10d_functional_native.py --collect-only -q -p no:cacheprovider > /tmp/t27/coll-plain.log 2> /tmp/t27/coll-plain.imp; echo "plain rc=$? $(( $(date +%s) - s )) s" >> /tmp/t27/coll-times.txt ) &
( cd .torchsrc/pytorch-src; s=$(date +%s); CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 timeout 300 python -m simgpu run --gpus 4 python -X importtime -m pytest test/distributed/test_c10d_functional_native.py --collect-only -q -p no:cacheprovider > /tmp/t27/coll-sim.log 2> /tmp/t27/coll-sim.imp; echo "sim rc=$? $(( $(date +%s) - s )) s" >> /tmp/t27/coll-times.txt ) &
left=$(( t0 + 560 - $(date +%s) ))
CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 python benchmarks/torch_suite/upstream.py --gpus 4 --pytorch-src .torchsrc/pytorch-src \
  --files test_c10d_functional_native --only "TestWithNCCL::test_.*_coalesced" \
  --chunk 1 --jobs 3 --budget $left --timeout 300 --out /tmp/sim-e > /tmp/t27/sim-e.log 2>&1; cp /tmp/sim-e/results.json /tmp/t27/sim-e-results.json; tar czf /tmp/t27/sim-e-logs.tgz -C /tmp sim-e
wait
tar czf "$OUT/t27.tgz" -C /tmp t27
cat /tmp/t27/coll-times.txt; tail -n 6 /tmp/t27/sim-e.log
echo "call took $(( $(date +%s) - t0 )) s"
