# Device calls, issue 6, two per GPU count G (nvidia-h200-x2: G=2, nvidia-h200-x4: G=4) on the same
# machine, one after the other, from the repo root (a device call may run 10 minutes at most):
#   bash benchmarks/results/h200-2026-11-22-trials5/gpu_bench.sh G nccl-tests
#   bash benchmarks/results/h200-2026-11-22-trials5/gpu_bench.sh G torch
# Both tools in the same call, each size's figure the median of 5 timed runs of 20 launches:
# nccl-tests 2.19.6 (built on the same image against torch's NCCL; its source, build scripts and
# binaries come in the ignored .nccl-tests/ folder) one process for all GPUs (-g G) and, like for
# like with torch.distributed, one process per GPU under MPI (mpiexec -n G ... -g 1); then realgpu-bench
# --trials 5; then benchmarks/host_overhead.py under environment variants (where a small eager call's
# time goes) and a CUDA-graph run with NCCL_CUMEM_ENABLE=0 (the transport hypothesis).
set -u
G=$1 STAGE=$2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd .snap; export PYTHONPATH=$PWD
R=$OUT/r-$STAGE; mkdir -p $R/nccl-tests $R/nccl-tests-mpi $R/investigation; T0=$(date +%s); el() { echo $(( $(date +%s)-T0 )); }
NCCL_LIB=$(python -c "import nvidia.nccl as m; print(list(m.__path__)[0])")/lib
tar -xzf ../.nccl-tests/bin.tgz -C /tmp; NT=/tmp/nccl-tests-build
tar -xzf ../.nccl-tests/nt-mpi-bin.tgz -C /tmp; python -m zipfile -e ../.nccl-tests/mpich-*.whl /tmp/mpich
chmod +x /tmp/mpich/mpich-*.data/data/bin/*; . /tmp/nccl-tests-mpi/env.sh; export PATH LD_LIBRARY_PATH
export LD_LIBRARY_PATH=$NCCL_LIB:$LD_LIBRARY_PATH
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
  nproc; uname -r; ldd $NT/all_reduce_perf | grep nccl; ldd /tmp/nccl-tests-mpi/all_reduce_perf_mpi | grep -E "nccl|mpi"
  mpiexec --version | head -3; git -C .. log -1 --format=%H 2>/dev/null; } > $R/env.txt 2>&1
if [ $STAGE = nccl-tests ]; then
BINS="all_reduce all_gather reduce_scatter broadcast reduce alltoall scatter gather sendrecv"
# 1. nccl-tests, one process (-g G) and one process per GPU (MPI), eager to 1 GiB and CUDA graph to 1 MiB
for t in $BINS; do [ $(el) -gt 540 ] && break
  timeout 60 $NT/${t}_perf -b 8 -e 1G -f 2 -g $G -w 5 -n 20 -N 5 > $R/nccl-tests/nt-$t-g$G.txt 2>&1
  timeout 40 $NT/${t}_perf -b 8 -e 1M -f 2 -g $G -w 5 -n 20 -N 5 -G 10 > $R/nccl-tests/nt-$t-g$G-graph.txt 2>&1
  timeout 60 mpiexec -n $G /tmp/nccl-tests-mpi/${t}_perf_mpi -b 8 -e 1G -f 2 -g 1 -w 5 -n 20 -N 5 > $R/nccl-tests-mpi/nt-$t-g$G.txt 2>&1
  timeout 40 mpiexec -n $G /tmp/nccl-tests-mpi/${t}_perf_mpi -b 8 -e 1M -f 2 -g 1 -w 5 -n 20 -N 5 -G 10 > $R/nccl-tests-mpi/nt-$t-g$G-graph.txt 2>&1
done
# on the 4-GPU box also the MPI baseline at 2 GPUs (the 2-GPU box's MPI binaries lacked their library)
for g in ${MPI_ALSO:-}; do for t in $BINS; do [ $(el) -gt 540 ] && break
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g-1))) timeout 60 mpiexec -n $g /tmp/nccl-tests-mpi/${t}_perf_mpi -b 8 -e 1G -f 2 -g 1 -w 5 -n 20 -N 5 > $R/nccl-tests-mpi/nt-$t-g$g.txt 2>&1
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g-1))) timeout 40 mpiexec -n $g /tmp/nccl-tests-mpi/${t}_perf_mpi -b 8 -e 1M -f 2 -g 1 -w 5 -n 20 -N 5 -G 10 > $R/nccl-tests-mpi/nt-$t-g$g-graph.txt 2>&1
done; done; echo "nccl-tests done $(el)s" | tee -a $R/summary.txt
else
# 2. realgpu-bench, the same sizes, launches and statistic, one process per GPU (torch.distributed)
timeout 240 python -m realgpu.bench -g $G -b 8 -e 1G -f 2 -w 5 -n 20 --trials 5 --json $R/bench-g$G.json > $R/bench-g$G.txt 2>&1
echo "bench g$G rc=$? $(el)s" | tee -a $R/summary.txt
timeout 90 python -m realgpu.bench -g $G -b 8 -e 1M -f 2 -w 5 -n 20 --trials 5 -G 10 --json $R/bench-g$G-graph.json > $R/bench-g$G-graph.txt 2>&1
echo "bench g$G graph rc=$? $(el)s" | tee -a $R/summary.txt
# 3. where a small eager call's time goes, and whether CUMEM costs the graph-mode gap
for v in X=default TORCH_NCCL_TRACE_BUFFER_SIZE=0 TORCH_FR_BUFFER_SIZE=0 TORCH_NCCL_ENABLE_MONITORING=0 NCCL_CUMEM_ENABLE=0; do
  [ $(el) -gt 480 ] && break
  tag=$(echo $v | tr ' =' '_-')
  env $v timeout 40 python benchmarks/host_overhead.py --gpus $G --json $R/investigation/host-$tag-g$G.json > $R/investigation/host-$tag-g$G.txt 2>&1
done; echo "host overhead done $(el)s" | tee -a $R/summary.txt
[ $(el) -lt 500 ] && NCCL_CUMEM_ENABLE=0 timeout 60 python -m realgpu.bench -g $G -b 8 -e 1M -f 8 -w 5 -n 20 --trials 5 -G 10 \
    --collectives all_reduce,sendrecv,gather --json $R/investigation/bench-g$G-graph-nocumem.json > $R/investigation/bench-g$G-graph-nocumem.txt 2>&1
fi
echo "all done $(el)s" | tee -a $R/summary.txt
tar -czf $OUT/bench-g$G-$STAGE.tgz -C $OUT r-$STAGE; cp $R/summary.txt $OUT/; ls -la $OUT
