"""Random generators of simulated GPUs: `torch.cuda.default_generators`, `torch.Generator("cuda")`.

A CUDA generator is a Philox generator whose state is 16 bytes, a seed and an offset; each kernel launch
draws from (seed, offset) and moves the offset as CUDA's kernels do (`philox_state`). DTensor's random
ops and model-parallel RNG trackers set that offset to give each shard its own numbers, and checkpoints
store it, so the state here is that one. The numbers are CUDA's: random_ops.py runs the random ops of
simulated GPUs through cuRAND's Philox4x32-10 with torch's CUDA launch rules (docs/cuda-simulation.md).
An op it does not cover draws from a CPU generator seeded from (seed, offset) instead (`run`): the same
on every run, not CUDA's, with the offset moved as a float distribution kernel would move it.

A `CudaGenerator` is a real `torch.Generator` (isinstance checks, `generator=` arguments), whose
CPU state below is only used for one such fallback draw at a time.

State tensors are made and read with torch's modes set aside, as CUDA's C++ does: inside a
FakeTensorMode (DTensor's RNG tracker under LocalTensorMode) they stay real host tensors.
"""
from __future__ import annotations

import random as _py_random
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

from simgpu.cuda_sim import generator_identity

CUDA_DEFAULT_SEED = 67280421310721  # what every CUDA generator starts from, as in torch
_STATE_BYTES = 16


def _real_state(seed: int, offset: int) -> torch.Tensor:
    """CUDA's 16-byte state tensor (int64 seed, int64 offset) as a real host ByteTensor."""
    from simgpu.cuda_sim.placement import suspended

    signed_seed = seed - 2**64 if seed >= 2**63 else seed
    with _disable_current_modes(), suspended(), torch._C.DisableTorchFunction():
        return torch.tensor([signed_seed, offset], dtype=torch.int64).view(torch.uint8)


def _read_state(state: torch.Tensor) -> tuple[int, int]:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() != _STATE_BYTES:
        got = f"{state.dtype} with {state.numel()} elements" if isinstance(state, torch.Tensor) else type(state).__name__
        raise RuntimeError(f"RNG state must be a torch.ByteTensor of 16 bytes (seed, offset) for a CUDA generator "
                           f"(simgpu: got {got})")
    from simgpu.cuda_sim.placement import suspended

    with _disable_current_modes(), suspended(), torch._C.DisableTorchFunction():
        seed, offset = torch.Tensor.view(state.detach().clone().contiguous(), torch.int64).tolist()
    return seed % 2**64, offset


def philox_offset_increment(count: int) -> int:
    """How far a float distribution kernel (4 values per Philox call) moves the offset for `count` numbers:
    what the fallback draw (`CudaGenerator.run`) moves it by."""
    from simgpu.cuda_sim import random_kernels

    return random_kernels.counter_offset(count, 4) if count > 0 else 0


class CudaGenerator(torch._C.Generator):
    """One simulated GPU's random stream (module docstring), with torch.Generator's methods."""

    def __new__(cls, index: int) -> "CudaGenerator":
        return super().__new__(cls)

    def __init__(self, index: int) -> None:
        self._simgpu_index = index
        self._seed = CUDA_DEFAULT_SEED
        self._offset = 0
        generator_identity.stamp(self)  # found again after a trip through the dispatcher

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self._simgpu_index)

    def manual_seed(self, seed: int) -> "CudaGenerator":  # type: ignore[override]
        self._seed, self._offset = int(seed) % 2**64, 0
        return self

    def seed(self) -> int:  # type: ignore[override]
        """A non-deterministic seed, as torch draws it, set and returned."""
        self.manual_seed(_py_random.SystemRandom().getrandbits(63))
        return self._seed

    def initial_seed(self) -> int:  # type: ignore[override]
        return self._seed

    def get_offset(self) -> int:  # type: ignore[override]
        return self._offset

    def set_offset(self, offset: int) -> "CudaGenerator":  # type: ignore[override]
        if offset % 4:
            raise RuntimeError(f"offset must be a multiple of 4 (got {offset})")
        self._offset = int(offset)
        return self

    def get_state(self) -> torch.Tensor:  # type: ignore[override]
        return _real_state(self._seed, self._offset)

    def set_state(self, new_state: torch.Tensor) -> "CudaGenerator":  # type: ignore[override]
        seed, offset = _read_state(new_state)
        if offset % 4:  # CUDAGeneratorImpl::set_philox_offset_per_thread
            raise RuntimeError(f"offset must be a multiple of 4 (got {offset})")
        self._seed, self._offset = seed, offset
        return self

    def clone_state(self) -> "CudaGenerator":  # type: ignore[override]
        twin = CudaGenerator(self._simgpu_index)
        twin._seed, twin._offset = self._seed, self._offset
        return twin

    def graphsafe_get_state(self) -> "CudaGenerator":  # type: ignore[override]
        return self.clone_state()

    def graphsafe_set_state(self, state: "CudaGenerator") -> "CudaGenerator":  # type: ignore[override]
        if not isinstance(state, CudaGenerator):
            raise RuntimeError(f"graphsafe_set_state expects a CUDA generator's state (got {type(state).__name__})")
        self._seed, self._offset = state._seed, state._offset
        return self

    def __reduce__(self) -> Any:
        """Pickled as CUDA pickles its generators: torch.Generator(device), then (seed, offset, state)."""
        return (Generator, (self.device,), (self._seed, self._offset, self.get_state()))

    def __setstate__(self, state: tuple) -> None:
        self.set_state(state[2])

    def __repr__(self) -> str:
        return f"<torch._C.Generator object on cuda:{self._simgpu_index} (simgpu)>"

    # ---- how simulated ops draw from it ----
    def philox_state(self, increment: int) -> tuple[int, int]:
        """CUDAGeneratorImpl::philox_cuda_state: the (seed, offset) one kernel launch draws from; the offset
        then moves past it by `increment` rounded up to a multiple of 4 (random_kernels.py says how much; the
        fused attention kernels take theirs once, and their backward draws the same numbers again)."""
        seed, offset = self._seed, self._offset
        self._offset += (increment + 3) // 4 * 4
        return seed, offset

    def _draw(self) -> torch.Generator:
        """The CPU generator for the next draw (the offset moves past it once the draw is done)."""
        return host_generator(self._seed, self._offset)

    def advance(self, count: int) -> None:
        self._offset += philox_offset_increment(count)

    def run(self, call: Callable[[torch.Generator], Any]) -> Any:
        """Run `call(cpu_generator)` as one draw: its outputs' numbers come from this stream's offset."""
        out = call(self._draw())
        self.advance(sum(t.numel() for t in (out if isinstance(out, (list, tuple)) else [out])
                         if isinstance(t, torch.Tensor)))
        return out


def host_generator(seed: int, offset: int) -> torch.Generator:
    """The CPU generator that stands for CUDA's Philox stream at (seed, offset)."""
    return torch._C.Generator().manual_seed((seed * 0x9E3779B97F4A7C15 + offset) % 2**63)


class _GeneratorMeta(type(torch._C.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, torch._C.Generator)


class Generator(torch._C.Generator, metaclass=_GeneratorMeta):
    """torch.Generator as a CUDA build makes it: `torch.Generator(device="cuda:1")` is that simulated
    GPU's kind of generator; any other device is torch's own."""

    def __new__(cls, device: Any = "cpu") -> Any:  # type: ignore[misc]
        from simgpu.cuda_sim import devices

        index = devices.resolve(device) if device is not None else None
        if index is None:
            return torch._C.Generator(device if device is not None else "cpu")
        return CudaGenerator(index)


Generator.__module__, Generator.__name__, Generator.__qualname__ = "torch", "Generator", "Generator"
CudaGenerator.__name__ = CudaGenerator.__qualname__ = "Generator"  # type(g).__name__, as torch's generators say
_defaults: dict[int, CudaGenerator] = {}


def default(index: int) -> CudaGenerator:
    """Simulated GPU `index`'s default generator (torch.cuda.default_generators[index])."""
    if index not in _defaults:
        _defaults[index] = CudaGenerator(index)
    return _defaults[index]


def defaults(count: int) -> tuple[CudaGenerator, ...]:
    return tuple(default(i) for i in range(count))


def stream_for(generator: Any, index: int) -> CudaGenerator | None:
    """The stream a random op on simulated GPU `index` draws from: its default generator, or the
    CUDA generator the program passed; None for a host generator (torch's own, used as given)."""
    if generator is None:
        return default(index)
    generator = generator_identity.resolve(generator)
    if isinstance(generator, CudaGenerator):
        return generator
    return None
