#!/bin/bash
# Stop 31, call 2 (4-GPU box): GPU: llama_3d.py --size small at 3 meshes (issue 33's pipeline step reference);
# CPU beside it: the r30 files simulated (REF = call 1's real side), distributed_test.py's profiler tests
# simulated at 4 ranks, and test_c10d_functional_native's coalesced tests (their collection timed out in call 1).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
python -m pip install -q --no-deps --no-index --find-links .torchsrc/wheels expecttest >> /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/llama3d /tmp/t27
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.git_version, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git rev-parse HEAD; } > /tmp/llama3d/env.txt 2>&1
cat /tmp/llama3d/env.txt
( INSTALL=0 OUT=/tmp/t27 TAG=sim-r30 JOBS=4 BUDGET=300 REF=.torchsrc/real-r30-results.json \
    EXTRA="--files (test_fully_shard_(memory|overlap|grad_scaler|ignore_params)|test_state_dict_utils) --chunk 2" \
    bash benchmarks/torch_suite/gpu_box.sh sim > /tmp/t27/sim-r30.stdout 2>&1 ) &
a=$!
( INSTALL=0 OUT=/tmp/t27 TAG=sim-dt-prof JOBS=4 BUDGET=420 REF=.torchsrc/real-dt-prof-results.json \
    EXTRA="--only (_cuda|_cuda_async|_cuda_complex|_cuda_twice|_profiler)\$|^test_ddp_profiling --chunk 8" \
    bash benchmarks/torch_suite/gpu_box.sh sim-dt > /tmp/t27/sim-dt-prof.stdout 2>&1 ) &
b=$!
( CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 python benchmarks/torch_suite/upstream.py --gpus 4 --pytorch-src .torchsrc/pytorch-src \
  --files test_c10d_functional_native --only "TestWithNCCL::test_.*_coalesced" \
  --chunk 1 --jobs 3 --budget 420 --timeout 300 --out /tmp/sim-d > /tmp/t27/sim-d.log 2>&1; cp /tmp/sim-d/results.json /tmp/t27/sim-d-results.json; tar czf /tmp/t27/sim-d-logs.tgz -C /tmp sim-d ) &
c=$!
for mesh in "4 1 1" "2 1 2" "2 2 1"; do
  echo "mesh $mesh" >> /tmp/llama3d/run.log
  timeout 150 torchrun --nproc-per-node 4 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small \
    --steps 6 --warmup 2 > /tmp/llama3d/out.txt 2>>/tmp/llama3d/run.log
  echo "rc=$?" >> /tmp/llama3d/run.log
  grep '^{' /tmp/llama3d/out.txt | sed "s/^{/{\"mesh\": \"$mesh\", /" >> /tmp/llama3d/steps.jsonl
done
cat /tmp/llama3d/steps.jsonl
wait $a $b $c
tar czf "$OUT/t27.tgz" -C /tmp t27
tar czf "$OUT/llama3d.tgz" -C /tmp llama3d
echo "call took $(( $(date +%s) - t0 )) s"
tail -8 /tmp/t27/sim-r30.stdout /tmp/t27/sim-dt-prof.stdout /tmp/t27/sim-d.log
