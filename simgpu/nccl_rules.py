"""What ProcessGroupNCCL accepts, what it raises for the rest, and how it computes reductions.

Plain functions, no process group: the sim backend uses them to hold CPU ranks to NCCL's rules,
and the conformance suite can use them as the expected errors. The rules follow
ProcessGroupNCCL.cpp (torch 2.11-2.13, NCCL 2.28) and runs of this suite on GPUs:

- dtypes: NCCL's table is a whitelist; anything else is TypeError
  "Input tensor data type is not supported for NCCL process group: <ScalarType>", except where
  ProcessGroupNCCL hands the tensors to torch::cuda::nccl's helpers (gather, scatter, all_to_all,
  all_to_all_single): RuntimeError "Unconvertible NCCL type <ScalarType>" [nccl-run, torch 2.11].
- layout: collectives need tensors contiguous in their suggested memory format (ValueError
  "Tensors must be contiguous"), the list all_to_all too [nccl-run]; point-to-point ops need
  "non-overlapping and dense" tensors (ValueError "Tensors for P2P must be non-overlapping and
  dense"; a transposed tensor is dense and works, with a warning) [nccl-run]. Output lists that
  NCCL fills by copy_ (all_gather) and input lists it reads by copy_ (reduce_scatter) may have any
  layout. all_reduce_coalesced needs "non-overlapping and dense" tensors. scatter takes dense
  tensors (transposed included: NCCL moves memory order on both ends); reduce_scatter_tensor and
  strided scatter are held to the contiguous rule although NCCL skips the check there (it moves
  memory order, silently scrambling them: findings nccl-reduce-scatter-tensor-noncontiguous,
  nccl-scatter-strided), so that code green here is right on NCCL too.
- groups of one rank [nccl-run, torch 2.11]: reduce_scatter and reduce_scatter_tensor skip the dtype
  and reduce-op checks and copy the input (whatever the op); scatter skips the dtype and layout
  checks (a local copy). all_reduce and reduce of fp8 with AVG fail in NCCL itself (DistBackendError
  "invalid argument") at size 1 only.
- reduce ops: BAND/BOR/BXOR are ValueError; AVG on bool and PREMUL_SUM outside half, float,
  bfloat16 and double are TypeError; bool SUM is computed as MAX (logical OR).
- arithmetic: integer AVG is the wrapped sum divided by n, truncated toward zero; float AVG is
  the sum of x_r * fl(1/n) (NCCL's PreMulSum); PREMUL_SUM is the sum of x_r * fl(factor); float
  MIN/MAX ignore NaN unless every rank has NaN at that position; fp8 saturates every result: a sum,
  product or MIN/MAX that overflows or is infinite is +-57344 for e5m2, +-448 for e4m3fn, NaN stays
  NaN; on two ranks the one operation sees the raw inputs (inf + -inf is NaN), from three on an
  infinite input counts as the largest finite value of its sign (a partial sum saturated first), and
  AVG saturates each input after its premultiply [nccl-run, nccl-probe].

Every error message starts with NCCL's own wording (so a regex written for NCCL matches) and may
end with a "(simgpu: ...)" note that names the rank and the argument.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Union

import torch
from torch.distributed import ReduceOp

RedOpType = ReduceOp.RedOpType

# c10::toString(ScalarType) names, which NCCL's messages print.
_SCALAR_TYPE_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
    torch.int64: "Long", torch.float16: "Half", torch.float32: "Float", torch.float64: "Double",
    torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.bool: "Bool", torch.bfloat16: "BFloat16", torch.uint16: "UInt16", torch.uint32: "UInt32",
    torch.uint64: "UInt64", torch.float8_e5m2: "Float8_e5m2", torch.float8_e4m3fn: "Float8_e4m3fn",
    torch.float8_e5m2fnuz: "Float8_e5m2fnuz", torch.float8_e4m3fnuz: "Float8_e4m3fnuz",
    torch.qint8: "QInt8", torch.quint8: "QUInt8", torch.qint32: "QInt32",
}
for _name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):  # newer dtypes: "Float8_e8m0fnu", ...
    if hasattr(torch, _name):
        _SCALAR_TYPE_NAMES[getattr(torch, _name)] = _name.capitalize()

FLOAT8_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})
INTEGER_DTYPES = frozenset({torch.uint8, torch.int8, torch.int32, torch.int64})
FLOAT_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64}) | FLOAT8_DTYPES
NCCL_DTYPES = INTEGER_DTYPES | FLOAT_DTYPES | {torch.bool}
PREMUL_SUM_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
BITWISE_OPS = frozenset({RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR})

DTYPE_MESSAGE = "Input tensor data type is not supported for NCCL process group"
UNCONVERTIBLE_MESSAGE = "Unconvertible NCCL type"  # torch/csrc/cuda/nccl.cpp to_nccl_data_type
P2P_DENSE_MESSAGE = "Tensors for P2P must be non-overlapping and dense"
# What torch 2.11 + NCCL 2.28.9 raise for an fp8 AVG all_reduce/reduce on a group of one rank.
NCCL_INVALID_ARGUMENT = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3780, "
                         "invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9")
CONTIGUOUS_MESSAGE = "Tensors must be contiguous"
DENSE_MESSAGE = "Tensors must be non-overlapping and dense"
P2P_LAYOUT_WARNING = ("Detected non-contiguous tensor in P2P operations. It is user responsibility to "
                      "guarantee that source and destination tensors have the same contiguity format.")
MULTI_DEVICE_MESSAGE = ("Expecting one tensor only but got multiple. You are probably using multiple "
                        "devices under one thread. The support for such usage has been deprecated.")


def scalar_type_name(dtype: torch.dtype) -> str:
    """The name c10 prints for a dtype ("Short" for torch.int16), as in NCCL's messages."""
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def note(context: str) -> str:
    """The simgpu suffix appended to an NCCL message ("" when there is no context)."""
    return f" (simgpu: {context})" if context else ""


def dtype_name(dtype: torch.dtype) -> str:
    """torch's own short name ("float32"), for simgpu's messages and the strict check's descriptors."""
    return str(dtype).replace("torch.", "")


def describe(t: torch.Tensor) -> str:
    """Short tensor description for messages: float32[3, 4]."""
    return f"{dtype_name(t.dtype)}[{', '.join(map(str, t.shape))}]"


# ----------------------------------------------------------------------------- tensors
def check_dtype(t: torch.Tensor, context: str = "") -> None:
    """TypeError for dtypes outside NCCL's table (int16, uint16/32/64, fnuz fp8, ...)."""
    if t.dtype not in NCCL_DTYPES:
        raise TypeError(f"{DTYPE_MESSAGE}: {scalar_type_name(t.dtype)}{note(context)}")


def check_dtype_unconvertible(t: torch.Tensor, context: str = "") -> None:
    """RuntimeError for dtypes outside NCCL's table, as torch::cuda::nccl's helpers raise it
    (ProcessGroupNCCL's gather, scatter, all_to_all and all_to_all_single go through them)."""
    if t.dtype not in NCCL_DTYPES:
        raise RuntimeError(f"{UNCONVERTIBLE_MESSAGE} {scalar_type_name(t.dtype)}{note(context)}")


def is_nccl_contiguous(t: torch.Tensor) -> bool:
    """NCCL's test: contiguous in the tensor's suggested memory format (channels-last counts)."""
    if t.is_contiguous():
        return True
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def check_contiguous(t: torch.Tensor, context: str = "") -> None:
    """ValueError for a collective's non-contiguous tensor (gloo would silently accept it)."""
    if not is_nccl_contiguous(t):
        raise ValueError(f"{CONTIGUOUS_MESSAGE}{note(context)}; shape {tuple(t.shape)}, strides {t.stride()}")


def is_dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill one block of memory (any dim order)."""
    if t.numel() <= 1:
        return True
    # Walk the dims from the innermost stride out: each must start where the ones inside it end.
    dims = [(size, stride) for size, stride in zip(t.shape, t.stride()) if size != 1]
    expected = 1
    for size, stride in sorted(dims, key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def check_dense(t: torch.Tensor, context: str = "") -> None:
    """ValueError unless t fills one block of memory (what all_reduce_coalesced requires)."""
    if not is_dense(t):
        raise ValueError(f"{DENSE_MESSAGE}{note(context)}; shape {tuple(t.shape)}, strides {t.stride()}")


def check_p2p_dense(t: torch.Tensor, context: str = "") -> None:
    """ValueError for a point-to-point tensor that is not one dense block (a strided view)."""
    if not is_dense(t):
        raise ValueError(f"{P2P_DENSE_MESSAGE}{note(context)}; shape {tuple(t.shape)}, strides {t.stride()}")


_warned_p2p_layout = False


def warn_p2p_layout(t: torch.Tensor) -> None:
    """NCCL's TORCH_WARN_ONCE for non-contiguous point-to-point tensors (accepted, not rejected)."""
    global _warned_p2p_layout
    if not _warned_p2p_layout and not is_nccl_contiguous(t):
        _warned_p2p_layout = True
        warnings.warn(P2P_LAYOUT_WARNING, UserWarning, stacklevel=4)


# ----------------------------------------------------------------------------- reduce ops
def op_type(op: Any) -> RedOpType:
    """The RedOpType of a ReduceOp, a RedOpType, or the int value of one."""
    if isinstance(op, RedOpType):
        return op
    inner = getattr(op, "op", None)
    if isinstance(inner, RedOpType):
        return inner
    return RedOpType(int(op))


def op_name(op: Any) -> str:
    """"SUM", "PREMUL_SUM", ...: how messages and the strict check's descriptors name a reduce op."""
    return op_type(op).name


def premul_factor(op: Any) -> Union[float, torch.Tensor]:
    """The factor of a PREMUL_SUM made by dist._make_nccl_premul_sum (ReduceOp.factor)."""
    factor = getattr(op, "factor", None)
    if factor is None:  # torch < 2.13 has no ReduceOp.factor; its pickle state is (RedOpType, factor)
        factor = op.__getstate__()[1]
    return factor


def check_reduce_op(op: Any, dtype: torch.dtype, context: str = "") -> None:
    """Raise what getNcclReduceOp raises for this op and dtype, in NCCL's order."""
    kind = op_type(op)
    if dtype == torch.bool and kind == RedOpType.AVG:
        raise TypeError(f"Cannot use ReduceOp.AVG with boolean inputs{note(context)}")
    if kind == RedOpType.PREMUL_SUM and dtype not in PREMUL_SUM_DTYPES:
        raise TypeError("PreMulSum Data type must be half, float, bfloat16 or double"
                        + note(f"{context}; ReduceOp.PREMUL_SUM on {dtype}"))
    if kind in BITWISE_OPS:
        raise ValueError(f"Cannot use ReduceOp.{kind.name} with NCCL{note(context)}")
    if kind not in (RedOpType.SUM, RedOpType.AVG, RedOpType.PRODUCT, RedOpType.MIN, RedOpType.MAX,
                    RedOpType.PREMUL_SUM):
        raise ValueError(f"Unhandled ReduceOp{note(context)}")


@dataclass(frozen=True)
class ReducePlan:
    """How to get NCCL's result for one reduction out of a gloo reduction.

    gloo reduces `wire_dtype` buffers with `gloo_op` (SUM, PRODUCT, MIN or MAX only). Before that,
    each rank's values are multiplied by `premul` (rounded to the user's dtype, as NCCL's PreMulSum
    does); after it, integer AVG divides by `post_div`, truncating toward zero. With `nan_skip`
    (float MIN/MAX) NaN loses to any number, as with NCCL's fmin/fmax, and only an all-NaN position
    gives NaN (gloo's std::min/max would depend on rank order): the wire then carries each row's
    values with NaN replaced by the op's identity, followed by one flag per value that the same
    reduction turns into "every rank had NaN here".
    """

    dtype: torch.dtype
    wire_dtype: torch.dtype
    gloo_op: RedOpType
    premul: Union[float, torch.Tensor, None] = None
    post_div: int | None = None
    nan_skip: bool = False
    saturate: bool = False  # fp8 on NCCL: results clamp to the largest finite value (inf too), NaN stays
    clamp_inputs: bool = False  # ... and from three ranks on the inputs too (a partial sum saturates first)

    def wire_numel(self, numel: int) -> int:
        """Length of the wire buffer for `numel` values."""
        return 2 * numel if self.nan_skip else numel

    def to_wire(self, x: torch.Tensor, mode: str, rows: int = 1) -> tuple[torch.Tensor, bool]:
        """x flattened into what gloo reduces, premultiplied; returns (buffer, buffer aliases x).

        mode "inplace": the buffer may be x's own memory and x may change (all_reduce, root of
        reduce); "readonly": it may alias x only if nothing writes it (gloo reads, no premultiply);
        "private": never x's memory (gloo writes into it, x must stay as it is).
        rows: x is that many equal chunks reduced separately (reduce_scatter_tensor); only the
        nan_skip layout (values, then flags, per chunk) depends on it.
        """
        flat = x.reshape(-1)
        top = torch.finfo(self.dtype).max if self.saturate else None
        if self.saturate:
            # [nccl-run] NCCL's fp8 operations saturate their results. On two ranks the one addition sees
            # the raw inputs (inf + -inf is NaN, inf - 57344 is 57344); from three on a partial sum has
            # saturated first, so an infinite input counts as +-max (AVG: after its premultiply, below).
            flat = flat.to(self.wire_dtype)
            if self.clamp_inputs:  # never set with a premultiply (AVG clamps after it)
                flat = flat.clamp(-top, top)
        if self.nan_skip:
            return self._nan_wire(flat, rows), False
        if self.dtype == torch.bool:
            buf = flat.view(torch.uint8)
        elif self.wire_dtype != self.dtype:
            buf = flat.to(self.wire_dtype)
        else:
            buf = flat
        aliased = _shares_memory(buf, x)
        if aliased and (mode == "private" or (mode == "readonly" and self.premul is not None)):
            buf, aliased = buf.clone(), False
        if self.premul is not None:
            self._premultiply(buf)
            if top is not None:  # [nccl-run] AVG is PREMUL_SUM(1/n): inf/n is still inf and saturates
                buf.clamp_(-top, top)  # after the multiply (x2 run: e5m2 AVG of -inf, 14336 gave -49152)
        return buf, aliased

    def _premultiply(self, buf: torch.Tensor) -> None:
        factor = self.premul
        if isinstance(factor, torch.Tensor):
            factor = factor.reshape(-1)[0].to(self.dtype).to(self.wire_dtype)
        else:
            factor = torch.tensor(factor, dtype=self.dtype).to(self.wire_dtype)
        buf.mul_(factor)
        if self.wire_dtype != self.dtype:  # NCCL keeps the product in the user's dtype
            buf.copy_(buf.to(self.dtype))

    def _nan_wire(self, flat: torch.Tensor, rows: int) -> torch.Tensor:
        values = flat.to(self.wire_dtype, copy=True)
        nan = torch.isnan(values)
        is_max = self.gloo_op == RedOpType.MAX
        values.masked_fill_(nan, float("-inf") if is_max else float("inf"))
        flags = nan.to(self.wire_dtype) * (-1 if is_max else 1)  # MAX of -flag == -(MIN of flag)
        return torch.cat([values.view(rows, -1), flags.view(rows, -1)], dim=1).reshape(-1)

    def wire_out(self, out: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """A buffer gloo can write the result into: out's own memory when the dtypes allow."""
        flat = out.reshape(-1)
        if self.nan_skip:
            return torch.empty(2 * out.numel(), dtype=self.wire_dtype), False
        if self.dtype == torch.bool:
            return flat.view(torch.uint8), True
        if self.wire_dtype == self.dtype:
            return flat, _shares_memory(flat, out)
        return torch.empty(out.numel(), dtype=self.wire_dtype), False

    def from_wire(self, buf: torch.Tensor, out: torch.Tensor, aliased: bool) -> None:
        """Finish the reduction in buf (integer AVG division, all-NaN positions) and store it into out."""
        if self.post_div is not None:
            buf.div_(self.post_div, rounding_mode="trunc")
        if self.nan_skip:
            n = out.numel()
            all_nan = buf[n: 2 * n] == (-1 if self.gloo_op == RedOpType.MAX else 1)
            buf = buf[:n].masked_fill(all_nan, float("nan"))
        if self.saturate:
            top = torch.finfo(self.dtype).max
            buf = buf.clamp(-top, top)
        if not aliased:
            out.copy_(buf.to(out.dtype).view(out.shape))


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def plan_reduction(op: Any, dtype: torch.dtype, world_size: int, context: str = "") -> ReducePlan:
    """Check op against dtype (NCCL's errors) and say how to compute it with gloo."""
    check_reduce_op(op, dtype, context)
    kind = op_type(op)
    wire = torch.uint8 if dtype == torch.bool else torch.float32 if dtype in FLOAT8_DTYPES else dtype
    saturate = dtype in FLOAT8_DTYPES and world_size > 1  # [nccl-run] e5m2 inf+1 -> 57344, e4m3fn 300*300 -> 448
    clamp_inputs = saturate and world_size > 2
    if dtype == torch.bool:
        gloo_op = {RedOpType.SUM: RedOpType.MAX, RedOpType.MAX: RedOpType.MAX,
                   RedOpType.PRODUCT: RedOpType.MIN, RedOpType.MIN: RedOpType.MIN}[kind]
        return ReducePlan(dtype, wire, gloo_op)
    if kind == RedOpType.AVG:
        if dtype in INTEGER_DTYPES:
            return ReducePlan(dtype, wire, RedOpType.SUM, post_div=world_size)
        return ReducePlan(dtype, wire, RedOpType.SUM, premul=1.0 / world_size, saturate=saturate)
    if kind == RedOpType.PREMUL_SUM:
        return ReducePlan(dtype, wire, RedOpType.SUM, premul=premul_factor(op))
    nan_skip = dtype in FLOAT_DTYPES and kind in (RedOpType.MIN, RedOpType.MAX)
    return ReducePlan(dtype, wire, kind, nan_skip=nan_skip, saturate=saturate, clamp_inputs=clamp_inputs)


def check_fp8_avg(op: Any, t: torch.Tensor, world_size: int) -> None:
    """[nccl-run] all_reduce/reduce of fp8 with AVG on a group of one rank: NCCL returns
    ncclInvalidArgument, which torch raises as DistBackendError (sizes 2 and 4 work). With zero
    elements NCCL returns before it looks at the op, and the call goes through."""
    if world_size == 1 and t.dtype in FLOAT8_DTYPES and op_type(op) == RedOpType.AVG and t.numel() > 0:
        raise torch.distributed.DistBackendError(NCCL_INVALID_ARGUMENT)
