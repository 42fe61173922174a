"""Fail at once when the installed torch is not the version a tox env declares.

    SIMGPU_EXPECT_TORCH=2.11 python -m conformance.version_guard

$SIMGPU_EXPECT_TORCH is major.minor or major.minor.patch; it matches the installed
torch.__version__ (local suffix such as +cpu/+cu128 ignored) component by component, so 2.11
accepts 2.11.0 and 2.11.3 but not 2.1.x or 2.110. Unset or empty: nothing is checked.
Exit status 0 on a match, 2 on a mismatch or a malformed value, with both versions named.
"""
from __future__ import annotations

import os
import re
import sys

ENV = "SIMGPU_EXPECT_TORCH"
_DECLARED = re.compile(r"^\d+\.\d+(\.\d+)?$")


def release(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string: '2.11.0+cu128' -> (2, 11, 0), '2.15.0a0' -> (2, 15, 0)."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


def check(expected: str, installed: str) -> str | None:
    """None when `installed` matches `expected` (prefix match on components), else the error message."""
    if not _DECLARED.match(expected.strip()):
        return (f"{ENV}={expected!r} is not a version like 2.11 or 2.11.0 "
                f"(installed torch is {installed})")
    want = release(expected)
    have = release(installed)
    if have[:len(want)] != want:
        return (f"torch version mismatch: this env declares torch {expected.strip()} "
                f"({ENV}) but torch {installed} is installed")
    return None


def main(argv: list[str] | None = None) -> int:
    expected = os.environ.get(ENV, "").strip()
    import torch

    installed = torch.__version__
    if not expected:
        print(f"version_guard: {ENV} not set; torch {installed} (nothing checked)")
        return 0
    error = check(expected, installed)
    if error:
        print(f"version_guard: {error}", file=sys.stderr)
        return 2
    print(f"version_guard: torch {installed} matches {ENV}={expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
