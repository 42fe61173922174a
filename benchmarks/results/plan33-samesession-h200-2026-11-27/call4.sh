#!/bin/bash
# Stop 33, call 4 (4x H200): llama_3d small 4x1x1 and 2x2x1 with the caching allocator's history (--snapshot),
# to find what a plan's pipeline stages hold at their peak that the GPUs' do not (0.07-0.24 GiB a stage).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
W=/tmp/c4; mkdir -p $W "$OUT"
python -m pip install -q --no-deps --no-build-isolation -e . > $W/inst.log 2>&1 || tail -3 $W/inst.log
{ date -u +%FT%TZ; python -c 'import sys, torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), sys.version.split()[0])';
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; uptime; } > $W/env.txt 2>&1
for mesh in "4 1 1" "2 2 1"; do
  tag=$(echo $mesh | tr -d ' ')
  timeout 150 torchrun --nproc-per-node 4 --master-port 29517 benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 3 --warmup 1 \
    --snapshot $W/snap-$tag > $W/real-$tag.txt 2>>$W/llama.log
  echo "real $mesh rc=$? at $(( $(date +%s) - t0 )) s" >> $W/times.txt
done
tar czf "$OUT/c4.tgz" -C /tmp c4
cat $W/env.txt $W/times.txt; ls -la $W/snap-*; grep '^{' $W/real-*.txt | cut -c1-200; tail -3 $W/llama.log
echo "call took $(( $(date +%s) - t0 )) s"
