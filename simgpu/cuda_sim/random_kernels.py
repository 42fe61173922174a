"""Which Philox counter each element of a CUDA random kernel's output comes from, and how far the kernel
moves its generator's offset: torch's CUDA kernels (2.11; aten/src/ATen/native/cuda/DistributionTemplates.h,
Dropout.cu, Randperm.cu/.cuh, MultinomialKernel.cu, ATen/cuda/CUDAApplyUtils.cuh) replayed on the host.

- `nullary`: distribution_nullary_kernel (uniform_, normal_, random_, bernoulli_(float), exponential_, ...).
  Blocks of 256 threads, grid = min(SMs * 2048 / 256, ceil(n / 256)); thread t's k-th draw covers the
  elements t + G * (unroll * k + i) of TensorIterator's order (G = grid * 256 threads, i < unroll, unroll =
  values per draw: 4, or 2 for double and 64-bit draws); the offset moves by 4 * ceil(n / (G * unroll)).
  Outputs past 2^31 - 1 bytes are split in halves as TensorIterator's with_32bit_indexing does, each half
  another launch with its own offset.
- `bernoulli_tensor`: CUDA_tensor_apply2 with 512-thread blocks, 4 consecutive elements (after
  rearrangeDims) per thread from one curand_uniform4; the offset moves by 12, whatever the size.
- `fused_dropout`: Dropout.cu's kernels, vectorised (memory order, VEC elements per thread and round) or not
  (logical order, the grid-stride rule above); the offset moves as `nullary`'s with unroll 4.
- `randperm`: keys from random_ on int32 (int64 past 2^32 keys' worth of bits), a stable radix sort on
  their low bits, then runs of equal keys shuffled by their first thread's own curand() stream.
- `multinomial_with_replacement`: one curand_uniform4 per (distribution, sample) thread, its x.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

from simgpu.cuda_sim import gpu_model, philox

BLOCK = 256
MAX_INDEX = 2**31 - 1
CHUNK = 1 << 16  # Philox calls computed at a time: small enough for the CPU's caches


class Stream(Protocol):
    def philox_state(self, increment: int) -> tuple[int, int]: ...


def grid(numel: int) -> int:
    """calc_execution_policy's grid: as many 256-thread blocks as the GPU holds at once, at most."""
    per_sm = gpu_model.MAX_THREADS_PER_MULTI_PROCESSOR // BLOCK
    return min(gpu_model.MULTI_PROCESSOR_COUNT * per_sm, (numel + BLOCK - 1) // BLOCK)


def counter_offset(numel: int, unroll: int) -> int:
    """How far one launch over `numel` elements moves the Philox offset (4 per grid-stride round)."""
    return ((numel - 1) // (BLOCK * grid(numel) * unroll) + 1) * 4


# ---- TensorIterator's order over one output ------------------------------------------------------
def iteration_view(out: torch.Tensor) -> tuple[list[int], list[int]]:
    """TensorIterator's (coalesced) shape and element strides for `out` alone, innermost dimension first."""
    sizes, strides = list(out.shape) or [1], list(out.stride()) or [1]
    perm = list(range(len(sizes)))[::-1]

    def should_swap(d0: int, d1: int) -> int:
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 != s1:
            return 1 if s0 > s1 else -1
        return 1 if sizes[d0] > sizes[d1] else 0

    for i in range(1, len(perm)):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    shape, stride = [sizes[p] for p in perm], [strides[p] for p in perm]
    prev = 0
    for dim in range(1, len(shape)):
        if shape[prev] == 1 or shape[dim] == 1 or stride[prev] * shape[prev] == stride[dim]:
            if shape[prev] == 1:
                stride[prev] = stride[dim]
            shape[prev] *= shape[dim]
        else:
            prev += 1
            shape[prev], stride[prev] = shape[dim], stride[dim]
    return shape[:prev + 1], stride[:prev + 1]


def _fits_32bit(shape: list[int], stride: list[int], itemsize: int) -> bool:
    numel = math.prod(shape)
    return numel <= MAX_INDEX and 1 + sum((s - 1) * st * itemsize for s, st in zip(shape, stride)) <= MAX_INDEX


def _split_32bit(shape: list[int], stride: list[int], offset: int,
                 itemsize: int) -> list[tuple[list[int], list[int], int]]:
    """SplitUntil32Bit's sub-iterators, in launch order: (shape, stride, element offset) each."""
    pending, done = [(shape, stride, offset)], []
    while pending:
        sh, st, off = pending.pop()
        if _fits_32bit(sh, st, itemsize):
            done.append((sh, st, off))
            continue
        extents = [(s - 1) * abs(x) * itemsize if s else -1 for s, x in zip(sh, st)]
        dim = max(range(len(sh) - 1, -1, -1), key=lambda d: extents[d])  # the first maximum from the outside
        half = sh[dim] // 2
        second = list(sh)
        second[dim] = sh[dim] - half
        first = list(sh)
        first[dim] = half
        pending.append((second, st, off + half * st[dim]))  # TensorIterator keeps the rest,
        pending.append((first, st, off))                     # launching the split-off first half first
    return done


def _strided_view(base: torch.Tensor, shape: list[int], stride: list[int], offset: int) -> torch.Tensor:
    """The view whose row-major order is the iterator's (shape and stride given innermost first)."""
    return base.as_strided(shape[::-1], stride[::-1], base.storage_offset() + offset)


# ---- the grid-stride distribution kernel ---------------------------------------------------------
Transform = Callable[[np.ndarray], np.ndarray]


def grid_stride_values(seed: int, offset: int, numel: int, draw: philox.Draw, transform: Transform) -> np.ndarray:
    """The kernel's outputs in iterator order: element t + G * (unroll * k + i) is value i of thread t's
    k-th draw, transformed. Computed a few ten thousand values at a time, which keeps numpy in cache."""
    unroll = philox.PER_CALL[draw]
    threads = grid(numel) * BLOCK
    calls = (numel - 1) // (threads * unroll) + 1
    if numel <= threads:  # one round, and only the first value of each thread lands in the output
        return transform(draw(*philox.block(seed, offset, 0, 1, numel)))[0, 0]
    out = None
    step = max(BLOCK, CHUNK // calls // BLOCK * BLOCK)
    for first in range(0, threads, step):
        ids = np.arange(first, min(first + step, threads), dtype=np.uint64)
        values = transform(draw(*philox.block(seed, offset, 0, calls, ids)))  # (unroll, calls, len(ids))
        if out is None:
            out = np.empty((calls, unroll, threads), values.dtype)
        out[:, :, first:first + ids.size] = values.transpose(1, 0, 2)
    return out.reshape(-1)[:numel]


def nullary(out: torch.Tensor, stream: Stream, draw: philox.Draw, transform: Transform,
            to_torch: Callable[[np.ndarray], torch.Tensor]) -> torch.Tensor:
    """distribution_nullary_kernel writing `out` in place (module docstring)."""
    if out.numel() == 0:
        return out
    shape, stride = iteration_view(out)
    for sub_shape, sub_stride, offset, seed, philox_offset in launches(shape, stride, out.element_size(),
                                                                       philox.PER_CALL[draw], stream):
        values = grid_stride_values(seed, philox_offset, math.prod(sub_shape), draw, transform)
        view = _strided_view(out, sub_shape, sub_stride, offset)
        view.copy_(to_torch(values).view(view.shape))
    return out


def launches(shape: list[int], stride: list[int], itemsize: int, unroll: int, stream: Stream,
             offset: int = 0) -> Iterator[tuple[list[int], list[int], int, int, int]]:
    """distribution_nullary_kernel's launches over an iterator (shape, stride innermost first): (shape,
    stride, element offset, seed, Philox offset) of each, in order. A launch takes its Philox offset before
    it looks at its size, so one split in halves moves the offset for the whole and for each half."""
    seed, philox_offset = stream.philox_state(counter_offset(math.prod(shape), unroll))
    if _fits_32bit(shape, stride, itemsize):
        yield shape, stride, offset, seed, philox_offset
        return
    for sub_shape, sub_stride, sub_offset in _split_32bit(shape, stride, offset, itemsize):
        yield from launches(sub_shape, sub_stride, itemsize, unroll, stream, sub_offset)


# ---- CUDA_tensor_apply2: bernoulli_(Tensor p) ----------------------------------------------------
def _rearranged(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rearrangeDims: a dimension moves inwards past another whose strides are no smaller for every tensor
    and larger for one; returns both tensors permuted so that row-major order is the kernel's."""
    dims = list(range(a.dim()))
    sizes = list(a.shape)
    strides = [list(a.stride()), list(b.stride())]
    for i in range(len(dims) - 1):
        if sizes[i] == 1:
            continue
        for j in range(i + 1, len(dims)):
            if sizes[j] == 1:
                continue
            increasing = any(s[i] < s[j] for s in strides)
            decreasing = any(s[i] > s[j] for s in strides)
            if increasing and not decreasing:
                for seq in (dims, sizes, *strides):
                    seq[i], seq[j] = seq[j], seq[i]
    return a.permute(dims), b.permute(dims)


def bernoulli_tensor(out: torch.Tensor, p: torch.Tensor, stream: Stream) -> torch.Tensor:
    """bernoulli_tensor_cuda_kernel: element 4t + i (kernel order) is (uniform_i of thread t's first draw
    <= p), thread t = blockIdx * 512 + threadIdx; p is float (double for a double output)."""
    seed, offset = stream.philox_state(10)
    if out.numel() == 0:
        return out
    p = p.to(torch.float64 if out.dtype == torch.float64 else torch.float32).expand(out.shape)
    target, probabilities = _rearranged(out, p)
    numel = out.numel()
    threads = (numel + 3) // 4
    rand = philox.uniform4(*philox.block(seed, offset, 0, 1, threads))[:, 0, :]  # (4, threads)
    rand = torch.from_numpy(np.ascontiguousarray(rand.T).reshape(-1)[:numel]).to(probabilities.dtype)
    target.copy_((rand <= probabilities.reshape(-1)).view(target.shape))
    return out


# ---- Dropout.cu ---------------------------------------------------------------------------------
def _vector_size(x: torch.Tensor) -> int:
    """get_vector_size: 4 floats (8 halves, 2 doubles) per thread where the input's address allows and
    the element count divides (the allocator's blocks are 512-byte aligned: the address is the offset)."""
    if not _non_overlapping_and_dense(x):
        return 1
    item = x.element_size()
    address = x.storage_offset() * item
    vec = next((v for v in (8, 4, 2) if address % (v * item) == 0), 1)
    vec = min(vec, 16 // item)
    while vec > 1 and x.numel() % vec:
        vec //= 2
    return vec


def _non_overlapping_and_dense(x: torch.Tensor) -> bool:
    pairs = sorted((st, sz) for sz, st in zip(x.shape, x.stride()) if sz != 1)
    expected = 1
    for st, sz in pairs:
        if st != expected:
            return False
        expected *= sz
    return True


def fused_dropout(x: torch.Tensor, keep: float, stream: Stream) -> tuple[torch.Tensor, torch.Tensor]:
    """dropout_cuda: (x * mask / keep, mask) with mask = uniform < keep (module docstring)."""
    mask = torch.empty_like(x, dtype=torch.bool)
    numel = x.numel()
    if numel == 0:
        return x.clone(), mask
    out = torch.empty_like(x)
    threads = grid(numel) * BLOCK
    seed, offset = stream.philox_state(((numel - 1) // (threads * 4) + 1) * 4)
    double = x.dtype == torch.float64
    p = np.float64(keep) if double else np.float32(keep)
    scale = np.float64(1.0 / p) if double else np.float32(1.0 / float(p))
    vec = _vector_size(x)
    if vec > 1:
        rand = _vectorised_uniforms(seed, offset, numel, threads, vec)
        shape, stride = iteration_view(x)  # dense: memory order
        views = [_strided_view(t, shape, stride, 0) for t in (x, out, mask)]
    else:
        rand = grid_stride_values(seed, offset, numel, philox.uniform4, lambda v: v)
        views = [x, out, mask]
    keep_mask = rand < p  # float compared in the accumulate type
    source = views[0].contiguous().reshape(-1)
    acc = torch.float64 if double else torch.float32
    kept = source.to(acc) * torch.from_numpy(keep_mask).to(acc) * torch.tensor(scale, dtype=acc)
    views[1].copy_(kept.to(x.dtype).view(views[1].shape))
    views[2].copy_(torch.from_numpy(keep_mask).view(views[2].shape))
    return out, mask


def _vectorised_uniforms(seed: int, offset: int, numel: int, threads: int, vec: int) -> np.ndarray:
    """fused_dropout_kernel_vec's uniforms in memory order: thread t covers [t * VEC, t * VEC + VEC) + r * G * VEC
    in round r, with ceil(VEC / 4) curand_uniform4 calls per round (VEC = 2 uses x and y of a fresh call)."""
    per_round = (vec + 3) // 4
    rounds = (numel - 1) // (threads * vec) + 1
    active = min(threads, (numel + vec - 1) // vec)
    x, y, z, w = philox.block(seed, offset, 0, rounds * per_round, active)
    u = philox.uniform4(x, y, z, w)  # (4, calls, active)
    u = u.reshape(4, rounds, per_round, active).transpose(1, 3, 2, 0).reshape(rounds, active, per_round * 4)
    return u[:, :, :vec].reshape(-1)[:numel]  # active < threads only when there is one round


# ---- Randperm.cu ---------------------------------------------------------------------------------
def randperm_bits(n: int) -> int:
    """Key bits that make duplicate keys unlikely (probability under 0.1): note [Algorithm of randperm]."""
    log_threshold_12 = math.log(0.9) * 12
    return min(64, math.ceil(math.log2(n - (6 * n * n + 1) / log_threshold_12)))


def randperm_order(keys: np.ndarray, bits: int, stream: Stream) -> np.ndarray:
    """The permutation of arange(n): a stable sort on the keys' low `bits` bits (all of them signed, as cub
    sorts a signed type), then each run of equal keys shuffled (Fisher-Yates, curand() % (i + 1)) by its
    first position's thread."""
    n = keys.size
    unsigned = np.uint32 if keys.dtype.itemsize == 4 else np.uint64
    sort_keys = keys if bits >= keys.dtype.itemsize * 8 else keys.view(unsigned) & unsigned((1 << bits) - 1)
    order = np.argsort(sort_keys, kind="stable")
    seed, offset = stream.philox_state(n)
    sorted_keys = sort_keys[order]
    starts = np.flatnonzero(np.diff(sorted_keys) == 0)  # position i has the same key as i + 1
    if starts.size:
        leaders = starts[np.concatenate([[True], starts[1:] != starts[:-1] + 1])]
        for tid in leaders.tolist():
            size = 1
            while tid + size < n and sorted_keys[tid + size] == sorted_keys[tid]:
                size += 1
            calls = (size - 1 + 3) // 4
            lanes = philox.block(seed, offset, 0, calls, np.array([tid], np.uint64))
            stream_values = np.stack([lane[:, 0] for lane in lanes], 1).reshape(-1)
            island = order[tid:tid + size]
            for draw, i in enumerate(range(size - 1, 0, -1)):
                r = int(stream_values[draw]) % (i + 1)
                island[i], island[r] = island[r], island[i]
            order[tid:tid + size] = island
    return order


# ---- MultinomialKernel.cu: sampleMultinomialWithReplacement --------------------------------------
def multinomial_uniforms(stream: Stream, distributions: int, samples: int) -> np.ndarray:
    """rand.x of the first curand_uniform4 of thread d * (gridDim.x * 128) + s, for every (d, s)."""
    grid_y = min(distributions, 65535)
    grid_x = (samples - 1) // 128 + 1
    seed, offset = stream.philox_state(((distributions - 1) // grid_y + 1) * 4)
    threads = grid_y * grid_x * 128
    x = philox.block(seed, offset, 0, (distributions - 1) // grid_y + 1, threads)[0]
    u = philox._uniform(x)  # (rounds, threads)
    out = np.empty((distributions, samples), np.float32)
    for d in range(distributions):
        rnd, row = divmod(d, grid_y)
        out[d] = u[rnd, row * grid_x * 128:row * grid_x * 128 + samples]
    return out
