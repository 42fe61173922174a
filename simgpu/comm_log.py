"""What a simulated run's collectives would cost on real GPUs: each rank's record, and the summary.

Off unless SIMGPU_PREDICT names a machine preset (simgpu.cost_model.presets(); `simgpu run --predict`
and the pytest plugin's `--predict` set it, with SIMGPU_PREDICT_DIR). Then every call through the sim
backend adds (collective, group size, bytes as nccl-tests counts them) to a small table in memory;
the table is written to $SIMGPU_PREDICT_DIR/comm-<pid>.json when the process group is destroyed and
when the process exits. A run that leaves SIMGPU_PREDICT unset pays one attribute check per call.

The launcher and the plugin read the files back (read_logs) and print summary_lines(): per
collective, the calls, the bytes and the predicted GPU time per rank and the largest over ranks.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

ENV_MACHINE = "SIMGPU_PREDICT"
ENV_DIR = "SIMGPU_PREDICT_DIR"

# None: not decided yet (the environment is read at the first call); then True or False.
ACTIVE: bool | None = None
_table: dict[tuple[str, int, int], int] = {}
_lock = threading.Lock()
_who: dict[str, int] = {}
_hooks_installed = False


def _decide() -> bool:
    global ACTIVE, _hooks_installed
    ACTIVE = bool(os.environ.get(ENV_MACHINE)) and bool(os.environ.get(ENV_DIR))
    if ACTIVE and not _hooks_installed:
        _hooks_installed = True
        import atexit
        from multiprocessing import util

        atexit.register(flush)
        util.Finalize(None, flush, exitpriority=100)  # multiprocessing children leave through os._exit
    return ACTIVE


def _nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def _total(items: Iterable[Any]) -> int:
    return sum(_nbytes(t) for t in items)


def nccl_tests_bytes(op: str, n: int, args: Sequence[Any]) -> int:
    """The size nccl-tests would print for this call: the larger of one rank's send and receive
    buffers (for scatter and gather, the root's whole list, whichever rank this is)."""
    if op in ("all_reduce", "reduce", "broadcast"):
        return _nbytes(args[0][0])
    if op == "all_reduce_coalesced":
        return _total(args[0])
    if op == "reduce_scatter":              # (outputs, input_lists): the whole input
        return _total(args[1][0])
    if op == "reduce_scatter_tensor":       # (output, input)
        return _nbytes(args[1])
    if op == "all_gather":                  # (output_lists, inputs): the whole output
        return _total(args[0][0])
    if op == "all_gather_into_tensor":      # (output, input)
        return _nbytes(args[0])
    if op == "gather":                      # (output_lists, inputs): n chunks at the root
        return n * _nbytes(args[1][0])
    if op == "scatter":                     # (outputs, input_lists)
        return n * _nbytes(args[0][0])
    if op == "all_to_all":                  # (outputs, inputs)
        return max(_total(args[0]), _total(args[1]))
    if op == "all_to_all_single":           # (output, input, ...)
        return max(_nbytes(args[0]), _nbytes(args[1]))
    if op in ("send", "recv"):              # ([tensor], peer)
        return _nbytes(args[0][0])
    if op == "barrier":                     # ProcessGroupNCCL: an all_reduce of one float
        return 4
    raise KeyError(op)


def record(op: str, n: int, args: Sequence[Any]) -> None:
    """Count one call (the sim backend calls this after the call was accepted). Never raises."""
    if ACTIVE is None and not _decide() or ACTIVE is False:
        return
    try:
        key = (op, int(n), nccl_tests_bytes(op, n, args))
    except Exception:  # noqa: BLE001 - an odd argument must not break the user's program
        key = (op, int(n), -1)
    with _lock:
        _table[key] = _table.get(key, 0) + 1
        if not _who:
            _who.update(_identity())


def _identity() -> dict[str, int]:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    except Exception:  # noqa: BLE001
        pass
    return {"rank": int(os.environ.get("RANK", "-1")), "world_size": int(os.environ.get("WORLD_SIZE", "-1"))}


def flush() -> None:
    """Write this process's table to $SIMGPU_PREDICT_DIR/comm-<pid>.json (replacing the last write)."""
    if not ACTIVE or not _table:
        return
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return
    with _lock:
        doc = {"pid": os.getpid(), **_who, "calls": [[op, n, b, c] for (op, n, b), c in sorted(_table.items())]}
    try:
        path = Path(folder) / f"comm-{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
    except OSError:
        pass


def reset() -> None:
    """Forget what was counted and decide again from the environment (tests)."""
    global ACTIVE
    with _lock:
        _table.clear()
        _who.clear()
    ACTIVE = None


def read_logs(folder: str | Path) -> list[dict]:
    """Every rank process's table in `folder` (as flush wrote them)."""
    out = []
    for path in sorted(Path(folder).glob("comm-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


# ----------------------------------------------------------------------------- the summary
def _fmt_bytes(b: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:.1f} {unit}"
    return f"{int(b)} B"


def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


def summarize(logs: Sequence[dict], machine_name: str) -> dict:
    """Per rank and collective: calls, bytes, predicted GPU time (us), and the eager estimate."""
    from simgpu import collective_facts, cost_model

    m = cost_model.machine(machine_name)
    ranks: dict[str, dict[str, dict[str, float]]] = {}
    unknown = 0
    several = _several_worlds(logs)
    for log in logs:
        world, rank = log.get("world_size", -1), log.get("rank", -1)
        who = f"{rank}/{world}" if several else f"{rank}"
        per = ranks.setdefault(who, {})
        for op, n, nbytes, calls in log["calls"]:
            if op == "recv":  # the other half of a peer's send: the model's sendrecv prices the pair once
                continue
            if nbytes < 0:
                unknown += calls
                continue
            name = collective_facts.ALIASES.get(op, op)
            ranks_in_call = 2 if op in ("send", "recv") else n
            p = cost_model.predict(m, name, nbytes, ranks_in_call, "eager")
            row = per.setdefault(name, {"calls": 0, "bytes": 0, "gpu_us": 0.0, "eager_us": 0.0})
            row["calls"] += calls
            row["bytes"] += calls * nbytes
            row["gpu_us"] += calls * p.gpu_us
            row["eager_us"] += calls * p.time_us
    return {"machine": m, "ranks": ranks, "unknown_calls": unknown}


def _several_worlds(logs: Sequence[dict]) -> bool:
    return len({log.get("world_size", -1) for log in logs}) > 1


def summary_lines(logs: Sequence[dict], machine_name: str) -> list[str]:
    """The table `simgpu run --predict` and `pytest --predict` print."""
    s = summarize(logs, machine_name)
    m, ranks = s["machine"], s["ranks"]
    head = [f"predicted GPU communication time on {m.summary()}"]
    if not ranks:
        return head + ["no collectives were recorded (did the program use torch.distributed on the simulated GPUs?)"]
    from simgpu.collective_facts import COLLECTIVES

    names = [c for c in COLLECTIVES if any(c in per for per in ranks.values())]
    width = max(len("collective"), *(len(c) for c in names), len("total"))
    lines = head + [f"{'collective':<{width}}  {'calls/rank':>10}  {'bytes/rank':>11}  {'GPU time/rank':>13}  "
                    f"{'max over ranks':>14}"]

    def row(label: str, pick: Any) -> str:
        calls = [sum(pick(per, "calls")) for per in ranks.values()]
        nbytes = [sum(pick(per, "bytes")) for per in ranks.values()]
        gpu = [sum(pick(per, "gpu_us")) for per in ranks.values()]
        c = f"{min(calls)}" if min(calls) == max(calls) else f"{min(calls)}-{max(calls)}"
        return (f"{label:<{width}}  {c:>10}  {_fmt_bytes(max(nbytes)):>11}  {_fmt_us(sum(gpu) / len(gpu)):>13}  "
                f"{_fmt_us(max(gpu)):>14}")

    for c in names:
        lines.append(row(c, lambda per, k, c=c: [per[c][k]] if c in per else [0]))
    lines.append(row("total", lambda per, k: [v[k] for v in per.values()]))
    totals = {who: sum(v["gpu_us"] for v in per.values()) for who, per in ranks.items()}
    shown = sorted(totals.items(), key=lambda kv: _rank_order(kv[0]))
    label = "rank/world" if _several_worlds(logs) else "rank"
    lines.append(f"per {label}: " + ", ".join(f"{who}: {_fmt_us(t)}" for who, t in shown[:16])
                 + (f", ... ({len(shown)} in all)" if len(shown) > 16 else ""))
    if m.host_floor_us:
        eager = max(sum(v["eager_us"] for v in per.values()) for per in ranks.values())
        lines.append(f"launched one by one in eager mode on the measured host (its launch floor per call): "
                     f"{_fmt_us(eager)} on the slowest rank")
    if s["unknown_calls"]:
        lines.append(f"({s['unknown_calls']} call(s) whose size could not be read are not counted)")
    return lines


def _rank_order(who: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in who.split("/"))[::-1]
    except ValueError:
        return (1 << 30,)
