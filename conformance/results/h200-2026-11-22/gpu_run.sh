set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
P="python -m pytest -p conformance.plugin -p simgpu.testing -q --tb=short -p no:cacheprovider --backend=nccl --hypothesis-seed=0"
(nvidia-smi --query-gpu=index,name,driver_version --format=csv; python -c "import torch;print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; date -u) > $OUT/env.txt 2>&1
s=$(date +%s); timeout 45 $P conformance/test_single_process.py --report-dir $OUT/single-x4 > $OUT/single-x4.log 2>&1; echo "single-x4 rc=$? $(( $(date +%s)-s ))s" >> $OUT/summary.txt
s=$(date +%s); CUDA_VISIBLE_DEVICES=0,1 timeout 40 $P conformance/test_single_process.py --report-dir $OUT/single-x2 > $OUT/single-x2.log 2>&1; echo "single-x2 rc=$? $(( $(date +%s)-s ))s" >> $OUT/summary.txt
s=$(date +%s); timeout 35 $P conformance/test_training.py --report-dir $OUT/ddp-x4 > $OUT/ddp-x4.log 2>&1; echo "ddp-x4 rc=$? $(( $(date +%s)-s ))s" >> $OUT/summary.txt
s=$(date +%s); timeout 110 $P conformance/test_collectives.py --report-dir $OUT/collectives-x4 --durations=15 > $OUT/collectives-x4.log 2>&1; echo "collectives-x4 rc=$? $(( $(date +%s)-s ))s" >> $OUT/summary.txt
cat $OUT/summary.txt; tail -2 $OUT/*.log
