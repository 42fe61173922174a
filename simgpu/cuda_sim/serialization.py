"""torch.save and torch.load of tensors on simulated GPUs, with CUDA's location tags.

A storage on simulated GPU i is saved tagged "cuda:i", as on CUDA, so a checkpoint written here
loads on real GPUs and the other way round; loading a "cuda:i" storage (no map_location, a string,
a dict, a torch.device) puts it on simulated GPU i without asking CUDA for memory. Storage methods
that move or resize a storage keep its device label and its charge in the allocator model.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.serialization

from simgpu.cuda_sim import devices

PRIORITY = 5  # before torch's own cpu (10) and cuda (20) entries


def _untyped(storage: Any) -> Any:
    return getattr(storage, "_untyped_storage", storage)


def _tag(storage: Any) -> str | None:
    index = getattr(_untyped(storage), devices.LABEL, None)
    return None if index is None else f"cuda:{index}"


def _restore(storage: Any, location: str) -> Any:
    if not location.startswith("cuda"):
        return None
    index = devices.resolve(torch.device(location))
    untyped = _untyped(storage)
    if getattr(storage, "_torch_load_uninitialized", False):
        restored = torch.UntypedStorage(untyped.nbytes())
    else:
        restored = untyped  # a fresh host copy read from the file: it becomes the GPU's
    setattr(restored, devices.LABEL, index)
    devices.account(restored, index)
    return restored


def _storage_to(storage: Any, index: int | None) -> Any:
    """A storage copy on simulated GPU `index` (None: host), or the storage itself when it is there."""
    if getattr(storage, devices.LABEL, None) == index:
        return storage
    if storage.device.type == "meta":  # a plan's storage-less storage: zeros on the host, none on a GPU (plan.py)
        copy = torch.UntypedStorage(storage.nbytes(), device="meta" if index is not None else "cpu")
        if index is None:
            copy.fill_(0)
    else:
        copy = torch.UntypedStorage(storage.nbytes())
        copy.copy_(storage)
    if index is not None:
        setattr(copy, devices.LABEL, index)
        devices.account(copy, index)
    return copy


def _storage_cuda(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
    index = devices.current() if device is None else devices.resolve(device)
    return _storage_to(self, index)


def _storage_cpu(self: Any) -> Any:
    return _storage_to(self, None)


def _storage_to_device(self: Any, *, device: Any, non_blocking: bool = False) -> Any:
    index = devices.resolve(device)
    return _storage_to(self, index)


def _storage_clone(original: Any) -> Any:
    def clone(self: Any) -> Any:
        """A copy on the same device (copy.deepcopy of a tensor clones its storage)."""
        copy = original(self)
        index = getattr(self, devices.LABEL, None)
        if index is not None and getattr(copy, devices.LABEL, None) is None:
            setattr(copy, devices.LABEL, index)
            devices.account(copy, index)
        return copy

    return clone


def _storage_resize(original: Any) -> Any:
    def resize_(self: Any, size: int) -> Any:
        """Resize in place; on a simulated GPU the allocator is charged the new size instead of the old."""
        out = original(self, size)
        index = getattr(self, devices.LABEL, None)
        if index is not None:
            devices.recharge(self, index)
        return out

    return resize_


def install() -> None:
    """Register the location tags and give UntypedStorage CUDA's transfers (TypedStorage's go through it)
    and its in-place resize, whose memory the allocator model must see."""
    torch.UntypedStorage.clone = _storage_clone(torch.UntypedStorage.clone)
    torch.UntypedStorage.resize_ = _storage_resize(torch.UntypedStorage.resize_)
    if not any(entry[0] == PRIORITY for entry in torch.serialization._package_registry):
        torch.serialization.register_package(PRIORITY, _tag, _restore)
    torch.UntypedStorage.cuda = _storage_cuda
    torch.UntypedStorage.cpu = _storage_cpu
    torch.UntypedStorage.to = _storage_to_device
