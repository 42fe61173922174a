#!/usr/bin/env bash
# Issue 27 on a GPU box, from the repository root: PyTorch's own distributed test files (a sparse checkout,
# see docs/torch-distributed-suite.md) on the box's real GPUs, and on the same box's torch under simulation
# with the real GPUs hidden from the CUDA driver (upstream.py does that for every simulated run).
#
#   bash benchmarks/torch_suite/gpu_box.sh real      # every file and distributed_test.py, 4 real GPUs
#   bash benchmarks/torch_suite/gpu_box.sh sim       # the checkout's files, simgpu run --gpus 4
#   bash benchmarks/torch_suite/gpu_box.sh sim-dt    # distributed_test.py's subsets, simgpu run --gpus 4
#
# Environment: OUT (results go to $OUT/torch27/; default reports/gpu_box), SRC (the checkout; default
# .torchsrc/pytorch-src), WHEELS (expecttest's wheel; default .torchsrc/wheels), PYTHON (default python),
# JOBS (units at once; default 6 for real: more units at once share the same 4 GPUs and NCCL slows each
# down, 24 ran 100-360 s a unit on 4 H200s; 24 for the simulated modes), BUDGET (seconds for the runner; default 500), REF (a real run's
# results.json: the simulated run then runs only what passed there), INSTALL=0 (skip the pip installs),
# EXTRA (more upstream.py arguments), TAG (the output files' name; default the mode). Each mode writes at most 6 files (the device tool returns 8).
set -u
mode=${1:?"usage: gpu_box.sh real|sim|sim-dt"}
PY=${PYTHON:-python}
SRC=${SRC:-.torchsrc/pytorch-src}
WHEELS=${WHEELS:-.torchsrc/wheels}
O=${OUT:-reports/gpu_box}/torch27
tag=${TAG:-$mode}  # names the output files: two calls of one mode (e.g. families split with EXTRA) keep both
work=/tmp/torch27-$tag
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$O"
default_jobs=24
case $mode in
  real) args=(--real); default_jobs=6 ;;
  sim) args=(--families fsdp2,dtensor,tensor_parallel,device_mesh,functional_collectives,checkpoint) ;;
  sim-dt) args=(--families distributed_test) ;;
  *) echo "gpu_box.sh: unknown mode $mode (real, sim or sim-dt)" >&2; exit 2 ;;
esac
if [ "$mode" != real ] && [ -n "${REF:-}" ]; then args+=(--reference "$REF"); fi
if [ "${INSTALL:-1}" = 1 ]; then
  $PY -m pip install -q --no-deps --no-build-isolation -e . >"$O/install-$tag.log" 2>&1 || tail -5 "$O/install-$tag.log"
  $PY -m pip install -q --no-deps --no-index --find-links "$WHEELS" expecttest >>"$O/install-$tag.log" 2>&1 \
    || tail -5 "$O/install-$tag.log"
fi
{
  date -u +%FT%TZ
  $PY -c 'import sys, torch, pytest, expecttest; print("torch", torch.__version__, torch.version.git_version, "cuda",
torch.version.cuda, "python", sys.version.split()[0], "pytest", pytest.__version__)'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -8
  if [ "$mode" != real ]; then  # the simulator on this torch, real GPUs hidden: 4 simulated GPUs, a tensor on one
    CUDA_VISIBLE_DEVICES= SIMGPU_VISIBLE_DEVICES=0,1,2,3 timeout 120 $PY -m simgpu run --gpus 4 $PY -c 'import torch
print("simulated:", torch.cuda.device_count(), torch.cuda.get_device_name(0), torch.ones(2, device="cuda:3").device)' 2>&1 | tail -5
  fi
} >"$O/versions-$tag.txt" 2>&1
cat "$O/versions-$tag.txt"
start=$(date +%s)
# shellcheck disable=SC2086
$PY benchmarks/torch_suite/upstream.py "${args[@]}" --gpus 4 --pytorch-src "$SRC" --chunk 6 --jobs "${JOBS:-$default_jobs}" \
  --timeout 300 --budget "${BUDGET:-500}" --out "$work" ${EXTRA:-} >"$O/$tag.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >>"$O/$tag.log"
cp "$work/results.json" "$O/$tag-results.json" 2>/dev/null || echo "no results.json in $work" >>"$O/$tag.log"
tar czf "$O/$tag-logs.tgz" -C /tmp "torch27-$tag"
tail -25 "$O/$tag.log"
