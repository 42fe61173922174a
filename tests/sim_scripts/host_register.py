"""Run under `simgpu run --gpus 1`: host memory pinned in place through cudaHostRegister, as DCP's
`_create_cpu_state_dict(share_memory=True, pin_memory=True)` (asynchronous checkpoints' staging) does. It
reached torch.cuda.cudart(), refused under simulation."""
import torch
from torch.cuda import _pin_memory_utils
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

state_dict = {"w": torch.arange(10.0, device="cuda"), "b": torch.ones(3, device="cuda"), "step": 7}
staged = _create_cpu_state_dict(state_dict, share_memory=True, pin_memory=True)
for key in ("w", "b"):
    assert staged[key].device.type == "cpu" and staged[key].is_shared(), key
    assert staged[key].is_pinned(), f"{key}: registered host memory is pinned to CUDA"
assert staged[key][1:].is_pinned(), "a view into registered memory is pinned too"
_copy_state_dict(state_dict, staged)
assert torch.equal(staged["w"], torch.arange(10.0)) and staged["step"] == 7

plain = torch.empty(16).share_memory_()
assert not plain.is_pinned()
_pin_memory_utils.pin_memory(plain.data_ptr(), plain.numel() * plain.element_size())
assert plain.is_pinned()
for call, error in ((lambda: _pin_memory_utils.pin_memory(plain.data_ptr(), 64), "cudaError: 712"),
                    (lambda: _pin_memory_utils.unpin_memory(plain.data_ptr() + 4), "error-code: 713")):
    try:
        call()
    except (RuntimeError, AssertionError) as exc:  # CUDA's answers, as torch's wrappers raise them
        assert error in str(exc), exc
    else:
        raise AssertionError(f"expected {error}")
_pin_memory_utils.unpin_memory(plain.data_ptr())
assert not plain.is_pinned()
print("OK host_register")
