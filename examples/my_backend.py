"""A torch.distributed backend registered under its own name, "mine": the form the conformance suite
takes a backend of yours in (`--backend=mine --backend-module=examples.my_backend`).

Importing the module registers the backend; every rank imports it before init_process_group. Here the
process group is gloo's, so the suite has something real to check; yours would construct your own
(a C++ extension's ProcessGroup, or a Python `dist.ProcessGroup` subclass).

`hold_to` names the support table the suite holds it to (gloo's here, since it is gloo; "nccl" for a
backend that must behave as NCCL). Without it the suite probes every combination: one that raises the
same error on every rank is reported `unsup`, anything that works is checked against the oracle (raw
gloo probed that way fails the non-contiguous cells: it writes into a view's gaps).
"""
from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from conformance.backends import hold_to

NAME = "mine"


def _create(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> dist.ProcessGroup:
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


if NAME not in dist.Backend.backend_list:  # a second import (the suite and a rank) registers once
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])
hold_to(NAME, "gloo")
