"""PyTorch's OpInfo database on simulated GPUs, held to the host and to a record of real CUDA.

Three modes, all `python -m tests.simulated_device.opinfo_sweep`:
- under `simgpu run --gpus 2 -m ...` (the default): every selected op and sample runs on "cuda" (simulated)
  and on a host copy of the same sample; results must agree in device, dtype, shape and values, as must
  gradients (autograd, torch.func.grad) and vmap; every outcome is also compared with the CUDA record
  (ok or refused, output devices/dtypes/shapes, and the output dtypes under bf16 autocast);
- `--record` on a real GPU (no simulation): writes that record for the installed torch;
- `--merge` joins the shards of a record into one file with the machine's description.

The simulation patches torch for the whole process, so the pytest side (tests/test_opinfo_sweep.py)
runs this in a child process and reads its report.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import inspect
import itertools
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten

from tests.simulated_device.explained import explanation

REFERENCE_DIR = Path(__file__).resolve().parent / "cuda_reference"
DEFAULT_SAMPLES = 1  # the default tier: one dtype, the first sample of every op
AUTOCAST_DTYPE = torch.bfloat16
CHECKS = ("samples", "forward", "values", "cuda", "backward", "vmap", "grad", "autocast")


def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def key_of(op: Any, dtype: torch.dtype, index: int) -> str:
    """How the record names a sample: stable across torch versions as long as the OpInfo keeps its samples."""
    return f"{op.name}|{op.variant_test_name}|{dtype_name(dtype)}|{index}"


def dtypes_of(op: Any, full: bool) -> list[torch.dtype]:
    """Every dtype the OpInfo lists for CUDA (--full), or one: float32 where it has it."""
    dtypes = sorted(op.supported_dtypes("cuda"), key=str)
    if full or not dtypes:
        return dtypes
    return [torch.float32] if torch.float32 in dtypes else dtypes[:1]


def samples(op: Any, device: str, dtype: torch.dtype, requires_grad: bool, limit: int | None) -> list:
    torch.manual_seed(0)
    return list(itertools.islice(op.sample_inputs(device, dtype, requires_grad=requires_grad), limit))


def call(op: Any, s: Any) -> Any:
    return op(s.input, *s.args, **s.kwargs)


def tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def describe(value: Any) -> list[list]:
    """Each output tensor's [device, dtype, shape]."""
    return [[str(t.device), dtype_name(t.dtype), list(t.shape)] for t in tensors(value)]


def signature(s: Any) -> str:
    """The sample's tensors' dtypes and shapes: a record entry is only used for the sample it was made from."""
    return ";".join(f"{dtype_name(t.dtype)}{list(t.shape)}" for t in tensors((s.input, s.args, s.kwargs)))


def options(s: Any) -> str:
    """The sample's other arguments (numbers, strings, dtypes; a tensor as "T", anything else by its type): with
    the signature, what tells apart samples that differ only there. Some OpInfos order such samples by string
    hashing, which differs from process to process (meshgrid iterates {'xy', 'ij'}), so the index alone does not."""
    def plain(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return "T"
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device)):
            return str(v)
        return type(v).__name__

    return repr([plain(a) for a in s.args] + sorted((k, plain(v)) for k, v in s.kwargs.items()))


def same_sample(entry: dict | None, s: Any) -> bool:
    """Whether a record entry was made from sample `s` (records before 2026-11-27 keep no options: "k")."""
    return entry is not None and entry.get("s") == signature(s) and entry.get("k", options(s)) == options(s)


def attempt(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return None, exc


def error_name(exc: BaseException) -> str:
    # torch.AcceleratorError (CUDA errors, torch >= 2.9) is a RuntimeError to programs
    return "RuntimeError" if type(exc).__name__ == "AcceleratorError" else type(exc).__name__


def float_dtype(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def drops_out(op: Any, s: Any) -> bool:
    """A sample that asks for dropout (attention's dropout_p, given by name or, for torch.nn.functional's
    functions, by position), in training: its values are a generator's."""
    arguments = dict(s.kwargs)
    function = getattr(torch.nn.functional, op.name[len("nn.functional."):], None) \
        if op.name.startswith("nn.functional.") else None
    if function is not None:
        try:
            arguments = inspect.signature(function).bind(s.input, *s.args, **s.kwargs).arguments
        except (TypeError, ValueError):  # a builtin without a signature, or the sample does not bind
            pass
    return float(arguments.get("dropout_p") or 0.0) > 0.0 and arguments.get("training", True) is not False


def is_random(op: Any) -> bool:
    """Ops that draw random numbers (aten's nondeterministic_seeded tag): their values are a generator's."""
    packet = getattr(torch.ops.aten, op.aten_name or op.name.split(".")[-1], None) if hasattr(op, "aten_name") else None
    if packet is None or not hasattr(packet, "overloads"):
        return op.name in ("bernoulli", "normal", "multinomial", "randint_like", "rand_like", "randn_like")
    return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags for o in packet.overloads())


# ---- the record of real CUDA ----------------------------------------------------------------------
def record(shard: int, shards: int, full: bool, out: Path, only: set[str] | None) -> int:
    """Run every selected sample on the GPU and write what CUDA did (no simulation here). Resumes from
    `out`; a CUDA error that leaves the context unusable (a device-side assert) ends the process with 3,
    the op that caused it recorded as far as it got, so a shell loop can start it again."""
    assert torch.cuda.is_available(), "--record runs on a real GPU"
    entries: dict[str, dict] = json.loads(out.read_text()) if out.exists() else {}
    done = set(entries.pop("_done", []))
    for position, op in enumerate(op_db()):
        if position % shards != shard or (only and op.name not in only) or position in done:
            continue
        done.add(position)
        broken = False
        for dtype in dtypes_of(op, full):
            got, exc = attempt(lambda: samples(op, "cuda", dtype, False, None if full else DEFAULT_SAMPLES))
            if exc is not None:
                entries[key_of(op, dtype, -1)] = {"o": error_name(exc)}
                broken = broken or _context_lost(exc)
                continue
            for index, s in enumerate(got):
                entry = entries[key_of(op, dtype, index)] = _record_sample(op, s, dtype)
                if entry.pop("lost", False):
                    broken = True
                    break
            if broken:
                break
        out.write_text(json.dumps({**entries, "_done": sorted(done)}, separators=(",", ":")))
        if broken:
            return 3
    return 0


def _context_lost(exc: BaseException) -> bool:
    return "device-side assert" in str(exc) or "illegal memory access" in str(exc)


def _record_sample(op: Any, s: Any, dtype: torch.dtype) -> dict:
    entry: dict[str, Any] = {"s": signature(s), "k": options(s)}
    with torch.no_grad():
        out, exc = attempt(lambda: _synced(call(op, s)))
        entry["o"] = "ok" if exc is None else error_name(exc)
        if exc is not None and _context_lost(exc):
            return {**entry, "lost": True}
        if exc is None:
            entry["out"] = describe(out)
        if float_dtype(dtype):
            with torch.autocast("cuda", dtype=AUTOCAST_DTYPE):
                out, exc = attempt(lambda: _synced(call(op, s)))
            entry["ac"] = [d for _, d, _ in describe(out)] if exc is None else error_name(exc)
    return entry


def _synced(value: Any) -> Any:
    torch.cuda.synchronize()
    return value


def merge(parts: list[Path], out: Path, meta: dict) -> None:
    entries: dict[str, dict] = {}
    done: set[int] = set()
    for part in parts:
        entries.update(json.loads(part.read_text()))
        done.update(entries.pop("_done", []))
    meta = {**meta, "op_variants_recorded": len(done), "op_variants": len(op_db())}
    with gzip.open(out, "wt") as f:
        json.dump({"meta": meta, "entries": entries}, f, separators=(",", ":"), sort_keys=True)


def machine_meta(command: str) -> dict:
    import datetime
    import subprocess

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError as exc:
        driver = f"unknown ({exc})"
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "driver": driver, "cuda": torch.version.cuda,
            "torch": torch.__version__, "python": sys.version.split()[0], "command": command}


def load_reference(path: Path | None) -> tuple[dict, dict]:
    """The CUDA record (entries, meta); the newest file in cuda_reference/ unless one is named."""
    if path is None:
        found = sorted(REFERENCE_DIR.glob("*.json.gz"))
        if not found:
            return {}, {}
        path = found[-1]
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    return data["entries"], {**data["meta"], "file": path.name}


# ---- the differential sweep (under simulation) ------------------------------------------------------
class Report:
    """Outcomes per check: pass, fail, explained (a listed difference, with its reason), open (a listed bug not
    fixed yet), refused (host and simulation both refuse the sample), no_reference (no CUDA record for it)."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter] = {c: Counter() for c in CHECKS}
        self.failures: list[list[str]] = []
        self.listed: dict[str, dict[str, dict]] = {"explained": {}, "open": {}}
        self.ops: set[str] = set()
        self.seconds: dict[str, float] = {}

    def add(self, op: Any, key: str, check: str, problem: str | None, status: str = "pass") -> None:
        if problem is None:
            self.counts[check][status] += 1
            return
        listed = explanation(op.name, op.variant_test_name, check)
        if listed is None:
            self.counts[check]["fail"] += 1
            self.failures.append([key, check, problem[:400]])
            return
        status, reason = listed
        self.counts[check][status] += 1
        entry = self.listed[status].setdefault(f"{op.name}|{op.variant_test_name}|{check}",
                                               {"reason": reason, "samples": 0, "example": problem[:200]})
        entry["samples"] += 1


def host_copy(s: Any) -> Any:
    def to_host(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.requires_grad and not gradient_reaches(t):
            return _unreachable(t.detach().cpu())  # made as its own base: a fresh copy
        return _with_its_storage(t.detach()).requires_grad_(t.requires_grad)

    copy = s.transform(to_host)
    copy.args = tuple(_host_device(a) for a in copy.args)
    copy.kwargs = {k: _host_device(v) for k, v in copy.kwargs.items()}
    return copy


def _with_its_storage(t: torch.Tensor) -> torch.Tensor:
    """A host copy of `t`; for a view into a larger storage (a slice with an offset: as_strided's partial views),
    the whole storage copied and the view made again on it, so that an op reading past the view (as_strided
    with its own storage_offset) reads on the host what it reads on the GPU. A plain `.cpu()` copies the view's
    elements alone, and the host then read other memory."""
    if t.layout != torch.strided:
        return t.cpu()
    elements = t.untyped_storage().nbytes() // t.element_size()
    if t.storage_offset() == 0 and elements <= t.numel():
        return t.cpu()
    whole = t.as_strided((elements,), (1,), 0).cpu()
    return whole.as_strided(t.shape, t.stride(), t.storage_offset())


def gradient_reaches(t: torch.Tensor) -> bool:
    """Whether autograd gives `t` a gradient. Not always where it requires grad: a view made before its base
    required grad (istft's windows `window[:8]`) reports requires_grad and is a leaf, but no gradient reaches it
    (on any device)."""
    if not t.is_leaf:
        return True
    with torch.enable_grad():
        return t.view_as(t).grad_fn.next_functions[0][0] is not None


def _unreachable(copy: torch.Tensor) -> torch.Tensor:
    """`copy` made like such a view, so the host reference treats it as the sample does."""
    with torch.no_grad():
        view = copy.view_as(copy)
    copy.requires_grad_()  # after the view was made: the view reports requires_grad, no gradient reaches it
    return view


def _host_device(value: Any) -> Any:
    """A device argument naming a GPU ("cuda", torch.device("cuda:0")) names the host in the host copy."""
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.startswith("cuda"):
        return "cpu"
    return value


def _dense(t: torch.Tensor) -> torch.Tensor:
    """An efficient zero tensor (autograd's zero gradients on the host) as ordinary zeros: comparing one with
    an ordinary tensor below the simulation's modes crashed the process (segfault)."""
    return torch.zeros(t.shape, dtype=t.dtype) if t._is_zerotensor() else t


def compare(sim: Any, host: Any, device: str | None, values: bool, cuda: list | None = None,
            batched: bool = False) -> str | None:
    """Why `sim` (outputs on the simulated GPU) is not `host` (the host's outputs for the same sample).

    `cuda`: the CUDA record's outputs for the sample ([device, dtype, shape] each). Where an output's dtype or
    shape differs from the host's and is CUDA's (half-precision batch/layer norm keeps its statistics in
    float32, batch norm in evaluation returns them where the host returns empty tensors), the host is no
    reference for it: its values are compared in the host's dtype where the shapes agree, else not at all.
    With `batched` (vmap's outputs carry a batch dimension the record's lack) only the dtype is CUDA's."""
    from simgpu.cuda_sim.placement import suspended

    a, b = tensors(sim), tensors(host)
    if len(a) != len(b):
        return f"{len(a)} output tensors, host {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        want = device if str(y.device) == "cpu" else str(y.device)
        if device is not None and str(x.device) != want:
            return f"output {i} on {x.device}, expected {want}"
        if x.dtype != y.dtype or x.shape != y.shape:
            if not _cudas_own(x, cuda[i] if cuda is not None and i < len(cuda) else None, batched):
                return f"output {i}: {x.dtype}{list(x.shape)}, host {y.dtype}{list(y.shape)}"
            if x.shape != y.shape:
                continue
            x = x.to(y.dtype)
        if values:
            with suspended():
                try:
                    torch.testing.assert_close(_dense(x.detach()), _dense(y.detach()), equal_nan=True,
                                               check_device=False, check_layout=False, check_stride=False)
                except AssertionError as exc:
                    return f"output {i} values: {str(exc).splitlines()[0:3]}"
    return None


def _cudas_own(x: torch.Tensor, recorded: list | None, batched: bool) -> bool:
    """Whether output `x` has the dtype (and, unless batched, the shape) that CUDA's record gives."""
    if recorded is None or recorded[1] != dtype_name(x.dtype):
        return False
    return batched or recorded[2] == list(x.shape)


def recorded_outputs(entry: dict | None, s: Any) -> list | None:
    """The CUDA record's outputs for sample `s`, where it has them for this very sample."""
    if not same_sample(entry, s) or entry.get("o") != "ok":
        return None
    return entry.get("out")


_HALF = (torch.float16, torch.bfloat16)


def half_sample(h: Any) -> bool:
    return any(t.dtype in _HALF for t in tensors((h.input, h.args, h.kwargs)))


def wide_copy(h: Any) -> Any:
    """The host sample with its float16/bfloat16 tensors in float32 (those that require grad as leaves)."""
    def widen(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dtype not in _HALF:
            return t
        return t.detach().float().requires_grad_(t.requires_grad)

    return h.transform(widen)


def as_cuda_computes(problem: str | None, h: Any, sim: Any, run: Callable[[Any], Any], device: str | None,
                     cuda: list | None = None, batched: bool = False) -> str | None:
    """A half-precision sample whose simulated outputs differ from the host's: they pass if they are the sample
    computed in float32 and rounded once to their dtypes (`run` of the widened host sample), which is what CUDA's
    kernels do (their opmath type) where the host's round intermediates (statistics, partial sums) to the input's
    dtype. Otherwise the host's difference stands."""
    if problem is None or not half_sample(h):
        return problem
    wide, exc = attempt(lambda: run(wide_copy(h)))
    if exc is not None or wide is None:
        return problem
    a, b = tensors(sim), tensors(wide)
    if len(a) != len(b):
        return problem
    rounded = [w.detach().to(x.dtype) if w.dtype != x.dtype else w.detach() for x, w in zip(a, b)]
    return problem if compare(a, rounded, device, values=True, cuda=cuda, batched=batched) is not None else None


def outcome_problem(sim_exc: BaseException | None, host_exc: BaseException | None,
                    cuda_ok: bool = False) -> tuple[str | None, str]:
    """(problem, status) when one side raised. Where the host refuses what CUDA runs (the record says so, or
    torch has the op for CUDA only), the host is no reference and the CUDA record decides."""
    if sim_exc is None and host_exc is None:
        return None, "pass"
    if sim_exc is not None and host_exc is not None:
        if error_name(sim_exc) == error_name(host_exc):
            return None, "refused"
        return f"simulated {error_name(sim_exc)}: {sim_exc}; host {error_name(host_exc)}: {host_exc}", "fail"
    if sim_exc is not None:
        return f"simulated {error_name(sim_exc)}: {str(sim_exc)[:300]} (host ok)", "fail"
    if cuda_ok or _no_host_kernel(host_exc):
        return None, "no_reference"
    return f"host {error_name(host_exc)}: {str(host_exc)[:300]} (simulated ok)", "fail"


def _no_host_kernel(exc: BaseException) -> bool:
    """The host has no kernel for the op, or none for the sample's dtype ("histogram_cpu" not implemented for
    'Byte'): no reference, the CUDA record decides."""
    text = str(exc)
    return isinstance(exc, NotImplementedError) and ("with arguments from the 'CPU' backend" in text
                                                     or "not implemented for '" in text)


def grad_inputs(s: Any) -> list[torch.Tensor]:
    return [t for t in tensors((s.input, s.args, s.kwargs)) if t.requires_grad]


def sweep(full: bool, shard: int, shards: int, only: set[str] | None, reference: dict, report: Report,
          after_op: Callable[[], None] = lambda: None) -> None:
    """`after_op` runs after each op variant: main() writes the report there, so a shard stopped by a time
    limit (a GPU box's call) still leaves what it did."""
    for position, op in enumerate(op_db()):
        if position % shards != shard or (only and op.name not in only):
            continue
        report.ops.add(f"{op.name}|{op.variant_test_name}")
        random = is_random(op)
        began = time.monotonic()
        for dtype in dtypes_of(op, full):
            backward = op.supports_autograd and dtype in op.supported_backward_dtypes("cuda")
            got, exc = attempt(lambda: samples(op, "cuda", dtype, backward, None if full else DEFAULT_SAMPLES))
            if exc is not None:
                report.add(op, key_of(op, dtype, -1), "samples", f"{error_name(exc)}: {exc}")
                continue
            recorded = _as_recorded(op, dtype, full) if backward else None
            for index, s in enumerate(got):
                check_sample(op, s, dtype, key_of(op, dtype, index), backward, random or drops_out(op, s), reference,
                             report, None if recorded is None else functools.partial(_nth, recorded, index))
        report.seconds[f"{op.name}|{op.variant_test_name}"] = round(time.monotonic() - began, 2)
        after_op()


def _as_recorded(op: Any, dtype: torch.dtype, full: bool) -> Callable[[], list]:
    """The samples as the CUDA record made them (without grad), made once if needed: some ops' samples
    depend on requires_grad beyond their tensors (_efficient_attention_forward's compute_log_sumexp)."""
    return functools.cache(lambda: samples(op, "cuda", dtype, False, None if full else DEFAULT_SAMPLES))


def _nth(made: Callable[[], list], index: int) -> Any:
    return made()[index]


def expected_device(s: Any) -> str:
    """Where the outputs of a sample made on the GPU belong, as CUDA gives them: the input's GPU, unless the
    sample asks for the host by name (new_ones(..., device="cpu"), full_like, randint_like); a sample whose
    input is a number takes its tensor arguments' GPU (normal(2.7, std)); a factory sample without a tensor
    makes its result where its device argument says (none: the host, arange(2))."""
    asked = s.kwargs.get("device")
    if asked is not None and torch.device(asked).type == "cpu":
        return "cpu"
    # the input, or the first of a list of them (stack, meshgrid), or the first tensor argument
    given = next(iter(tensors((s.input, s.args, s.kwargs))), None)
    if given is not None:
        return str(given.device)
    return "cpu" if asked is None else f"cuda:{torch.device(asked).index or 0}"


def check_sample(op: Any, s: Any, dtype: torch.dtype, key: str, backward: bool, random: bool, reference: dict,
                 report: Report, as_recorded: Callable[[], Any] | None = None) -> None:
    h = host_copy(s)
    device = expected_device(s)
    sim_out, sim_exc = attempt(lambda: call(op, s))
    host_out, host_exc = attempt(lambda: call(op, h))
    cuda = recorded_outputs(reference.get(key), s)
    cuda_ok = cuda is not None
    problem, status = outcome_problem(sim_exc, host_exc, cuda_ok)
    if problem is None and status == "pass":
        problem = compare(sim_out, host_out, device, values=False, cuda=cuda)
        if problem is None and not random:
            report.add(op, key, "values", as_cuda_computes(
                compare(sim_out, host_out, device, values=True, cuda=cuda), h, sim_out, lambda w: call(op, w),
                device, cuda))
    report.add(op, key, "forward", problem, status)
    check_reference(op, s, key, sim_out, sim_exc, reference, report, as_recorded)
    if backward and sim_exc is None and host_exc is None:
        check_backward(op, s, h, key, sim_out, host_out, random, report)
    if isinstance(s.input, torch.Tensor) and not random:
        if op.check_batched_grad:
            check_transform(op, s, h, key, "vmap", _vmapped, report, cuda_ok, cuda)
        if backward and dtype.is_floating_point:
            check_transform(op, s, h, key, "grad", _grad_of_sum, report, cuda_ok)
    if dtype.is_floating_point:
        check_autocast(op, s, key, reference, report)


def check_reference(op: Any, s: Any, key: str, sim_out: Any, sim_exc: BaseException | None, reference: dict,
                    report: Report, as_recorded: Callable[[], Any] | None = None) -> None:
    entry = reference.get(key)
    if entry is not None and sim_exc is None and as_recorded is not None and describe(sim_out) != entry.get("out"):
        with torch.no_grad():  # the sample as recorded, in case its kwargs follow requires_grad
            sim_out, sim_exc = attempt(lambda: call(op, as_recorded()))
    if not same_sample(entry, s):
        report.add(op, key, "cuda", None, "no_reference")
        return
    if (entry["o"] == "ok") != (sim_exc is None):
        report.add(op, key, "cuda", f"CUDA {entry['o']}, simulated "
                   + ("ok" if sim_exc is None else f"{error_name(sim_exc)}: {str(sim_exc)[:300]}"))
        return
    if sim_exc is None and describe(sim_out) != entry["out"]:
        report.add(op, key, "cuda", f"outputs {describe(sim_out)}, CUDA {entry['out']}")
        return
    report.add(op, key, "cuda", None, "pass" if sim_exc is None else "refused")


def check_backward(op: Any, s: Any, h: Any, key: str, sim_out: Any, host_out: Any, random: bool,
                   report: Report) -> None:
    def grads(sample: Any, out: Any) -> Any:
        outs = [t for t in tensors(sample.output_process_fn_grad(out)) if t.requires_grad]
        inputs = grad_inputs(sample)
        if not outs or not inputs:
            return None
        return torch.autograd.grad(outs, inputs, [torch.ones_like(t) for t in outs], allow_unused=True)

    sim_g, sim_exc = attempt(lambda: grads(s, sim_out))
    host_g, host_exc = attempt(lambda: grads(h, host_out))
    problem, status = outcome_problem(sim_exc, host_exc)
    if sim_g is None and host_g is None and problem is None:
        return
    if problem is None and status == "pass":
        inputs = grad_inputs(s)
        if [g is None for g in sim_g] != [g is None for g in host_g]:
            problem = "gradients defined for other inputs than on the host"
        for x, g, hg in zip(inputs, sim_g, host_g):
            if problem is None and g is not None:
                problem = compare(g, hg, str(x.device), values=not random)
        if problem is not None and not random:
            defined = [g for g in sim_g if g is not None]
            problem = as_cuda_computes(problem, h, defined, lambda w: [g for g in grads(w, call(op, w)) if g is not None],
                                       str(inputs[0].device))
    report.add(op, key, "backward", problem, status)


def _vmapped(op: Any, s: Any) -> Any:
    x = s.input.detach()
    return torch.func.vmap(lambda xi: call(op, _with_input(s, xi)))(torch.stack([x, x]))


def _grad_of_sum(op: Any, s: Any) -> Any:
    def total(x: torch.Tensor) -> torch.Tensor:
        outs = [t for t in tensors(call(op, _with_input(s, x))) if t.dtype.is_floating_point or t.dtype.is_complex]
        if not outs:
            raise TypeError("no floating output")
        return sum(t.real.sum() if t.dtype.is_complex else t.sum() for t in outs)

    return torch.func.grad(total)(s.input.detach())


def _with_input(s: Any, x: torch.Tensor) -> Any:
    from torch.testing._internal.opinfo.core import SampleInput

    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in s.args)
    return SampleInput(x, args=args, kwargs=s.kwargs)


def check_transform(op: Any, s: Any, h: Any, key: str, check: str, transform: Callable, report: Report,
                    cuda_ok: bool = False, cuda: list | None = None) -> None:
    sim_out, sim_exc = attempt(lambda: transform(op, s))
    host_out, host_exc = attempt(lambda: transform(op, h))
    problem, status = outcome_problem(sim_exc, host_exc, cuda_ok)
    if problem is None and status == "pass":
        problem = as_cuda_computes(compare(sim_out, host_out, str(s.input.device), values=True, cuda=cuda, batched=True),
                                   h, sim_out, lambda w: transform(op, w), str(s.input.device), cuda, batched=True)
    report.add(op, key, check, problem, status)


def check_autocast(op: Any, s: Any, key: str, reference: dict, report: Report) -> None:
    entry = reference.get(key)
    if not same_sample(entry, s) or "ac" not in entry:
        report.add(op, key, "autocast", None, "no_reference")
        return
    with torch.no_grad(), torch.autocast("cuda", dtype=AUTOCAST_DTYPE):
        out, exc = attempt(lambda: call(op, s))
    got = [d for _, d, _ in describe(out)] if exc is None else error_name(exc)
    cuda = entry["ac"]
    if isinstance(got, str) and isinstance(cuda, str):
        report.add(op, key, "autocast", None, "refused")
    elif got != cuda:
        report.add(op, key, "autocast", f"output dtypes {got}, CUDA {cuda}"
                   + (f": {str(exc)[:200]}" if exc is not None else ""))
    else:
        report.add(op, key, "autocast", None)


def write_report(report: Report, out: Path, meta: dict) -> None:
    out.write_text(json.dumps({"meta": meta, "ops": sorted(report.ops),
                               "counts": {c: dict(n) for c, n in report.counts.items()},
                               "failures": report.failures, **report.listed,
                               "slowest": sorted(report.seconds.items(), key=lambda kv: -kv[1])[:15]}, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--full", action="store_true", help="every dtype and sample (default: one dtype, first sample)")
    parser.add_argument("--shard", default="0/1", help="k/n: the ops at positions k, k+n, ... of op_db")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--record", action="store_true", help="write the CUDA record (on a real GPU)")
    parser.add_argument("--merge", nargs="*", type=Path, help="join record shards into --out")
    parser.add_argument("--reference", type=Path, default=None, help="the CUDA record (default: the newest)")
    parser.add_argument("--command", default="", help="with --merge: the command that made the record")
    ns = parser.parse_args(argv)
    shard, shards = (int(x) for x in ns.shard.split("/"))
    only = set(filter(None, ns.ops.split(","))) or None
    if ns.merge:
        merge(ns.merge, ns.out, machine_meta(ns.command))
        return 0
    if ns.record:
        return record(shard, shards, ns.full, ns.out, only)
    import simgpu.cuda_sim as sim

    assert sim.active(), "the sweep runs under `simgpu run`"
    reference, ref_meta = load_reference(ns.reference)
    report = Report()
    start = time.monotonic()

    def write(finished: bool) -> None:
        write_report(report, ns.out, {"torch": torch.__version__, "full": ns.full, "shard": ns.shard,
                                      "expected_ops": len(op_db()[shard::shards]) if not only else len(only),
                                      "finished": finished, "reference": ref_meta,
                                      "seconds": round(time.monotonic() - start, 1)})

    sweep(ns.full, shard, shards, only, reference, report, after_op=lambda: write(False))
    write(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
