"""The README is short and every path it names exists in the repository (docs/README.md too)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"`([\w.\-]+(?:/[\w.\-<>]*)+|[\w\-]+\.(?:md|py|toml|ini))`")


def named_paths(text: str) -> list[str]:
    """Backquoted tokens that look like repository paths (a slash, or a file name with an extension)."""
    return [m for m in PATH.findall(text) if "<" not in m and not m.startswith(("http", "-"))]


def test_readme_is_at_most_8_kb() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= 8 * 1024


def test_every_path_the_readme_names_exists() -> None:
    names = named_paths((ROOT / "README.md").read_text())
    assert "docs/README.md" in names and "examples/programs/" in names  # the pattern finds what it must
    missing = [n for n in names if not (ROOT / n).exists()]
    assert not missing, missing


def test_every_page_the_docs_index_names_exists() -> None:
    names = named_paths((ROOT / "docs" / "README.md").read_text())
    assert len(names) >= 10
    missing = [n for n in names if not (ROOT / "docs" / n).exists()]
    assert not missing, missing
    listed = set(names)
    unlisted = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in listed)
    assert not unlisted, f"docs pages missing from docs/README.md: {unlisted}"
