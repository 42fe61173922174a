#!/bin/bash
# Call 1 (issue 27 + 26): PyTorch's test files on the 4 real GPUs, the tests without a result in the first
# run (real-a), and beside it on the CPU cores the OpInfo every-sample sweep (128 shards, simulated, real GPUs
# hidden), each shard's report written after every op so that the deadline keeps what was done.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
export DEADLINE=$(( t0 + ${SPAN:-520} ))
python -m pip install -q --no-deps --no-build-isolation -e . > /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
python -m pip install -q --no-deps --no-index --find-links .torchsrc/wheels expecttest >> /tmp/inst.log 2>&1 || tail -3 /tmp/inst.log
mkdir -p "$OUT/torch27" /tmp/op
shard() {
  left=$(( DEADLINE - $(date +%s) )); [ "$left" -gt 30 ] || { echo "s$1 not started" >> /tmp/op/not_started.txt; return 0; }
  s0=$(date +%s)
  CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1 OMP_NUM_THREADS=1 timeout -k 5 "$left" \
    python -m simgpu run --gpus 2 python -m tests.simulated_device.opinfo_sweep --full --shard "$1/128" \
    --out "/tmp/op/s$1.json" > "/tmp/op/s$1.log" 2>&1
  echo "s$1 rc=$? $(( $(date +%s) - s0 ))s" >> /tmp/op/done.txt
}
export -f shard
( seq ${OP_FIRST:-0} ${OP_LAST:-127} | xargs -P "${OP_P:-24}" -I{} bash -c 'shard {}' ) &
op=$!
INSTALL=0 TAG=real-a EXTRA="--skip-known .torchsrc/real-results.json" BUDGET=$(( DEADLINE - $(date +%s) - 20 )) JOBS=${JOBS:-8} \
  bash benchmarks/torch_suite/gpu_box.sh real
wait $op
python -c 'import torch, sys; print(torch.__version__, torch.version.cuda)' > /tmp/op/versions.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> /tmp/op/versions.txt 2>&1
tar czf "$OUT/opinfo-full-128.tgz" -C /tmp op
echo "call took $(( $(date +%s) - t0 )) s"; wc -l /tmp/op/done.txt; cat /tmp/op/not_started.txt 2>/dev/null | wc -l
