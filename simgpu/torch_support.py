"""Which torch versions the GPU simulation is built for (importable without importing torch)."""
from __future__ import annotations

SUPPORTED_TORCH = ((2, 4), (2, 15))  # the first and last torch (major, minor) the simulation is built for


def unsupported_reason(version: str) -> str | None:
    """Why the simulation cannot run on torch `version`, or None when it can."""
    try:
        major_minor = tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return f"simgpu: cannot read the version of the installed torch ({version!r})"
    first, last = SUPPORTED_TORCH
    if not first <= major_minor <= last:
        return (f"simgpu: torch {version} is not supported by the GPU simulation "
                f"(supported: {first[0]}.{first[1]} to {last[0]}.{last[1]})")
    return None
