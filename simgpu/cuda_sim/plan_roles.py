"""A plan of a sample of ranks (`simgpu run --plan GPU --ranks 0-3,252-255 --gpus 256 torchrun ...`):
only the listed ranks run; the others exit as they start, and every collective completes in the
process that calls it, as the absent members' calls would have made it if they did what this rank does.

Why: a symmetric layout's ranks of one role (every dp replica of an FSDP/TP/PP layout, every tp rank of
a block) run the same program path on tensors of the same shapes, so one process per role gives every
rank's peaks and step (docs/plan-mode.md, "One process per role"). What makes it right:

- Storage-less tensors (a plan's floating-point GPU tensors) have nothing to move: a collective's
  outputs have their shapes already, and the cost model prices it at the group's full size.
- A tensor with data (a plan keeps integer and bool GPU tensors up to 1 MiB, and host tensors) gets
  what n members holding this rank's values would give: SUM n x, PRODUCT x^n, AVG/MIN/MAX/BAND/BOR x,
  BXOR x or 0, an all-gather n copies, an all-to-all this rank's chunk for itself from everyone.
- Point-to-point messages go through the store between the ranks that run, with the sender's plan
  clock (so a pipeline stage waits for its peer: bubbles), and the bytes of tensors with data
  (PipelineStage's shape exchange). A message to or from a rank that does not run is refused with one
  line: the sample must hold whole pipelines.
- The check: every group records the sequence of its collectives (op, shapes, dtypes, reduce op, root
  and the values of tensors with data); the launcher compares the sequences of every group's members
  that ran (`check`). Two members that disagree mean the layout is not symmetric along that group, and
  the plan fails naming them: run a sample with two members of each group (a first and a last replica)
  to have every group checked.
"""
from __future__ import annotations

import functools
import hashlib
import math
import json
import os
import threading
from datetime import timedelta
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ReduceOp

from simgpu.cuda_sim.plan import ENV_RANKS

RedOpType = ReduceOp.RedOpType
_lock = threading.Lock()
_GROUPS: dict[str, "SoloGroup"] = {}  # group name -> this process's group: their call sequences


def parse_ranks(spec: str, world: int) -> list[int]:
    """'0-3,252-255' -> [0, 1, 2, 3, 252, 253, 254, 255]; ValueError naming the bad part."""
    ranks: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            first, _, last = part.partition("-")
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"--ranks: {part!r} is not a rank or a range like 4-7 (in {spec!r})") from None
        if not 0 <= low <= high < world:
            raise ValueError(f"--ranks: {part!r} is outside ranks 0-{world - 1} of --gpus {world}")
        ranks.update(range(low, high + 1))
    return sorted(ranks)


def running() -> frozenset[int] | None:
    """The ranks this plan runs, or None: every rank runs (no --ranks)."""
    spec = os.environ.get(ENV_RANKS)
    if not spec:
        return None
    return frozenset(int(r) for r in spec.split(","))


def active() -> bool:
    return running() is not None


# ----------------------------------------------------------------------------- symmetric results
def _reduced(t: Tensor, op: Any, n: int) -> None:
    """t becomes what a reduction over n members all holding t's values gives (t has data)."""
    from simgpu import nccl_rules

    kind = nccl_rules.op_type(op)
    if kind in (RedOpType.AVG, RedOpType.MIN, RedOpType.MAX, RedOpType.BAND, RedOpType.BOR):
        return
    if t.dtype == torch.bool:  # NCCL reduces bools as bytes: any nonzero stays nonzero
        if kind == RedOpType.BXOR and n % 2 == 0:
            t.zero_()
        return
    if kind == RedOpType.SUM:
        t.mul_(n)
    elif kind == RedOpType.PRODUCT:
        t.pow_(n)
    elif kind == RedOpType.BXOR:
        if n % 2 == 0:
            t.zero_()
    else:
        raise NotImplementedError(f"simgpu plan --ranks: reduce op {kind} has no symmetric result here")


def _has_data(t: Tensor) -> bool:
    from simgpu.cuda_sim import placement

    return not placement.storage_less(t)


def _bytes_of(t: Tensor) -> bytes:
    """The bytes of a tensor with data (a simulated GPU's included), in memory order of a contiguous copy:
    read through .cpu(), as a program reads a GPU tensor (torch 2.11 hands TensorBase.numpy to the
    simulation's Tensor.numpy, which refuses GPU tensors as CUDA does: send_object_list's bytes failed)."""
    return t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()


def _given_data(t: Tensor, body: bytes) -> None:
    """A receive of a message with data (an integer tensor the sender had from the host: a pickled object of
    any size) into a storage-less buffer (a plan keeps the data of integer GPU tensors it makes only up to
    1 MiB: recv_object_list's buffer is torch.empty): the buffer takes a storage holding the bytes, on its GPU
    and under its allocation, the same tensor object, as what the program holds must read them. A buffer
    that is a view, or floating-point, stays storage-less: its bytes would have nowhere to go."""
    from simgpu.cuda_sim import devices

    storage = t.untyped_storage()
    if t.is_floating_point() or t.is_complex() or not t.is_contiguous() or t.storage_offset() != 0 \
            or storage.nbytes() != len(body) or not hasattr(torch._C, "_swap_tensor_impl"):
        return
    filled = torch.frombuffer(bytearray(body), dtype=torch.uint8).view(t.dtype).view(t.shape)
    devices.hand_over(storage, filled.untyped_storage())
    torch._C._swap_tensor_impl(t, filled)


def _describe(t: Tensor) -> str:
    """A tensor in a group's call sequence: dtype and shape, and a digest of its values if it has data."""
    text = f"{t.dtype}{list(t.shape)}"
    if _has_data(t) and t.numel() <= (1 << 18):
        text += ":" + hashlib.sha1(_bytes_of(t)).hexdigest()[:12]
    return text


def _flat(args: Sequence[Any]) -> list[Tensor]:
    out: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_flat(a))
    return out


class SoloWork(dist.Work):
    """A collective that completed when it was called; its wait holds the plan's compute clock until the
    collective's predicted end (as SimWork's does), a recv's waits for its message first."""

    def __init__(self, outputs: Sequence[Tensor], plan_end: float | None, finish: Any = None):
        super().__init__()
        self._outputs = list(outputs)
        self.plan_end = plan_end
        self._finish = finish

    def _arrive(self) -> None:
        """A receive's message is taken from the store (once); its predicted end moves to its arrival."""
        if self._finish is not None:
            finish, self._finish = self._finish, None
            arrived = finish()
            if arrived is not None and self.plan_end is not None:
                self.plan_end = max(self.plan_end, arrived)

    def wait(self, timeout: timedelta | None = None) -> bool:
        from simgpu.cuda_sim import plan

        self._arrive()
        if self.plan_end is not None and plan.RECORDER is not None:
            plan.RECORDER.waited(self.plan_end)
        return True

    def is_completed(self) -> bool:
        return self._finish is None

    def is_success(self) -> bool:
        return True

    def result(self) -> list[Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        """Completed: a future is no wait on the default stream (DDP chains its comm hooks on it), as
        SimWork's is not."""
        self._arrive()
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


def _make_backend(rank: int, size: int, timeout: timedelta) -> Any:
    """The C++ backend torch's bookkeeping asks a group for (device types, coalescing support); it never
    carries a collective of this group. It must have the group's rank and size: from torch 2.14 a
    ProcessGroup's rank() and size() are its default backend's (a one-member gloo group made every rank
    rank 0 of 1 there: both ends of a send_object_list sent). torch's FakeProcessGroup is one of any size that
    connects to no one; a one-member gloo group where there is none (it then has the group's numbers only on
    a torch whose ProcessGroup keeps its own)."""
    fake = getattr(torch._C._distributed_c10d, "FakeProcessGroup", None)
    for make in (getattr(fake, "_create_internal", None), fake):
        if make is not None:
            try:
                return make(rank, size)
            except (TypeError, RuntimeError):
                continue
    return dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timeout)


from simgpu.backend import SimProcessGroup  # noqa: E402 - after the helpers above, as backend imports plan


class SoloGroup(SimProcessGroup):
    """A process group of `size` members of which only this one runs here (module docstring). A
    SimProcessGroup to the rest of simgpu (SimProcessGroup.__new__ makes it under --ranks), with none of
    its transport: every collective is overridden here."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 devices: Sequence[str] | None = None, strict_timeout: float | None = None):
        dist.ProcessGroup.__init__(self, rank, size)
        self._store = store
        self._timeout = timeout
        self._backend = _make_backend(rank, size, timeout)
        self._calls: list[str] = []
        self._ranks: list[int] = []
        self._sent: dict[int, int] = {}
        self._received: dict[int, int] = {}
        self._coalescing: list[SoloWork] | None = None
        for device in devices or ("cpu", "cuda"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self._backend)
        if hasattr(self, "_set_default_backend"):
            self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)

    def _get_backend(self, device: Any) -> Any:
        return self._backend

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        from simgpu.backend import BACKEND_NAME

        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"SoloGroup(rank={self.rank()}, size={self.size()})"

    # --------------------------------------------------------------- bookkeeping
    def _done(self, op: str, args: Sequence[Any], outputs: Sequence[Tensor], extra: str = "",
              before: str = "") -> SoloWork:
        """Record the call in this group's sequence, price it, and hand back its finished work."""
        from simgpu.cuda_sim import plan

        with _lock:
            if not self._calls:
                _GROUPS[self.group_name] = self
                self._ranks = self.global_ranks()  # now: after destroy_process_group torch no longer knows them
            self._calls.append(f"{op}({before or ', '.join(_describe(t) for t in _flat(args))}){extra}")
        end = plan.RECORDER.collective(op, self.size(), args, id(self)) if plan.RECORDER is not None else None
        return self._queued(SoloWork(outputs, end))

    def global_ranks(self) -> list[int]:
        try:
            return dist.get_process_group_ranks(self)
        except Exception:  # noqa: BLE001 - a group torch has not registered (yet)
            return [self.rank()]

    def _guarded(self, fn: Any) -> None:
        from simgpu.cuda_sim.tensors import suspended

        with suspended():  # the simulator's own arithmetic on tensors with data
            fn()

    # --------------------------------------------------------------- collectives
    def allreduce(self, tensors: list[Tensor], opts: Any = None) -> SoloWork:
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        seq = self._done("all_reduce", [tensors], tensors, f" {_op_name(op)}")
        self._guarded(lambda: [_reduced(t, op, self.size()) for t in tensors if _has_data(t)])
        return seq

    def allreduce_coalesced(self, tensors: list[Tensor], opts: Any = None) -> SoloWork:
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        seq = self._done("all_reduce_coalesced", [tensors], tensors, f" {_op_name(op)}")
        self._guarded(lambda: [_reduced(t, op, self.size()) for t in tensors if _has_data(t)])
        return seq

    def reduce(self, tensors: list[Tensor], opts: Any = None) -> SoloWork:
        op, root = opts.reduceOp, opts.rootRank
        seq = self._done("reduce", [tensors], tensors, f" {_op_name(op)} root {root}")
        if root == self.rank():
            self._guarded(lambda: [_reduced(t, op, self.size()) for t in tensors if _has_data(t)])
        return seq

    def broadcast(self, tensors: list[Tensor], opts: Any = None) -> SoloWork:
        root = opts.rootRank if opts is not None else 0
        # every member holds what the root holds: this rank's values (symmetry), so nothing changes
        return self._done("broadcast", [tensors], tensors, f" root {root}",
                          before=", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors))

    def allgather(self, output_lists: list[list[Tensor]], inputs: list[Tensor], opts: Any = None) -> SoloWork:
        work = self._done("all_gather", [output_lists, inputs], _flat(output_lists), before=_io(output_lists, inputs))

        def fill() -> None:
            for outs, x in zip(output_lists, inputs):
                for out in outs:
                    if _has_data(out):
                        out.copy_(x)
        self._guarded(fill)
        return work

    allgather_coalesced = allgather

    def _allgather_base(self, output: Tensor, input: Tensor, opts: Any = None) -> SoloWork:  # noqa: A002
        work = self._done("all_gather_into_tensor", [output, input], [output], before=_io([output], [input]))
        if _has_data(output):
            self._guarded(lambda: output.view(self.size(), -1).copy_(input.reshape(1, -1).expand(self.size(), -1)))
        return work

    def allgather_into_tensor_coalesced(self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None) -> SoloWork:
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _last(works, outputs)

    def reduce_scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]], opts: Any = None) -> SoloWork:
        op = opts.reduceOp
        work = self._done("reduce_scatter", [outputs, input_lists], outputs, f" {_op_name(op)}",
                          before=_io(outputs, input_lists))

        def fill() -> None:
            for out, ins in zip(outputs, input_lists):
                if _has_data(out):
                    out.copy_(ins[self.rank()])
                    _reduced(out, op, self.size())
        self._guarded(fill)
        return work

    def _reduce_scatter_base(self, output: Tensor, input: Tensor, opts: Any = None) -> SoloWork:  # noqa: A002
        op = opts.reduceOp
        work = self._done("reduce_scatter_tensor", [output, input], [output], f" {_op_name(op)}",
                          before=_io([output], [input]))

        def fill() -> None:
            output.view(-1).copy_(input.reshape(self.size(), -1)[self.rank()])
            _reduced(output, op, self.size())
        if _has_data(output):
            self._guarded(fill)
        return work

    def reduce_scatter_tensor_coalesced(self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None) -> SoloWork:
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _last(works, outputs)

    def alltoall_base(self, output: Tensor, input: Tensor, output_split_sizes: list[int],  # noqa: A002
                      input_split_sizes: list[int], opts: Any = None) -> SoloWork:
        n = self.size()
        work = self._done("all_to_all_single", [output, input], [output],
                          f" splits {list(output_split_sizes)}/{list(input_split_sizes)}", before=_io([output], [input]))
        if _has_data(output):
            ins = list(input_split_sizes) or [input.size(0) // n] * n
            outs = list(output_split_sizes) or [output.size(0) // n] * n
            mine = input.split(ins)[self.rank()]
            if any(size != mine.size(0) for size in outs):
                raise RuntimeError(f"simgpu plan --ranks: all_to_all_single with output splits {outs} on rank "
                                   f"{self.rank()}: the absent members' chunks are not this rank's ({mine.size(0)} rows)")
            self._guarded(lambda: [o.copy_(mine) for o in output.split(outs)])
        return work

    def alltoall(self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None) -> SoloWork:
        work = self._done("all_to_all", [outputs, inputs], outputs, before=_io(outputs, inputs))
        self._guarded(lambda: [o.copy_(inputs[self.rank()]) for o in outputs if _has_data(o)])
        return work

    def gather(self, output_lists: list[list[Tensor]], inputs: list[Tensor], opts: Any = None) -> SoloWork:
        root = opts.rootRank
        work = self._done("gather", [output_lists, inputs], _flat(output_lists), f" root {root}", before=_io([], inputs))
        if root == self.rank():
            self._guarded(lambda: [o.copy_(inputs[0]) for o in output_lists[0] if _has_data(o)])
        return work

    def scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]], opts: Any = None) -> SoloWork:
        root = opts.rootRank
        work = self._done("scatter", [outputs, input_lists], outputs, f" root {root}", before=_io(outputs, []))
        if any(_has_data(o) for o in outputs):
            if root != self.rank():
                raise RuntimeError(f"simgpu plan --ranks: scatter of a tensor with data from root {root} to rank "
                                   f"{self.rank()}: the root's chunks for others are not this rank's to know")
            self._guarded(lambda: outputs[0].copy_(input_lists[0][self.rank()]))
        return work

    def barrier(self, opts: Any = None) -> SoloWork:
        return self._done("barrier", [], [])

    # --------------------------------------------------------------- point to point (through the store)
    def _peer(self, group_peer: int, what: str) -> int:
        ranks = self.global_ranks()
        peer = ranks[group_peer] if group_peer < len(ranks) else group_peer
        alive = running()
        if alive is not None and peer not in alive:
            me = ranks[self.rank()] if self.rank() < len(ranks) else self.rank()
            raise RuntimeError(f"simgpu plan --ranks: rank {me} {what} rank {peer}, which this plan does not run; "
                               f"add rank {peer} to --ranks (a sample must hold whole pipelines)")
        return peer

    def _message(self, kind: str, tensors: list[Tensor], peer: int, numbered: dict[int, int]) -> tuple[float | None, int]:
        """A send's or recv's start: the peer must run, the plan records the op (its end on the stream), and
        the message takes the pair's next number in `numbered` (this rank's sends or recvs per peer)."""
        from simgpu.cuda_sim import plan

        self._peer(peer, "sends to" if kind == "send" else "receives from")
        end = plan.RECORDER.collective(kind, 2, [tensors, peer], id(self)) if plan.RECORDER is not None else None
        seq = numbered.get(peer, 0)
        numbered[peer] = seq + 1
        return end, seq

    def _queued(self, work: SoloWork) -> SoloWork:
        """Hand back a finished work; inside a coalescing block it also joins the block's works."""
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def send(self, tensors: list[Tensor], dst: int, tag: int = 0) -> SoloWork:
        t = tensors[0]
        end, seq = self._message("send", tensors, dst, self._sent)
        header = {"time": end, "dtype": str(t.dtype), "shape": list(t.shape)}
        body = _bytes_of(t) if _has_data(t) else b""
        self._store.set(f"simgpu-p2p/{self.rank()}/{dst}/{seq}", json.dumps(header).encode() + b"\n" + body)
        return self._queued(SoloWork(tensors, end))

    def recv(self, tensors: list[Tensor], src: int, tag: int = 0) -> SoloWork:
        t = tensors[0]
        end, seq = self._message("recv", tensors, src, self._received)
        key = f"simgpu-p2p/{src}/{self.rank()}/{seq}"

        def arrive() -> float | None:
            self._store.wait([key], self._timeout)
            message = self._store.get(key)
            self._store.delete_key(key)
            head, _, body = message.partition(b"\n")
            header = json.loads(head)
            if math.prod(header["shape"]) != t.numel() or header["dtype"] != str(t.dtype):  # NCCL moves counts
                raise RuntimeError(f"simgpu plan --ranks: rank {self.rank()} of {self!r} receives "
                                   f"{t.dtype}{list(t.shape)} from group rank {src}, which sent "
                                   f"{header['dtype']}{header['shape']}")
            if body and _has_data(t):
                data = torch.frombuffer(bytearray(body), dtype=torch.uint8)
                self._guarded(lambda: t.view(-1).view(torch.uint8).copy_(data))
            elif body:
                self._guarded(lambda: _given_data(t, body))
            return header["time"]

        return self._queued(SoloWork(tensors, end, arrive))

    def recv_anysource(self, tensors: list[Tensor], tag: int = 0) -> SoloWork:
        raise RuntimeError("simgpu plan --ranks: recv from any source is not supported (which rank would send?)")

    def _start_coalescing(self, device: Any = None) -> None:
        self._coalescing = []

    def _end_coalescing(self, device: Any = None) -> SoloWork:
        works, self._coalescing = self._coalescing or [], None
        return _last(works, [t for w in works for t in w.result()])

    # SimProcessGroup's own names for torch's (its class aliases point at its methods, not these)
    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    all_to_all_single = alltoall_base

    def _batched(self, work: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _simulation_section(method: Any) -> Any:
    """A SoloGroup call is the simulation's own host work (plan_host.SIM), not the program's."""
    from simgpu.cuda_sim import plan_host

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with plan_host.SIM:
            return method(*args, **kwargs)
    return call


for _name in ("allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "_allgather_base",
              "allgather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "alltoall_base", "alltoall", "gather", "scatter", "barrier",
              "send", "recv", "_end_coalescing", "reduce_scatter_single", "reduce_scatter_single_coalesced",
              "all_gather_single", "all_gather_single_coalesced", "all_to_all_single"):
    setattr(SoloGroup, _name, _simulation_section(getattr(SoloGroup, _name)))
for _name in ("wait", "get_future"):
    setattr(SoloWork, _name, _simulation_section(getattr(SoloWork, _name)))


def _op_name(op: Any) -> str:
    from simgpu import nccl_rules

    return nccl_rules.op_type(op).name


def _io(outputs: Sequence[Any], inputs: Sequence[Any]) -> str:
    return ", ".join(_describe(t) for t in _flat(inputs)) + " -> " + ", ".join(
        f"{t.dtype}{list(t.shape)}" for t in _flat(outputs))


def _last(works: Sequence[SoloWork], outputs: Sequence[Tensor]) -> SoloWork:
    """One work for several: it waits for each (the last one's end holds the clock)."""
    ends = [w.plan_end for w in works if w.plan_end is not None]
    pending = [w for w in works if w._finish is not None]

    def finish() -> float | None:
        arrived = [w._finish() for w in pending]
        for w in pending:
            w._finish = None
        times = [a for a in arrived if a is not None]
        return max(times) if times else None

    return SoloWork(outputs, max(ends) if ends else None, finish if pending else None)


def document() -> dict:
    """This process's groups: their global ranks and the digest and count of their collective sequences."""
    with _lock:
        groups = list(_GROUPS.items())
    return {name: {"ranks": g._ranks, "calls": list(g._calls),
                   "digest": hashlib.sha1("\n".join(g._calls).encode()).hexdigest()}
            for name, g in groups}


def check(plans: Sequence[dict]) -> list[str]:
    """The groups whose members that ran did not call the same collectives; empty when every group agrees.
    Also the groups that only one member of ran (unchecked), as one line."""
    members: dict[str, dict[int, dict]] = {}
    for p in plans:
        for name, g in (p.get("groups") or {}).items():
            members.setdefault(name, {})[p["rank"]] = g
    problems = []
    for name, by_rank in sorted(members.items()):
        digests = {g["digest"] for g in by_rank.values()}
        if len(digests) > 1:
            ranks = sorted(by_rank)
            a, b = ranks[0], next(r for r in ranks if by_rank[r]["digest"] != by_rank[ranks[0]]["digest"])
            calls_a, calls_b = by_rank[a]["calls"], by_rank[b]["calls"]
            k = next((i for i, (x, y) in enumerate(zip(calls_a, calls_b)) if x != y), min(len(calls_a), len(calls_b)))
            what = (f"call {k + 1}: rank {a} {_call(calls_a, k)}, rank {b} {_call(calls_b, k)}")
            problems.append(f"group {name!r} (global ranks {_short(by_rank[a]['ranks'])}): ranks {a} and {b} differ at "
                            f"{what}: not symmetric along this group (plan every rank, or sample differently)")
    return problems


def _call(calls: list[str], k: int) -> str:
    return calls[k] if k < len(calls) else f"made no more collectives ({len(calls)} in all)"


def _short(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= 8 else f"[{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}] ({len(ranks)})"


def coverage(plans: Sequence[dict]) -> tuple[int, int]:
    """(groups with two or more members that ran: checked, groups with one: taken on trust)."""
    members: dict[str, set[int]] = {}
    for p in plans:
        for name in (p.get("groups") or {}):
            members.setdefault(name, set()).add(p["rank"])
    checked = sum(1 for ranks in members.values() if len(ranks) > 1)
    return checked, len(members) - checked
