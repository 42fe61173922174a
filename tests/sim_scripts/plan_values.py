"""Under a plan (tests/test_plan.py): a storage-less tensor pickled and saved, and an in-place foreach op priced."""
import io
import json
import pickle

import torch

from simgpu.cuda_sim import plan

x = torch.randn(3, 4, device="cuda")
back = pickle.loads(pickle.dumps(x))
buffer = io.BytesIO()
torch.save(x, buffer)
buffer.seek(0)
saved = torch.load(buffer, map_location="cpu")
tensors = [torch.randn(64, device="cuda") for _ in range(8)]
before = dict(plan.RECORDER.current)
torch._foreach_add_(tensors, 1.0)
after = dict(plan.RECORDER.current)
if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch's newer precision API: priced as TF32, no error
    torch.backends.cuda.matmul.fp32_precision = "tf32"
a = torch.randn(1024, 1024, device="cuda")
a @ a
tf32_us = plan.RECORDER.current["compute_us"] - after["compute_us"]
if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
    torch.backends.cuda.matmul.fp32_precision = "ieee"
b = plan.RECORDER.current["compute_us"]
a @ a
fp32_us = plan.RECORDER.current["compute_us"] - b
print(json.dumps({"pickled": {"device": str(back.device), "shape": list(back.shape), "zeros": bool((back.cpu() == 0).all())},
                  "saved_zeros": bool((saved == 0).all()) and list(saved.shape) == [3, 4],
                  "foreach_ops": after["ops"] - before["ops"], "foreach_us": after["compute_us"] - before["compute_us"],
                  "new_api": hasattr(torch.backends.cuda.matmul, "fp32_precision"), "tf32_us": tf32_us, "fp32_us": fp32_us}))
