# Device call (nvidia-h200-x4): the README's GPU command, whole suite, default profile, seed 0.
# Also: a smoke run of realgpu-bench (eager and CUDA graph), and nccl-tests built for issue 6
# (its build script lives outside the repo, in the ignored .nccl-tests/ folder carried to the box).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd .snap
(bash ../.nccl-tests/build.sh > $OUT/nccl-tests-build.log 2>&1; echo "build rc=$?" >> $OUT/nccl-tests-build.log) &
{ nvidia-smi; nvidia-smi topo -m; python -c "import torch;print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; date -u
  pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
  s=$(date +%s); timeout 150 realgpu-bench -g 2,4 -b 8 -e 4M -f 16 -n 5 -w 2; echo "smoke eager rc=$? $(( $(date +%s)-s ))s"
  s=$(date +%s); timeout 90 realgpu-bench -g 2 -b 8 -e 64K -f 64 -n 5 -w 2 -G 2; echo "smoke graph rc=$? $(( $(date +%s)-s ))s"
} > $OUT/smoke.log 2>&1
s=$(date +%s)
timeout -k 10 450 pytest conformance --backend=nccl --hypothesis-seed=0 -q --tb=short --report-dir $OUT/x4 --durations=15 > $OUT/suite-x4.log 2>&1
echo "suite-x4 rc=$? $(( $(date +%s)-s ))s" | tee -a $OUT/smoke.log
wait
tar -czf $OUT/nccl-tests-bin.tgz -C /tmp --exclude='*.o' --exclude='*.a' nccl-tests-build 2>>$OUT/nccl-tests-build.log
ls -la $OUT; tail -3 $OUT/nccl-tests-build.log; grep -E "rc=|passed|failed" $OUT/smoke.log | tail; tail -3 $OUT/suite-x4.log
