"""Warnings that torch raises under simulation point at the program's line, not at simgpu's.

Python attributes a warning to a frame: the caller `stacklevel` frames up for warnings.warn, the innermost
Python frame for one raised in C++ (TORCH_WARN). Under simulation torch's functions are called from
simgpu's modes and wrappers (tensors.py's function mode, placement.py's dispatch mode, the replaced
Tensor methods), so that frame was simgpu's: `simgpu/cuda_sim/tensors.py:310: FutureWarning: Please use
DTensor instead ...`. Before a warning is shown or recorded (warnings._showwarnmsg, which both the Python
and the C implementation of warnings call, and which warnings.catch_warnings keeps), a location inside
simgpu moves to the frame the warning would name without simgpu: out of simgpu's frames, out of torch's
`handle_torch_function` trampoline that called simgpu's mode, and past the outer call of the torch
function that the trampoline handed to the mode and that the mode called again.

Warnings whose location is not simgpu's are untouched. Which repeated warnings are shown is still decided
by Python at the location it first found (a "default" warning from two program lines through the same
simgpu line is shown once), as before this module.
"""
from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any, Callable

# the simgpu package's folder, from this file's place in it (importing the package would break the layer order)
_SIMGPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TRAMPOLINES = {("overrides.py", "handle_torch_function")}  # torch's frames that exist only to call a mode
_original: Callable[[Any], None] | None = None


def _in_simgpu(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_SIMGPU_DIR)


def _hidden(frame: types.FrameType) -> bool:
    code = frame.f_code
    return _in_simgpu(code.co_filename) or (os.path.basename(code.co_filename), code.co_name) in _TRAMPOLINES


def program_site(filename: str, lineno: int, frame: types.FrameType | None) -> tuple[str, int] | None:
    """Where a warning attributed to simgpu's `filename:lineno` would point without simgpu, looking up the
    live stack from `frame`; None when that frame is not on the stack."""
    callee = None
    while frame is not None and not (frame.f_code.co_filename == filename and frame.f_lineno == lineno):
        callee, frame = frame, frame.f_back
    if frame is None:
        return None
    while frame is not None and _hidden(frame):
        frame = frame.f_back
    if frame is not None and callee is not None and frame.f_code is callee.f_code and frame.f_back is not None:
        frame = frame.f_back  # the outer call of the torch function the mode called again
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def _showwarnmsg(msg: Any) -> None:
    if _in_simgpu(msg.filename):
        site = program_site(msg.filename, msg.lineno, sys._getframe(1))
        if site is not None:
            msg.filename, msg.lineno = site
    _original(msg)  # type: ignore[misc]


def install() -> None:
    """Rewrite simgpu's locations in warnings before they are shown or recorded."""
    global _original
    if _original is None:
        _original = warnings._showwarnmsg  # type: ignore[attr-defined]
        warnings._showwarnmsg = _showwarnmsg  # type: ignore[attr-defined]
