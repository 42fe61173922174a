"""A rank's traceback as its user reads it: the user's own frames, simgpu's plumbing folded.

A rank's raw traceback starts with simgpu's frames (the rank's serve loop, the fixture's import of
the test module) and, for a collective, ends in a dozen frames of torch.distributed and the
simulator: the frame that matters, the user's line, sat in the middle, once per rank. Here the
leading plumbing is dropped, so the user's frame comes first, and every later run of frames that
passes through simgpu (with the torch frames between) becomes one line; torch's own frames that
raise without simgpu in between stay, since they say what the user called wrongly.
"""
from __future__ import annotations

import os
import re
import sys

_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_HEADER = "Traceback (most recent call last):"
MAX_LINES = 40  # a traceback longer than this after folding keeps its end: the error and its last frames


def _package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    return os.path.dirname(os.path.realpath(file)) + os.sep if file else None


def _kind(path: str, simgpu_dir: str | None, torch_dir: str | None) -> str:
    """'simgpu', 'torch' or 'user' for a frame's file (paths as the rank saw them, on this host)."""
    real = os.path.realpath(path)
    if (simgpu_dir and real.startswith(simgpu_dir)) or f"{os.sep}site-packages{os.sep}simgpu{os.sep}" in path:
        return "simgpu"
    if (torch_dir and real.startswith(torch_dir)) or f"{os.sep}site-packages{os.sep}torch{os.sep}" in path:
        return "torch"
    return "user"


def _short(path: str, simgpu_dir: str | None) -> str:
    """simgpu/strict.py for a file of simgpu's, the file name for any other."""
    real = os.path.realpath(path)
    if simgpu_dir and real.startswith(simgpu_dir):
        return "simgpu/" + real[len(simgpu_dir):]
    return os.path.basename(path)


def _blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Split into ('frame', lines) for each `File ...` entry with its source lines, ('text', [line]) else."""
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        if _FRAME.match(line):
            blocks.append(("frame", [line]))
        elif line.startswith("    ") and blocks and blocks[-1][0] == "frame":
            blocks[-1][1].append(line)
        else:
            blocks.append(("text", [line]))
    return blocks


def fold(text: str) -> list[str]:
    """The traceback's lines with simgpu's frames folded (see the module docstring); the exception
    lines are kept whole. Text that is not a Python traceback comes back unchanged."""
    simgpu_dir, torch_dir = _package_dir("simgpu"), _package_dir("torch")
    out: list[str] = []
    run: list[tuple[str, str]] = []  # the current run of library frames: (kind, "file:line")
    at_start = True  # before the first user frame of this traceback (or chained exception)

    def flush(user_next: bool = False) -> None:
        nonlocal run
        if run and any(kind == "simgpu" for kind, _ in run):
            if not (at_start and user_next):  # the plumbing that called the user's function: dropped
                innermost = [where for kind, where in run if kind == "simgpu"][-1]
                out.append(f"  ... {len(run)} frame(s) of simgpu and torch folded (innermost: {innermost})")
        else:
            out.extend(kept for _, kept in run)  # torch alone: kept as the frames themselves
        run = []

    for kind_of_block, block in _blocks(text.rstrip().splitlines()):
        if kind_of_block == "text":
            flush()
            if block[0] == _HEADER:
                at_start = True
            out.extend(block)
            continue
        frame = _FRAME.match(block[0])
        assert frame is not None
        kind = _kind(frame["file"], simgpu_dir, torch_dir)
        if kind == "user":
            flush(user_next=True)
            at_start = False
            out.extend(block)
        elif kind == "torch" and not any(k == "simgpu" for k, _ in run):
            run.append(("torch", "\n".join(block)))
        else:
            where = f"{_short(frame['file'], simgpu_dir)}:{frame['line']}"
            # a torch run followed by simgpu: the whole run folds, so keep only names from here on
            run = [(k, w if k == "simgpu" else "") for k, w in run] + [(kind, where)]
    flush()
    return [ln for chunk in out for ln in chunk.split("\n")]


def shown(text: str) -> list[str]:
    """fold(text), cut to its last MAX_LINES lines, saying how many were cut."""
    lines = fold(text)
    if len(lines) <= MAX_LINES:
        return lines
    return [f"({len(lines) - MAX_LINES} earlier line(s) cut)"] + lines[-MAX_LINES:]
