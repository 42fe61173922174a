"""Run under `simgpu run --gpus 4` with CUDA_VISIBLE_DEVICES=2,0,x,1 (or CUDA_VISIBLE_DEVICES= and
SIMGPU_VISIBLE_DEVICES=2,0,x,1): CUDA stops at the bad entry."""
import torch

assert torch.cuda.device_count() == 2, torch.cuda.device_count()
assert torch.cuda.get_device_properties(0).pci_bus_id == 2 and torch.cuda.get_device_properties(1).pci_bus_id == 0
assert torch.cuda.get_device_name(0) == "simgpu simulated GPU 2"
print("OK visible_devices")
