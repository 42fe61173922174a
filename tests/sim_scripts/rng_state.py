"""Run under `simgpu run --gpus 2`: each GPU's generator has CUDA's (seed, offset) state."""
import torch

state = torch.cuda.get_rng_state()
assert state.dtype == torch.uint8 and state.numel() == 16 and state.device.type == "cpu", state
torch.cuda.manual_seed(7)
seed, offset = torch.cuda.get_rng_state().view(torch.int64).tolist()
assert (seed, offset) == (7, 0) and torch.cuda.initial_seed() == 7
a = torch.randn(10, device="cuda")
# CUDA moves the Philox offset by 4 per round of its launch grid (recorded on an H200: randn(10) -> 4)
assert torch.cuda.get_rng_state().view(torch.int64).tolist() == [7, 4], "10 draws move the offset by 4"
torch.cuda.set_rng_state(torch.tensor([7, 0], dtype=torch.int64).view(torch.uint8))
assert torch.equal(torch.randn(10, device="cuda").cpu(), a.cpu()), "the same (seed, offset), the same numbers"
with torch.random.fork_rng(devices=[0]):
    torch.randn(5, device="cuda")
assert torch.cuda.get_rng_state().view(torch.int64).tolist() == [7, 4], "fork_rng restores the state"
torch.manual_seed(3)
assert torch.cuda.get_rng_state(1).view(torch.int64).tolist() == [3, 0], "torch.manual_seed seeds every GPU"
x = torch.zeros(1000, device="cuda:1")
torch.nn.init.uniform_(x)
assert x.device == torch.device("cuda:1") and 0 <= x.min() and x.max() <= 1
assert torch.cuda.get_rng_state(1).view(torch.int64).tolist() == [3, 4], "in-place draws use the GPU's stream"
big = torch.empty(2_000_000, device="cuda:1").uniform_()  # more than one round of 1056 blocks x 256 threads x 4
assert torch.cuda.get_rng_state(1).view(torch.int64).tolist() == [3, 4 + 8], "two grid rounds move it by 8"
dropped = torch.nn.functional.dropout(torch.ones(100, device="cuda:1"), 0.5)
assert dropped.device == torch.device("cuda:1") and set(dropped.unique().tolist()) <= {0.0, 2.0}
try:
    torch.cuda.set_rng_state(torch.zeros(5056, dtype=torch.uint8))
except RuntimeError as exc:
    assert "16 bytes" in str(exc)
else:
    raise AssertionError("a CPU generator's state is not a CUDA generator's")
print("OK rng_state")
