"""Random ops on simulated GPUs, drawing CUDA's numbers (docs/cuda-simulation.md, "Random numbers").

`run(func, args, kwargs, index)` answers an aten random op on simulated GPU `index` as torch's CUDA kernels
do (random_kernels.py says which Philox counter feeds which element; the transforms below are
DistributionTemplates.h's, in the same float arithmetic): the same numbers and the same generator offsets
as an H100/H200. It answers NotImplemented for what it does not cover (other ops and dtypes, a host
generator passed to a GPU op), which then runs as before: torch's CPU kernel seeded from the stream.

Arguments are checked by the same CPU op on an empty tensor of the output's dtype first: torch checks
before it draws, so the errors and warnings are torch's own.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from simgpu.cuda_sim import cuda_math, devices, generators, philox
from simgpu.cuda_sim import random_kernels as kernels

aten = torch.ops.aten
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
          torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
          torch.uint8: np.uint8, torch.bool: np.bool_}
for _name, _np in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
    if hasattr(torch, _name):
        _NUMPY[getattr(torch, _name)] = _np
_DIGITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


# ---- float32 -> the output dtype, as static_cast<scalar_t> rounds --------------------------------
def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (c10::BFloat16), NaN kept quiet."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(np.isnan(values), np.uint32(0x7FC0), rounded).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def cast(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Values of the accumulate type (or integers) in `dtype`'s numpy form (bfloat16: its bits)."""
    if dtype == torch.bfloat16:
        return _bf16_bits(np.asarray(values).astype(np.float32))
    if dtype == torch.float16 and values.dtype.kind in "iu":
        values = values.astype(np.float32)  # an integer becomes a float before a Half
    return values.astype(_NUMPY[dtype])


def as_float(stored: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return _bf16_value(stored) if dtype == torch.bfloat16 else stored.astype(np.float64 if dtype == torch.float64 else np.float32)


def to_torch(dtype: torch.dtype) -> Callable[[np.ndarray], torch.Tensor]:
    if dtype == torch.bfloat16:
        return lambda bits: torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return lambda values: torch.from_numpy(np.ascontiguousarray(values))


def _scalar(value: float, dtype: torch.dtype) -> np.ndarray:
    """A double argument cast to `dtype` (static_cast<scalar_t>), kept in its numpy form."""
    return cast(np.array([value], np.float64), dtype)


# ---- the distributions (DistributionTemplates.h's transforms) ------------------------------------
def _acc(dtype: torch.dtype) -> type:
    return np.float64 if dtype == torch.float64 else np.float32


def _fma(dtype: torch.dtype) -> Callable:
    return cuda_math.fma64 if dtype == torch.float64 else cuda_math.fma32


def _uniform(out: torch.Tensor, low: float, high: float, stream: Any) -> torch.Tensor:
    dtype, acc = out.dtype, _acc(out.dtype)
    lo, hi = _scalar(low, dtype), _scalar(high, dtype)
    lo_f, hi_f = as_float(lo, dtype)[0], as_float(hi, dtype)[0]
    span = acc(hi_f - lo_f)  # to - from in scalar_t, then the accumulate type
    if dtype in (torch.float16, torch.bfloat16):
        span = as_float(cast(np.array([hi_f - lo_f], np.float32), dtype), dtype)[0]

    def transform(rand: np.ndarray) -> np.ndarray:
        value = rand.astype(acc) if (span, lo_f) == (1, 0) else _fma(dtype)(rand.astype(acc), span, lo_f)
        stored = cast(value, dtype)
        return np.where(as_float(stored, dtype) == hi_f, lo[0], stored)  # (0, 1] becomes [0, 1)

    draw = philox.uniform2_double if dtype == torch.float64 else philox.uniform4
    return kernels.nullary(out, stream, draw, transform, to_torch(dtype))


def _normal_values(dtype: torch.dtype, mean: float, std: float) -> Callable[[np.ndarray], np.ndarray]:
    acc = _acc(dtype)
    m, s = acc(mean), acc(std)
    if (m, s) == (0, 1):
        return lambda rand: rand.astype(acc)
    return lambda rand: _fma(dtype)(rand.astype(acc), s, m)


def _normal(out: torch.Tensor, mean: float, std: float, stream: Any) -> torch.Tensor:
    values = _normal_values(out.dtype, mean, std)
    draw = philox.normal2_double if out.dtype == torch.float64 else philox.normal4
    return kernels.nullary(out, stream, draw, lambda r: cast(values(r), out.dtype), to_torch(out.dtype))


def _log_normal(out: torch.Tensor, mean: float, std: float, stream: Any) -> torch.Tensor:
    values, acc = _normal_values(out.dtype, mean, std), _acc(out.dtype)
    draw = philox.normal2_double if out.dtype == torch.float64 else philox.normal4
    exp = cuda_math.fast_expf if acc is np.float32 else np.exp
    return kernels.nullary(out, stream, draw, lambda r: cast(exp(values(r)), out.dtype), to_torch(out.dtype))


def _uniform_draw(dtype: torch.dtype) -> philox.Draw:
    return philox.uniform2_double if dtype == torch.float64 else philox.uniform4


def _bernoulli_scalar(out: torch.Tensor, p: float, stream: Any) -> torch.Tensor:
    threshold = _acc(out.dtype)(p)
    return kernels.nullary(out, stream, _uniform_draw(out.dtype), lambda r: cast(r < threshold, out.dtype),
                           to_torch(out.dtype))


def _exponential(out: torch.Tensor, lambd: float, stream: Any) -> torch.Tensor:
    acc = _acc(out.dtype)
    half_eps = acc(np.finfo(acc).eps / 2)
    factor = acc(acc(-1.0) / acc(lambd))
    log = cuda_math.fast_logf if acc is np.float32 else np.log

    def transform(rand: np.ndarray) -> np.ndarray:
        logs = np.where(rand >= acc(1) - half_eps, -half_eps, log(rand)).astype(acc)
        return cast(factor * logs, out.dtype)

    return kernels.nullary(out, stream, _uniform_draw(out.dtype), transform, to_torch(out.dtype))


def _geometric(out: torch.Tensor, p: float, stream: Any) -> torch.Tensor:
    acc = np.float64 if out.dtype == torch.float64 else np.float32
    if acc is np.float32:  # at::log1p(x) of a float is __logf(1.0f + x) on CUDA
        denominator = cuda_math.fast_logf(np.array([np.float32(1) + -np.float32(p)]))[0]
        values = lambda rand: np.ceil(cuda_math.fast_logf(rand) / denominator)  # noqa: E731
    else:
        values = lambda rand: np.ceil(np.log(rand) / np.log1p(-p))  # noqa: E731
    return kernels.nullary(out, stream, _uniform_draw(out.dtype), lambda r: cast(values(r), out.dtype),
                           to_torch(out.dtype))


def _cauchy(out: torch.Tensor, median: float, sigma: float, stream: Any) -> torch.Tensor:
    acc = _acc(out.dtype)
    m, s = acc(median), acc(sigma)

    def transform(rand: np.ndarray) -> np.ndarray:
        if acc is np.float32:
            eps = np.float32(np.finfo(np.float32).eps)
            rand = np.clip(rand, eps, np.float32(1) - eps)
            tangent = cuda_math.fast_tanf(np.float32(np.pi) * (rand - np.float32(0.5)))
            return cast(cuda_math.fma32(np.full(rand.shape, s), tangent, m), out.dtype)
        return cast(cuda_math.fma64(np.full(rand.shape, s), np.tan(np.pi * (rand - 0.5)), m), out.dtype)

    return kernels.nullary(out, stream, _uniform_draw(out.dtype), transform, to_torch(out.dtype))


# random_: integers from 32 raw bits (64 for double and int64), as transformation::uniform_int* make them
def _random_modulus(dtype: torch.dtype) -> int:
    if dtype == torch.bool:
        return 2
    if dtype in _DIGITS:
        return (1 << _DIGITS[dtype]) + 1
    return torch.iinfo(dtype).max + 1


def _random(out: torch.Tensor, stream: Any) -> torch.Tensor:
    wide = out.dtype in (torch.float64, torch.int64)
    modulus = np.uint64(_random_modulus(out.dtype))
    draw = philox.raw2_64 if wide else philox.raw4
    return kernels.nullary(out, stream, draw, lambda raw: cast(raw % modulus, out.dtype), to_torch(out.dtype))


def _random_from_to(out: torch.Tensor, span: int, base: int, stream: Any) -> Any:
    if span == 0:  # 2^64 values (random_(0) of a uint64): CUDA's `% range` is undefined there
        return NotImplemented
    wide = span >= 1 << 28  # "allow approx 5% skew in uniform int generation using %"
    span_, base_ = np.uint64(span), np.uint64(base % 2**64)

    def transform(raw: np.ndarray) -> np.ndarray:
        return cast((raw % span_ + base_).view(np.int64), out.dtype)

    return kernels.nullary(out, stream, philox.raw2_64 if wide else philox.raw4, transform, to_torch(out.dtype))


def _random_full_64(out: torch.Tensor, stream: Any) -> torch.Tensor:
    return kernels.nullary(out, stream, philox.raw2_64, lambda raw: cast(raw.view(np.int64), out.dtype),
                           to_torch(out.dtype))


def _update_from(value: int, dtype: torch.dtype) -> int:
    """templates::update_from: the smallest `from` the float dtype holds exactly."""
    plus_one = int(torch.tensor(value + 1, dtype=torch.int64).to(dtype).item())
    if plus_one < value:
        n = abs(value + 1).bit_length() - 1
        value = plus_one + (1 << (n - _DIGITS[dtype] + 1))
    return value


def _update_to(value: int, dtype: torch.dtype) -> int:
    minus_one = int(torch.tensor(value - 1, dtype=torch.int64).to(dtype).item())
    if minus_one >= value:
        n = abs(value - 1).bit_length() - 1
        value = minus_one - (1 << (n - _DIGITS[dtype] + 1))
    return value


def _random_range(out: torch.Tensor, low: int, high: int | None, stream: Any) -> Any:
    """random_from_to_impl: the range and base of random_(from, to), then the kernel."""
    dtype = out.dtype
    if high is not None:
        if dtype in FLOATS:
            low, high = _update_from(low, dtype), _update_to(high, dtype)
        return _random_from_to(out, (high - low) % 2**64, low, stream)
    if low != -2**63:
        if dtype in FLOATS:
            top = min(1 << _DIGITS[dtype], 2**63 - 1)
            low = _update_from(low, dtype)
        else:
            top = 1 if dtype == torch.bool else torch.iinfo(dtype).max
        return _random_from_to(out, (top - low + 1) % 2**64, low, stream)
    return _random_full_64(out, stream)


# ---- the aten ops -------------------------------------------------------------------------------
_ALL = tuple(_NUMPY) + (torch.bfloat16,)
_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_INPLACE_DTYPES = {
    "uniform_": FLOATS, "normal_": FLOATS, "exponential_": FLOATS, "log_normal_": FLOATS, "cauchy_": FLOATS,
    "geometric_": FLOATS + _INTEGERS, "bernoulli_": _ALL, "random_": _ALL,
}
_RANDOM_DEFAULT = FLOATS + _INTEGERS + (torch.bool,)  # random_() itself: no unsigned types wider than 8 bits
# the distributions that take only floats: packet -> ((argument, default), ...), kernel
_DISTRIBUTIONS: dict[str, tuple[tuple[tuple[str, Any], ...], Callable]] = {
    "normal_": ((("mean", 0.0), ("std", 1.0)), lambda t, m, s, g: _normal(t, m, s, g)),
    "log_normal_": ((("mean", 1.0), ("std", 2.0)), lambda t, m, s, g: _log_normal(t, m, s, g)),
    "exponential_": ((("lambd", 1.0),), lambda t, lambd, g: _exponential(t, lambd, g)),
    "geometric_": ((("p", None),), lambda t, p, g: _geometric(t, p, g)),
    "cauchy_": ((("median", 0.0), ("sigma", 1.0)), lambda t, m, s, g: _cauchy(t, m, s, g)),
}


def _check(packet: str, self: torch.Tensor, *args: Any) -> None:
    """torch's argument checks (and warnings), run on an empty host tensor of the same dtype."""
    getattr(torch.empty(0, dtype=self.dtype), packet)(*args)


def _inplace(bound: dict, stream: Any, packet: str, overload: str = "default") -> Any:
    """uniform_, normal_, random_, bernoulli_, exponential_, geometric_, log_normal_, cauchy_ on `self`."""
    self = bound["self"]
    if self.is_complex() and packet in ("uniform_", "normal_"):  # the real and imaginary parts, as floats
        real = torch.view_as_real(self)
        if packet == "uniform_":
            _inplace({**bound, "self": real}, stream, packet)
        else:
            std = bound.get("std", 1.0)
            _check(packet, real, bound.get("mean", 0.0), std)
            _normal(real, bound.get("mean", 0.0), std / math.sqrt(2), stream)
        return self
    if self.dtype not in _INPLACE_DTYPES[packet] or self.layout != torch.strided or \
            torch._debug_has_internal_overlap(self) == 1:
        return NotImplemented
    if packet in _DISTRIBUTIONS:
        parameters, kernel = _DISTRIBUTIONS[packet]
        values = [bound.get(name, default) for name, default in parameters]
        _check(packet, self, *values)
        return kernel(self, *values, stream)
    if packet == "uniform_":
        low, high = bound.get("from", 0.0), bound.get("to", 1.0)
        _check(packet, self, low, high)
        info = torch.finfo(self.dtype)  # uniform_impl_ clamps the bounds to the dtype's range
        return _uniform(self, min(max(low, info.min), info.max), min(max(high, info.min), info.max), stream)
    if packet == "bernoulli_":
        p = bound.get("p", 0.5)
        if isinstance(p, torch.Tensor):
            return _bernoulli_tensor(self, p, stream)
        _check(packet, self, p)
        return _bernoulli_scalar(self, p, stream)
    if overload == "default":  # random_
        if self.dtype not in _RANDOM_DEFAULT:
            return NotImplemented
        _check(packet, self)
        return _random(self, stream)
    if overload == "to":
        low, high = 0, bound["to"]
        _check(packet, self, high)
    else:
        low, high = bound["from"], bound.get("to")
        _check(packet, self, low, high)
    return _random_range(self, low, high, stream)


def _bernoulli_tensor(self: torch.Tensor, p: torch.Tensor, stream: Any) -> torch.Tensor:
    if not p.is_floating_point():
        raise RuntimeError(f"expected probabilities tensor to have floating type, got {p.dtype}")
    if not bool(((p >= 0) & (p <= 1)).all()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (CUDA asserts on the "
                           "device for a probability outside [0, 1])")
    return kernels.bernoulli_tensor(self, p, stream)


def _factory_result(func: Any, bound: dict) -> torch.Tensor:
    """The tensor a factory op makes (shape, dtype, strides), from the same op on the meta device."""
    meta_kwargs = {k: v for k, v in bound.items() if k in _kwarg_names(func)}
    if "generator" in meta_kwargs:
        meta_kwargs["generator"] = None
    meta_kwargs.update(device=torch.device("meta"), pin_memory=None)
    positional = [bound[name] for name in _positional_names(func)]
    from simgpu.cuda_sim import placement

    with placement.elsewhere_requested():  # simgpu's own shape probe: torch's meta device, also in a plan
        meta = func(*positional, **meta_kwargs)
    return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype)


def _kwarg_names(func: Any) -> set[str]:
    return {a.name for a in func._schema.arguments if a.kwarg_only}


def _positional_names(func: Any) -> list[str]:
    return [a.name for a in func._schema.arguments if not a.kwarg_only]


def _factory(bound: dict, stream: Any, packet: str, overload: str, func: Any) -> Any:
    out_variant = "out" in bound
    if packet in ("rand_like", "randn_like", "randint_like") and out_variant:
        return NotImplemented
    if packet == "randperm":
        return _randperm(bound, stream, out_variant)
    if out_variant:
        result = bound["out"]
        result.resize_(bound["size"])
    else:
        result = _factory_result(func, bound)
    randint = packet.startswith("randint")
    if result.dtype not in _INPLACE_DTYPES["random_" if randint else "uniform_"] and (randint or not result.is_complex()):
        return NotImplemented
    if packet in ("rand", "rand_like"):
        return _inplace({"self": result}, stream, "uniform_")
    if packet in ("randn", "randn_like"):
        return _inplace({"self": result}, stream, "normal_")
    if packet == "normal":  # float_float
        return _inplace({"self": result, "mean": bound["mean"], "std": bound["std"]}, stream, "normal_")
    high = bound["high"]
    high = int(high.item()) if isinstance(high, torch.Tensor) else int(high)
    return _inplace({"self": result, "from": int(bound.get("low", 0)), "to": high}, stream, "random_", "from")


def _randperm(bound: dict, stream: Any, out_variant: bool) -> Any:
    n = int(bound["n"])
    if out_variant:
        result = bound["out"]
    else:
        dtype = bound.get("dtype") or torch.int64
        from simgpu.cuda_sim import placement

        with placement.elsewhere_requested():
            torch.randperm(n, dtype=dtype, device="meta")  # torch's checks of n and the dtype
        result = torch.empty(n, dtype=dtype)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    result.resize_(n)
    if n == 0:
        return result
    bits = kernels.randperm_bits(n)
    narrow = bits <= 32
    key_dtype = torch.int32 if narrow else torch.int64
    keys = torch.empty(n, dtype=key_dtype)
    limits = torch.iinfo(key_dtype)
    _random_range(keys, limits.min, limits.max, stream)
    order = kernels.randperm_order(keys.numpy(), bits, stream)
    result.copy_(torch.from_numpy(order))
    return result


def _normal_tensor(bound: dict, stream: Any, overload: str) -> Any:
    """normal(Tensor, Tensor) and kin: standard normals, then scaled and shifted as torch's templates do."""
    if overload.endswith("out"):
        return NotImplemented
    mean, std = bound["mean"], bound["std"]
    if overload == "Tensor_Tensor":
        out = torch.empty(torch.broadcast_shapes(mean.shape, std.shape), dtype=mean.dtype)
        _check_std(std)
        _inplace({"self": out}, stream, "normal_")
        return out.mul_(std).add_(mean)
    if overload == "Tensor_float":
        out = torch.empty_like(mean, memory_format=torch.contiguous_format)
        _inplace({"self": out, "mean": 0.0, "std": std}, stream, "normal_")
        return out.add_(mean)
    _check_std(std)  # float_Tensor
    out = torch.empty_like(std, memory_format=torch.contiguous_format)
    _inplace({"self": out}, stream, "normal_")
    return out.mul_(std).add_(torch.full((), mean, dtype=out.dtype))


def _check_std(std: torch.Tensor) -> None:
    if std.numel() and not bool(std.min() >= 0):
        raise RuntimeError("normal expects all elements of std >= 0.0")


def _bernoulli(bound: dict, stream: Any, overload: str) -> Any:
    self = bound["self"]
    if overload == "default":
        out = torch.empty_like(self, memory_format=torch.contiguous_format)
        if out.dtype not in _INPLACE_DTYPES["bernoulli_"]:
            return NotImplemented
        return _bernoulli_tensor(out, self, stream)
    if overload == "p":
        out = torch.empty_like(self, memory_format=torch.contiguous_format)
        if out.dtype not in _INPLACE_DTYPES["bernoulli_"]:
            return NotImplemented
        _check("bernoulli_", out, bound["p"])
        return _bernoulli_scalar(out, bound["p"], stream)
    return NotImplemented


def _multinomial(bound: dict, stream: Any, overload: str) -> Any:
    """multinomial: without replacement (or one sample) p / q with q ~ Exp(1) from CUDA's exponential_,
    then argmax or topk, as Distributions.cpp; with replacement, MultinomialKernel.cu's binary search of
    the normalised cumulative sums (computed here on the host: an element's bucket can differ where CUDA's
    parallel sums round differently)."""
    if overload != "default":
        return NotImplemented
    self, samples, replacement = bound["self"], int(bound["num_samples"]), bool(bound.get("replacement", False))
    if self.dtype not in FLOATS:
        return NotImplemented
    torch.multinomial(self, samples, replacement, generator=torch.Generator())  # torch's checks; not its draws
    if not replacement or samples == 1:
        q = _exponential(torch.empty_like(self), 1.0, stream)
        torch.div(self, q, out=q)
        if samples == 1:
            return torch.argmax(q, dim=-1, keepdim=True)
        return torch.topk(q, samples).indices
    rows = self.reshape(1, -1) if self.dim() == 1 else self
    normalised = rows / rows.sum(1, keepdim=True)
    prefix = normalised.cumsum(1).to(self.dtype)
    uniforms = torch.from_numpy(kernels.multinomial_uniforms(stream, rows.shape[0], samples)).to(self.dtype)
    picks = torch.searchsorted(prefix, uniforms, right=False)
    picks = torch.where(picks == rows.shape[1], rows.shape[1] - 1, picks)
    for row in range(rows.shape[0]):  # "the last non-zero probability" for buckets of zero width
        zero = rows[row] == 0
        if bool(zero.any()):
            last_nonzero = torch.cummax(torch.where(zero, -1, torch.arange(rows.shape[1])), 0).values
            picks[row] = last_nonzero[picks[row]].clamp(min=0)
    return picks.reshape(samples) if self.dim() == 1 else picks


def _native_dropout(bound: dict, stream: Any, overload: str) -> Any:
    x, p, train = bound["input"], float(bound["p"]), bound.get("train")
    if overload != "default" or x.dtype not in FLOATS or x.layout != torch.strided:
        return NotImplemented
    if train is not None and not train:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    return kernels.fused_dropout(x, 1.0 - p, stream)


_FACTORIES = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"}
_FUNCTIONAL = {"bernoulli": _bernoulli, "multinomial": _multinomial, "native_dropout": _native_dropout}
PACKETS = frozenset(_FACTORIES | set(_INPLACE_DTYPES) | set(_FUNCTIONAL) | {"normal"})


def run(func: Any, args: tuple, kwargs: dict, index: int) -> Any:
    """`func(*args, **kwargs)` on simulated GPU `index` as CUDA draws it, or NotImplemented (module docstring)."""
    packet = func.overloadpacket.__name__
    if packet not in PACKETS:
        return NotImplemented
    from simgpu.cuda_sim import placement

    if placement._storage_less and _storage_less_draw(func, args, kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k != "generator"}  # a plan's large draw: no numbers
        if any(a.name == "device" for a in func._schema.arguments):
            kwargs["device"] = placement.backing()
        return func(*args, **kwargs)
    bound = dict(zip((a.name for a in func._schema.arguments), args))
    bound.update(kwargs)
    stream = generators.stream_for(bound.get("generator"), index)
    if stream is None:
        return NotImplemented
    overload = func._overloadname
    if packet in _INPLACE_DTYPES:
        return _inplace(bound, stream, packet, overload)
    if packet == "normal" and not overload.startswith("float_float"):
        return _normal_tensor(bound, stream, overload)
    if packet in _FUNCTIONAL:
        return _FUNCTIONAL[packet](bound, stream, overload)
    if overload.endswith("out") and packet == "normal":
        return NotImplemented
    return _factory(bound, stream, packet, overload, func)


def _storage_less_draw(func: Any, args: tuple, kwargs: dict) -> bool:
    """In a plan: whether this draw makes or fills a storage-less tensor (large, or one without data)."""
    from simgpu.cuda_sim import placement

    target = next(placement.tensors_of(args, kwargs), None)
    if target is not None:
        return placement.storage_less(target) or not placement.keeps_data(target)
    return placement.factory_backing(func, args, {k: v for k, v in kwargs.items() if k != "generator"}).type == "meta"


# ---- dropout: CUDA runs the fused kernel (native_dropout) where a CPU tensor takes bernoulli_ ------
_library: Any = None


def _dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """aten::dropout for CPU tensors under autograd (Dropout.cpp): on a simulated GPU, what CUDA's
    is_fused_kernel_acceptable picks, native_dropout; on the host, torch's own composite (_dropout_impl)."""
    if train and 0 < p < 1 and input.numel() > 0 and devices.device_of(input) is not None:
        return torch.native_dropout(input, p, train)[0]
    if not 0 <= p <= 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        return input * torch.zeros((), dtype=input.dtype, device=input.device)
    noise = torch.empty_like(input).bernoulli_(1 - p)
    noise.div_(1 - p)
    return input * noise


def install() -> None:
    """Register `_dropout` for aten::dropout at AutogradCPU: below the program's Python calls, so that
    activation checkpointing's recomputation (run by the autograd engine, outside torch function modes)
    takes the fused kernel as the forward pass did. Under torch.inference_mode() autograd's keys are off
    and torch's composite runs instead (bernoulli_: CUDA's numbers for that op, not dropout's)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - a kernel for aten's own op
    _library.impl("dropout", _dropout, "AutogradCPU")
