# Device call (nvidia-h200-x4), issue 6: realgpu-bench and nccl-tests 2.19.6 on the same box, same call.
# nccl-tests was built on the same image from NVIDIA/nccl-tests (sm_90, against torch's NCCL 2.28.9);
# its binaries come in the ignored .nccl-tests/bin.tgz (neither its code nor its build script is in the repo).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd .snap; export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; T0=$(date +%s); el() { echo $(( $(date +%s)-T0 )); }
NCCL_LIB=$(python -c "import nvidia.nccl as m; print(list(m.__path__)[0])")/lib
tar -xzf ../.nccl-tests/bin.tgz -C /tmp; NT=/tmp/nccl-tests-build; export LD_LIBRARY_PATH=$NCCL_LIB:${LD_LIBRARY_PATH:-}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
  nproc; uname -r; ldd $NT/all_reduce_perf | grep nccl; } > $R/env.txt 2>&1
# 1. nccl-tests: eager to 1 GiB, CUDA graph (-G 10) to 1 MiB, at 4 and 2 GPUs (one process, -g)
for g in 4 2; do for t in all_reduce all_gather reduce_scatter broadcast reduce alltoall scatter gather sendrecv; do
  timeout 60 $NT/${t}_perf -b 8 -e 1G -f 2 -g $g -w 5 -n 20 > $R/nt-$t-g$g.txt 2>&1
  timeout 40 $NT/${t}_perf -b 8 -e 1M -f 2 -g $g -w 5 -n 20 -G 10 > $R/nt-$t-g$g-graph.txt 2>&1
done; done; echo "nccl-tests done $(el)s" | tee -a $R/summary.txt
# 2. realgpu-bench, the same sizes and iterations, one process per GPU (torch.distributed)
for g in 4 2; do
  timeout 170 python -m realgpu.bench -g $g -b 8 -e 1G -f 2 -w 5 -n 20 --json $R/bench-g$g.json > $R/bench-g$g.txt 2>&1
  echo "bench g$g rc=$? $(el)s" | tee -a $R/summary.txt
  timeout 80 python -m realgpu.bench -g $g -b 8 -e 1M -f 2 -w 5 -n 20 -G 10 --json $R/bench-g$g-graph.json > $R/bench-g$g-graph.txt 2>&1
  echo "bench g$g graph rc=$? $(el)s" | tee -a $R/summary.txt
done
# 3. why all_reduce/broadcast at 128 MiB: NCCL settings, one process (torch.cuda.nccl) vs one per GPU, NCCL's own log
for v in X=default NCCL_PROTO=Simple "NCCL_ALGO=Ring NCCL_PROTO=Simple" NCCL_ALGO=Tree NCCL_MIN_NCHANNELS=32 NCCL_CUMEM_ENABLE=0; do
  [ $(el) -gt 520 ] && break
  tag=$(echo $v | tr ' =' '_-')
  env $v timeout 40 python -m realgpu.bench -g 4 -b 32M -e 512M -f 4 --collectives all_reduce,broadcast -c 0 -n 20 -w 5 > $R/inv-torch-$tag.txt 2>&1
  for t in all_reduce broadcast; do env $v timeout 20 $NT/${t}_perf -b 32M -e 512M -f 4 -g 4 -w 5 -n 20 > $R/inv-nt-$t-$tag.txt 2>&1; done
done; echo "variants done $(el)s" | tee -a $R/summary.txt
[ $(el) -lt 540 ] && timeout 30 python benchmarks/single_process_nccl.py --gpus 4 --sizes 32M,128M,512M > $R/inv-single-process.txt 2>&1
[ $(el) -lt 550 ] && NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING timeout 25 python -m realgpu.bench -g 4 -b 128M -e 128M --collectives all_reduce,broadcast -c 0 -n 3 -w 1 > $R/inv-debug-torch.txt 2>&1
[ $(el) -lt 560 ] && NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING timeout 15 $NT/all_reduce_perf -b 128M -e 128M -g 4 -w 1 -n 3 > $R/inv-debug-nt.txt 2>&1
echo "all done $(el)s" | tee -a $R/summary.txt
tar -czf $OUT/bench-results.tgz -C $OUT r; cp $R/summary.txt $OUT/; ls -la $OUT
