"""Simulator fidelity: compare two capability reports cell by cell (e.g. sim against real NCCL).

    python -m conformance.compare reports/capability-sim.json reports/capability-nccl.json \\
        --explanations conformance/results/sim-vs-nccl-explained.json --out conformance/results/sim-vs-nccl.md

The grid is collective x dtype x reduce op x layout, on the cells both reports drew. A cell differs
when its marks differ (ok, rej, FAIL, ...) or when both rejected with different error types. Every
differing cell must be explained (fixed in the simulator, or listed in the explanations file with
its reason); one that is not is flagged UNEXPLAINED and the command exits 1.

Explanations file: {"explanations": [{"cell": "all_reduce/float8_*/*/*", "sim": "ok", "nccl": "rej",
"reason": "..."}]}; "cell" is collective/dtype/op/layout with shell wildcards, "sim" and "nccl"
(optional) pin the marks the reason is about, so a changed disagreement is no longer covered.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from conformance.report import SYMBOL, CapabilityReport

Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class Mark:
    """One report's verdict on one cell: its mark and the first error line behind it."""

    mark: str
    error: str = ""

    @property
    def error_type(self) -> str:
        return self.error.split(":", 1)[0].strip() if ":" in self.error else ""


@dataclass(frozen=True)
class Difference:
    key: Key
    left: Mark
    right: Mark
    reason: str | None  # None: UNEXPLAINED


@dataclass
class Comparison:
    left_name: str
    right_name: str
    common: int
    differences: list[Difference]
    only_left: list[Key]
    only_right: list[Key]
    unused_explanations: list[dict[str, Any]]

    @property
    def agreeing(self) -> int:
        return self.common - len(self.differences)

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if d.reason is None]


def marks(records: list[dict[str, Any]]) -> dict[Key, Mark]:
    """Cell -> Mark, from a capability report's JSON records (conformance/report.py)."""
    out = {}
    for rec in records:
        status = CapabilityReport.status(rec["counts"])
        details = rec.get("details", {})
        error = details.get(status) or (next(iter(details.values()), "") if status != "pass" else "")
        out[(rec["collective"], rec["dtype"], rec["op"], rec["layout"])] = Mark(SYMBOL.get(status, status), error)
    return out


def differs(left: Mark, right: Mark) -> bool:
    """Different marks, or the same rejection with a different error type."""
    return left.mark != right.mark or (left.mark == "rej" and left.error_type != right.error_type)


def explain(key: Key, left: Mark, right: Mark, explanations: Sequence[dict[str, Any]],
            left_name: str, right_name: str) -> int | None:
    """Index of the first explanation covering this difference, or None."""
    cell = "/".join(key)
    for i, entry in enumerate(explanations):
        if not fnmatch.fnmatchcase(cell, entry["cell"]):
            continue
        if entry.get(left_name, left.mark) == left.mark and entry.get(right_name, right.mark) == right.mark:
            return i
    return None


def compare(left: dict[Key, Mark], right: dict[Key, Mark], explanations: Sequence[dict[str, Any]] = (),
            left_name: str = "sim", right_name: str = "nccl") -> Comparison:
    """Cell-by-cell comparison on the cells both reports have."""
    common = sorted(set(left) & set(right))
    used: set[int] = set()
    differences = []
    for key in common:
        if differs(left[key], right[key]):
            index = explain(key, left[key], right[key], explanations, left_name, right_name)
            if index is not None:
                used.add(index)
            reason = explanations[index]["reason"] if index is not None else None
            differences.append(Difference(key, left[key], right[key], reason))
    return Comparison(left_name, right_name, len(common), differences, sorted(set(left) - set(right)),
                      sorted(set(right) - set(left)), [e for i, e in enumerate(explanations) if i not in used])


def _cell(key: Key) -> str:
    return "/".join(key)


def _code(text: str) -> str:
    return f"`{text.replace('|', '/').replace('`', '')[:160]}`" if text else ""


def render(result: Comparison, left_meta: dict[str, Any], right_meta: dict[str, Any]) -> str:
    """The Markdown report: agreement, every differing cell with both marks, errors and the reason."""
    ln, rn = result.left_name, result.right_name
    pct = 100.0 * result.agreeing / result.common if result.common else 100.0
    lines = [f"# Fidelity: `{ln}` against `{rn}`", ""]
    for name, meta in ((ln, left_meta), (rn, right_meta)):
        lines.append(f"- {name}: backend `{meta.get('backend', '?')}`, held to {meta.get('held_to_table', '?')}, "
                     f"torch {meta.get('torch', '?')}, {meta.get('machine', '?')}, {meta.get('date', '?')}")
    lines += ["", f"Common grid (collective x dtype x op x layout, cells both runs drew): {result.common} cells; "
                  f"agree {result.agreeing} ({pct:.1f}%), differ {len(result.differences)}, "
                  f"of which UNEXPLAINED {len(result.unexplained)}.", ""]
    if result.differences:
        lines += ["| cell | " + ln + " | " + rn + " | " + ln + " error | " + rn + " error | reason |",
                  "|---|---|---|---|---|---|"]
        for d in result.differences:
            reason = d.reason if d.reason is not None else "**UNEXPLAINED**"
            lines.append(f"| {_cell(d.key)} | {d.left.mark} | {d.right.mark} | {_code(d.left.error)} | "
                         f"{_code(d.right.error)} | {reason} |")
        lines.append("")
    for label, keys in ((f"Only in {ln}", result.only_left), (f"Only in {rn}", result.only_right)):
        if keys:
            lines += [f"{label} (not compared; the other run drew no example there): {len(keys)} cells", ""]
            lines += [f"- {_cell(k)}" for k in keys[:100]]
            lines += (["- ..."] if len(keys) > 100 else []) + [""]
    if result.unused_explanations:
        lines += ["Explanations that matched no difference (stale?):", ""]
        lines += [f"- `{e['cell']}`: {e['reason']}" for e in result.unused_explanations] + [""]
    return "\n".join(lines)


def _load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        data["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"conformance.compare: {path} is not a capability report (.json): {type(exc).__name__}: {exc}")
    return data


def _load_explanations(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return []
    try:
        entries = json.loads(path.read_text())["explanations"]
        bad = [e for e in entries if not (isinstance(e, dict) and isinstance(e.get("cell"), str) and e.get("reason"))]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"conformance.compare: cannot read explanations {path}: {type(exc).__name__}: {exc}")
    if bad:
        raise SystemExit(f"conformance.compare: {path}: every explanation needs \"cell\" and \"reason\"; bad: {bad[0]!r}")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.compare", description=__doc__.splitlines()[0])
    parser.add_argument("left", type=Path, help="capability report JSON, e.g. reports/capability-sim.json")
    parser.add_argument("right", type=Path, help="capability report JSON, e.g. reports/capability-nccl.json")
    parser.add_argument("--explanations", type=Path, default=None, help="JSON file of reasons for known differences")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here (default: stdout)")
    args = parser.parse_args(argv)
    left, right = _load_report(args.left), _load_report(args.right)
    left_meta, right_meta = left.get("metadata", {}), right.get("metadata", {})
    left_name, right_name = left_meta.get("backend", "left"), right_meta.get("backend", "right")
    if left_name == right_name:
        left_name, right_name = f"{left_name} ({args.left.name})", f"{right_name} ({args.right.name})"
    result = compare(marks(left["cells"]), marks(right["cells"]), _load_explanations(args.explanations),
                     left_name, right_name)
    text = render(result, left_meta, right_meta)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    pct = 100.0 * result.agreeing / result.common if result.common else 100.0
    print(f"{left_name} vs {right_name}: {result.common} common cells, {pct:.1f}% agree, "
          f"{len(result.differences)} differ, {len(result.unexplained)} UNEXPLAINED"
          + (f"; report: {args.out}" if args.out else ""), file=sys.stderr)
    return 1 if result.unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
