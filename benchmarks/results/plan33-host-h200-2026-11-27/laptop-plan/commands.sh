cd /work/main
R=/tmp/pl/final; rm -rf $R; mkdir -p $R
log() { echo "$1 rc=$2 $3 s load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/times.txt; }
for mesh in "4 1 1" "2 2 1" "2 1 2"; do
  tag=$(echo $mesh | tr -d ' '); d=$R/laptop-llama-4gpu-$(echo $mesh | tr ' ' '-'); mkdir -p $d; s=$(date +%s)
  SIMGPU_PLAN_DIR=$d timeout 900 .venv/bin/python -m simgpu run --plan h200-141g --gpus 4 --ranks 0-3 torchrun --nproc-per-node 4 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > $d.log 2>&1; log "llama4 $mesh" $? $(( $(date +%s) - s ))
done
export SIMGPU_PLAN_HOST_PROBE_US=446
for mesh in "2 1 1" "1 2 1" "1 1 2"; do
  d=$R/laptop-llama-2gpu-$(echo $mesh | tr ' ' '-'); mkdir -p $d; s=$(date +%s)
  extra=""; [ "$mesh" = "2 1 1" ] && extra="--ranks 0,1"
  SIMGPU_PLAN_DIR=$d timeout 900 .venv/bin/python -m simgpu run --plan h200-141g --gpus 2 $extra torchrun --nproc-per-node 2 \
    benchmarks/plan_reference/llama_3d.py --mesh $mesh --size small --steps 4 --warmup 1 > $d.log 2>&1; log "llama2 $mesh" $? $(( $(date +%s) - s ))
done
d=$R/laptop-step_reference-small-2gpu; mkdir -p $d; s=$(date +%s)
SIMGPU_PLAN_DIR=$d timeout 900 .venv/bin/python -m simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 \
  benchmarks/plan_reference/step_reference.py --size small --layouts ddp fsdp2 fsdp2_mp tp --warmup 1 --steps 3 --out $d/steps.jsonl > $d.log 2>&1; log "sr2" $? $(( $(date +%s) - s ))
