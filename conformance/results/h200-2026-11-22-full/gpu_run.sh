# Device call (nvidia-h200-x4): the README's GPU command, whole suite, default profile, seed 0.
# Also: a smoke run of realgpu-bench (eager and CUDA graph) for issue 6.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd .snap
{ nvidia-smi; nvidia-smi topo -m; python -c "import torch;print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; date -u
  python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "Running pip as" | tail -2
  which python pytest realgpu-bench; python -c "import realgpu; print(realgpu.probe_gpus())"
  echo smoke-skipped-see-run-2

} > $OUT/smoke.log 2>&1
s=$(date +%s)
python -c 'import realgpu,sys; sys.exit(realgpu.probe_gpus().count < 4)' || { cat $OUT/smoke.log; exit 3; }
timeout -k 10 450 python -m pytest conformance --backend=nccl --hypothesis-seed=0 -q --tb=short --report-dir $OUT/x4 --durations=15 > $OUT/suite-x4.log 2>&1
echo "suite-x4 rc=$? $(( $(date +%s)-s ))s" | tee -a $OUT/smoke.log
ls -la $OUT; grep -E "rc=|passed|failed" $OUT/smoke.log | tail; tail -3 $OUT/suite-x4.log
