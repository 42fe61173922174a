"""What NCCL does when two ranks both `send` before they `recv` (issue 28): run under
`torchrun --nproc-per-node 2` on 2 GPUs. For each message size, both ranks send to each other, then
receive; a watchdog thread reports a hang after --hang-after seconds. Prints one JSON line per size
on rank 0: completed or hung, and the time taken."""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 1024, 65536, 1 << 20, 4 << 20, 64 << 20])
    parser.add_argument("--hang-after", type=float, default=20.0)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    peer = 1 - rank
    for size in args.sizes:  # elements of float32
        dist.barrier()
        done = threading.Event()
        out = torch.empty(size, device="cuda")
        start = time.perf_counter()

        def exchange() -> None:
            dist.send(torch.full((size,), float(rank), device="cuda"), peer)
            dist.recv(out, peer)
            torch.cuda.synchronize()
            done.set()

        worker = threading.Thread(target=exchange, daemon=True)
        worker.start()
        completed = done.wait(args.hang_after)
        result = {"elements": size, "bytes": size * 4, "completed": completed,
                  "seconds": round(time.perf_counter() - start, 4),
                  "received_ok": bool(completed and torch.all(out == peer).item()),
                  "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
        if rank == 0:
            print(json.dumps(result), flush=True)
        if not completed:  # the communicator is stuck in a kernel: nothing after this can run
            sys.stdout.flush()
            os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
