#!/bin/bash
# Stop 31, call 4 (4-GPU box, ~340 s): simulated on torch 2.11 with r31's stream clocks: test_fully_shard_overlap
# (REF: call 1's real side) and test_reduce_scatter_tensor_coalesced (unrun in call 3); the OpInfo sweep of
# torch._scaled_mm_v2 (r31's formula; 2.11's host lacks the kernel); llama_3d.py --profile at 4 1 1 and 2 2 1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
python -m pip install -q --no-deps --no-index --find-links .torchsrc/wheels expecttest >> /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT" /tmp/r4 /tmp/r4/prof
git rev-parse HEAD > /tmp/r4/head.txt
( CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 python benchmarks/torch_suite/upstream.py --gpus 4 --pytorch-src .torchsrc/pytorch-src \
  --files test_fully_shard_overlap --reference .torchsrc/real-r30-results.json --chunk 1 --jobs 2 --budget 280 --timeout 250 \
  --out /tmp/sim-f > /tmp/r4/sim-f.log 2>&1; cp /tmp/sim-f/results.json /tmp/r4/sim-f-results.json ) &
( CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 python benchmarks/torch_suite/upstream.py --gpus 4 --pytorch-src .torchsrc/pytorch-src \
  --files test_c10d_functional_native --only "TestWithNCCL::test_reduce_scatter_tensor_coalesced" \
  --chunk 1 --jobs 1 --budget 320 --timeout 300 --out /tmp/sim-g > /tmp/r4/sim-g.log 2>&1; cp /tmp/sim-g/results.json /tmp/r4/sim-g-results.json ) &
( CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1 OMP_NUM_THREADS=1 timeout 250 python -m simgpu run --gpus 2 python -m tests.simulated_device.opinfo_sweep \
  --full --ops torch._scaled_mm_v2 --out /tmp/r4/scaled_mm_v2.json > /tmp/r4/scaled_mm_v2.log 2>&1; echo "sweep rc=$?" >> /tmp/r4/scaled_mm_v2.log ) &
for mesh in "4 1 1" "2 2 1"; do
  tag=$(echo $mesh | tr -d ' ')
  timeout 100 torchrun --nproc-per-node 4 --master-port 29518 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small \
    --steps 6 --warmup 2 --profile /tmp/r4/prof/m$tag > /tmp/r4/prof/out-$tag.txt 2> /tmp/r4/prof/err-$tag.txt
  echo "mesh $mesh rc=$?" >> /tmp/r4/prof/run.log
done
wait
tar czf "$OUT/prof.tgz" -C /tmp/r4 prof; [ "$(stat -c %s $OUT/prof.tgz)" -lt 15000000 ] || { echo "prof.tgz too large: traces left out"; tar czf "$OUT/prof.tgz" -C /tmp/r4 --exclude='m*' prof; }
tar czf "$OUT/r4.tgz" -C /tmp --exclude=r4/prof r4
du -sh /tmp/r4/prof
tail -n 4 /tmp/r4/sim-f.log /tmp/r4/sim-g.log /tmp/r4/scaled_mm_v2.log; cat /tmp/r4/prof/run.log; grep -h '^{' /tmp/r4/prof/out-*.txt | cut -c1-250
echo "call took $(( $(date +%s) - t0 )) s"
