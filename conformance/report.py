"""The capability report: backend x collective x dtype x reduce op, what happened in each cell.

Each example adds one outcome to its cell (and layout). A cell's status is its worst outcome.
Rendered as a terminal summary, Markdown and JSON; xdist workers send their records to the
controller, which merges them (see plugin.py).
"""
from __future__ import annotations

import json
import platform
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SEVERITY = ["broken", "FAIL", "should-work", "known", "pass", "rejected", "unsupported"]
SYMBOL = {"pass": "ok", "rejected": "rej", "FAIL": "FAIL", "should-work": "SHOULD", "unsupported": "unsup",
          "broken": "BROKEN", "known": "known"}


# Families of cells by name (docs/modern-collectives.md); everything else is the c10d Python API.
FAMILY_PREFIXES = (("funcol.", "functional"), ("coalesced.", "coalesced"), ("coalesced.batch_isend_irecv", "coalesced"),
                   ("dtensor.", "dtensor"), ("train.", "training"))


def family_of(collective: str) -> str:
    """The family a cell's collective belongs to: functional, coalesced, dtensor, training or c10d."""
    return next((fam for prefix, fam in FAMILY_PREFIXES if collective.startswith(prefix)), "c10d")


class CapabilityReport:
    """Outcome counts per (collective, dtype, op, layout), plus one detail line per failing or rejected cell."""

    def __init__(self, backend: str, table: str):
        self.backend = backend
        self.table = table
        self.counts: dict[tuple, Counter] = defaultdict(Counter)
        self.details: dict[tuple, dict[str, str]] = defaultdict(dict)
        self.environment: dict[str, Any] = {}   # where the ranks ran (realgpu.environment), once known

    def record(self, collective: str, dtype: str | None, op: str | None, layout: str, outcome: str,
               detail: str = "") -> None:
        key = (collective, dtype or "-", op or "-", layout)
        self.counts[key][outcome] += 1
        if detail and outcome not in self.details[key]:
            self.details[key][outcome] = detail.splitlines()[0][:300]

    # ------------------------------------------------------------------ transport (xdist)
    def to_records(self) -> list[dict[str, Any]]:
        return [{"collective": k[0], "dtype": k[1], "op": k[2], "layout": k[3], "counts": dict(c),
                 "details": self.details.get(k, {})} for k, c in sorted(self.counts.items())]

    def to_transport(self) -> str:
        """What an xdist worker sends the controller: its records and where its ranks ran."""
        return json.dumps({"records": self.to_records(), "environment": self.environment})

    def merge_transport(self, text: str) -> None:
        sent = json.loads(text)
        self.merge_records(sent["records"])
        self.environment = self.environment or sent["environment"]

    def merge_records(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            key = (rec["collective"], rec["dtype"], rec["op"], rec["layout"])
            self.counts[key].update(rec["counts"])
            for outcome, text in rec["details"].items():
                self.details[key].setdefault(outcome, text)

    # ------------------------------------------------------------------ views
    def cells(self) -> dict[tuple, dict[str, Counter]]:
        """(collective, dtype, op) -> layout -> outcome counts."""
        out: dict[tuple, dict[str, Counter]] = defaultdict(dict)
        for (coll, dtype, op, layout), c in self.counts.items():
            out[(coll, dtype, op)][layout] = c
        return out

    @staticmethod
    def status(counter: Counter) -> str:
        return min(counter, key=SEVERITY.index) if counter else "-"

    def cell_status(self, per_layout: dict[str, Counter]) -> str:
        total: Counter = Counter()
        for c in per_layout.values():
            total.update(c)
        return self.status(total)

    def totals(self) -> Counter:
        total: Counter = Counter()
        for c in self.counts.values():
            total.update(c)
        return total

    def failing_cells(self) -> list[tuple[tuple, str, str]]:
        rows = []
        for key, c in sorted(self.counts.items()):
            for outcome in ("broken", "FAIL", "should-work"):
                if c[outcome]:
                    rows.append((key, outcome, self.details[key].get(outcome, "")))
        return rows

    def metadata(self) -> dict[str, Any]:
        import torch

        return {"backend": self.backend, "held_to_table": self.table, "torch": torch.__version__,
                "python": platform.python_version(), "machine": platform.machine(),
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "ranks": self.environment}

    def where(self) -> str:
        """The ranks' versions and device in one line (torch, CUDA, NCCL, driver, device), or why not known."""
        if not self.environment:
            return "not known (no collective ran)"
        from realgpu.environment import environment_line

        return environment_line(self.environment)

    def to_json(self) -> str:
        return json.dumps({"metadata": self.metadata(), "totals": dict(self.totals()),
                           "cells": self.to_records()}, indent=1)

    def to_markdown(self) -> str:
        meta = self.metadata()
        lines = [f"# Capability report: backend `{self.backend}`", "",
                 f"Held to: {self.table}. torch {meta['torch']}, Python {meta['python']}, {meta['date']}.", "",
                 f"Ranks ran on: {self.where()}.", "",
                 "Cells: `ok` pass, `rej` rejected as the table says, `FAIL` wrong result or wrong error,",
                 "`SHOULD` raised although it must work, `unsup` unsupported (probed backend), `BROKEN` crash/hang,",
                 "`known` a confirmed defect listed in conformance/findings.py (reported as XFAIL).",
                 "A cell lists per layout where the layouts differ (c contiguous, t transposed, s strided).", "",
                 "Totals (examples): " + ", ".join(f"{k} {v}" for k, v in sorted(self.totals().items())), ""]
        by_coll: dict[str, dict[tuple, dict[str, Counter]]] = defaultdict(dict)
        for (coll, dtype, op), per_layout in self.cells().items():
            by_coll[coll][(dtype, op)] = per_layout
        for coll in sorted(by_coll):
            cells = by_coll[coll]
            ops = sorted({op for _, op in cells})
            dtypes = sorted({d for d, _ in cells})
            lines += [f"## {coll}", "", "| dtype | " + " | ".join(ops) + " |",
                      "|---" * (len(ops) + 1) + "|"]
            for d in dtypes:
                row = [self._render_cell(cells.get((d, op), {})) for op in ops]
                lines.append(f"| {d} | " + " | ".join(row) + " |")
            lines.append("")
        fails = self.failing_cells()
        if fails:
            lines += ["## Failures", ""]
            lines += [f"- {'/'.join(k)}: **{o}** {d}" for k, o, d in fails]
            lines.append("")
        rejects = sorted({(k[0], v) for k, c in self.details.items() for o, v in c.items() if o == "rejected"})
        if rejects:
            lines += ["## Errors seen for rejected cells", ""]
            lines += [f"- {coll}: {text}" for coll, text in rejects[:200]]
        return "\n".join(lines) + "\n"

    def _render_cell(self, per_layout: dict[str, Counter]) -> str:
        if not per_layout:
            return ""
        statuses = {layout: self.status(c) for layout, c in per_layout.items()}
        if len(set(statuses.values())) == 1:
            return SYMBOL[next(iter(statuses.values()))]
        return " ".join(f"{layout[0]}:{SYMBOL[s]}" for layout, s in sorted(statuses.items()))

    def terminal_lines(self) -> list[str]:
        totals = self.totals()
        cells = self.cells()
        by_status = Counter(self.cell_status(v) for v in cells.values())
        lines = [f"backend {self.backend} (held to {self.table}): {len(cells)} cells, "
                 + ", ".join(f"{SYMBOL[s]} {by_status[s]}" for s in SEVERITY if by_status[s]),
                 "examples: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items()))]
        per_coll: dict[str, Counter] = defaultdict(Counter)
        for (coll, _, _), per_layout in cells.items():
            per_coll[coll][self.cell_status(per_layout)] += 1
        per_family: dict[str, Counter] = defaultdict(Counter)
        for coll, c in per_coll.items():
            per_family[family_of(coll)].update(c)
        if len(per_family) > 1:
            lines.append("families: " + "; ".join(
                f"{fam} " + " ".join(f"{SYMBOL[s]}={c[s]}" for s in SEVERITY if c[s]) for fam, c in sorted(per_family.items())))
        width = max((len(c) for c in per_coll), default=10)
        for coll in sorted(per_coll):
            c = per_coll[coll]
            lines.append(f"  {coll:<{width}}  " + "  ".join(f"{SYMBOL[s]}={c[s]}" for s in SEVERITY if c[s]))
        for key, outcome, detail in self.failing_cells()[:30]:
            lines.append(f"  {outcome}: {'/'.join(key)}: {detail}")
        return lines

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        md = directory / f"capability-{self.backend}.md"
        js = directory / f"capability-{self.backend}.json"
        md.write_text(self.to_markdown())
        js.write_text(self.to_json())
        return [md, js]
