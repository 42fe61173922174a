"""Run under `simgpu run --gpus 3`: a Python subprocess sees the same simulated GPUs."""
import subprocess
import sys

out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count(), torch.ones(1).cuda(2).device)"],
                     capture_output=True, text=True, check=True).stdout.split()
assert out == ["3", "cuda:2"], out
print("OK child_inherits")
