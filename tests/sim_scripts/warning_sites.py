"""Run under `simgpu run --gpus 2`: a warning that torch raises in a call the program makes on a simulated
GPU names the program's line, as without simgpu (not simgpu's frame that called torch)."""
import warnings

import torch
import torch.nn.functional as F

x = torch.randn(3, 4, device="cuda")
out = torch.empty(2, device="cuda")


def check(call):
    """The one warning `call` raises names the line of the lambda that makes the torch call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    assert len(caught) == 1, [str(w.message) for w in caught]
    got, want = (caught[0].filename, caught[0].lineno), (__file__, call.__code__.co_firstlineno)
    assert got == want, (got, want, str(caught[0].message)[:60])


check(lambda: torch.tensor(x))                   # C++ (TORCH_WARN) through the program-call mode
check(lambda: F.softmax(x))                      # Python (stacklevel) in a torch function the mode calls again
check(lambda: torch.add(x, x, out=out))          # C++ in the kernel of an op the dispatch mode places
print("OK warning_sites")
