"""What NCCL does when two ranks both `send` before they `recv` (issue 28): run under
`torchrun --nproc-per-node 2` on 2 GPUs, once per message size (`--elements N`). Both ranks send to
each other, then receive. A watchdog thread prints `hung` and ends the process when the exchange has
not finished after --hang-after seconds; otherwise rank 0 prints `completed`. One JSON line on rank 0."""
from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, required=True, help="float32 elements per message")
    parser.add_argument("--hang-after", type=float, default=20.0)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    peer = 1 - rank
    facts = {"elements": args.elements, "bytes": args.elements * 4, "torch": torch.__version__,
             "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    warm = torch.ones(1, device="cuda")
    dist.all_reduce(warm)  # communicators exist before the probe
    torch.cuda.synchronize()
    start = time.perf_counter()

    def watchdog() -> None:
        time.sleep(args.hang_after)
        if rank == 0:
            print(json.dumps({**facts, "outcome": "hung", "seconds": args.hang_after}), flush=True)
        os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    out = torch.empty(args.elements, device="cuda")
    dist.send(torch.full((args.elements,), float(rank), device="cuda"), peer)
    dist.recv(out, peer)
    torch.cuda.synchronize()
    if rank == 0:
        print(json.dumps({**facts, "outcome": "completed", "seconds": round(time.perf_counter() - start, 4),
                          "received_ok": bool(torch.all(out == peer).item())}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
