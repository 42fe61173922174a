# Device call (nvidia-h200-x2), issue 3: the README's GPU command, whole suite, default profile, seed 0.
# Beside it, niced, the MPI build of nccl-tests for issue 6's benchmark calls (source and build script
# are not in this repository; the binaries come back as nt-mpi-bin.tgz and are carried to later calls).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd .snap
R=$OUT/r; mkdir -p $R; T0=$(date +%s); el() { echo $(( $(date +%s)-T0 )); }
{ date -u; nvidia-smi; nvidia-smi topo -m; nproc; uname -r
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
} > $R/env.txt 2>&1
( nice -n 19 bash ../.nccl-tests/build_mpi.sh > $R/build-mpi.log 2>&1 \
  && tar -czf $OUT/nt-mpi-bin.tgz -C /tmp nccl-tests-mpi/env.sh $(cd /tmp && ls -d nccl-tests-mpi/*_perf_mpi) ) &
python -m pip install --no-deps --no-build-isolation -e . 2>&1 | tail -1 > $R/pip.log
timeout -k 10 500 python -m pytest conformance --backend=nccl --hypothesis-seed=0 -q --tb=short \
    --report-dir $R/x2 --durations=15 > $R/suite-x2.log 2>&1
echo "suite-x2 rc=$? $(el)s" | tee -a $R/summary.txt
wait; echo "mpi build done $(el)s" | tee -a $R/summary.txt
if [ -f /tmp/nccl-tests-mpi/env.sh ]; then
  ( . /tmp/nccl-tests-mpi/env.sh; export LD_LIBRARY_PATH
    timeout 40 mpiexec -n 2 /tmp/nccl-tests-mpi/all_reduce_perf_mpi -g 1 -b 8 -e 1M -f 32 > $R/mpi-smoke.txt 2>&1
    echo "mpi smoke rc=$? $(el)s" | tee -a $R/summary.txt )
fi
tail -3 $R/suite-x2.log; tar -czf $OUT/x2-results.tgz -C $OUT r; cp $R/summary.txt $OUT/; ls -la $OUT
