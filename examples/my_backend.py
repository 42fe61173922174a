"""A torch.distributed backend registered under its own name, "mine": the form the conformance suite
takes a backend of yours in (`--backend=mine --backend-module=examples.my_backend`).

Importing the module registers the backend; every rank imports it before init_process_group. Here the
process group is gloo's, so the suite has something real to check; yours would construct your own
(a C++ extension's ProcessGroup, or a Python `dist.ProcessGroup` subclass).

It claims gloo's support table on the command line, `--backend-profile=gloo`: what gloo supports must
work, what gloo refuses must be refused the same way, and where gloo itself is wrong (its confirmed
defects, conformance/findings.py) the failures are reported as gloo's findings, not as this backend's.
A module may claim its table itself instead, `conformance.backends.hold_to(NAME, "gloo")`, or pass its
own table (a `conformance.backends.Profile`). Without a table the suite probes every combination: one
that raises the same error on every rank is reported `unsup`, anything that works is checked against
the oracle. docs/conformance-suite.md, "Your backend's table".
"""
from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

NAME = "mine"


def _create(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> dist.ProcessGroup:
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


if NAME not in dist.Backend.backend_list:  # a second import (the suite and a rank) registers once
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])
