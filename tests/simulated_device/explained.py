"""The differences between simulated and real CUDA (or the host) that the sweep accepts, each with its reason.

Keys are (OpInfo name, variant, check); variant "*" means every variant of the op. A difference that is
not listed here fails the sweep; an entry that no sample meets any more is reported as unused.
"""
from __future__ import annotations

EXPLAINED: dict[tuple[str, str, str], str] = {
}


def explanation(name: str, variant: str, check: str) -> str | None:
    return EXPLAINED.get((name, variant, check)) or EXPLAINED.get((name, "*", check))
