"""Run under `simgpu run --gpus 1`: what a CPU cannot simulate fails with one line."""
import torch

pool = torch.cuda.MemPool()
