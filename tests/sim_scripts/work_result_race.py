"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: a completed work's result() is there for
whoever reads it later, whatever else held its tensors when it completed.

torch's Join (notify_join_context) all-reduces a local tensor `ones` asynchronously and returns the work;
DDP's reducer waits on it in backward and reads its result (getFuture().value()), which must not be empty
(the reducer asserts it is not). Whether `ones` is still held by something other than the work when the
work completes depends on timing, and each way must give the same answer:
  1. the work completes before notify_join_context returns (here: the program polls is_completed()), while
     that function's frame still holds `ones`;
  2. the work completes at the reducer's wait while the transport still holds the finished operation
     (gloo's thread lets go of it a moment after the waiter returns; here it is held until result() is read).
Both emptied the result: the completed work held `ones` weakly because someone else held it then, and that
someone let go before the reader read. Each case below is deterministic; before the fix each failed every
time (the reducer's "INTERNAL ASSERT FAILED ... results.empty()"; case 2 is the intermittent failure of
work_lifetime.py, made certain). Also: a work completed by polling is kept for its reader even when newer
works complete before the reducer reads it (Busy), Python readers get the same answer (a work completed by
polling, or waited by its issuing function, read after that function returned), and a polled work that its
holder then waits for and drops still frees its tensor at once.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import simgpu.backend as backend

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
CASES = os.environ.get("WORK_RACE_CASES", "polled,python,transport").split(",")  # one at a time, to see each fail


def train_under_join(module: nn.Module | None = None) -> None:
    """DDP under Join with uneven inputs; divide_by_initial_world_size=False makes the reducer read the
    forward pass's all-reduce result (the number of ranks still training) in every backward."""
    torch.manual_seed(0)
    model = DDP((module or nn.Linear(1, 1)).cuda(), device_ids=[rank])
    seen = 0
    with Join([model], divide_by_initial_world_size=False):
        for _ in range(3 + rank):
            seen += 1
            model(torch.ones(1, device="cuda")).sum().backward()
    assert seen == 3 + rank
    weights = [torch.zeros(2, device="cuda") for _ in range(world)]
    dist.all_gather(weights, torch.cat([model.module.weight.detach().view(-1), model.module.bias.detach()]))
    assert all(torch.equal(w, weights[0]) for w in weights), weights


# 1. completed before the issuing function returns: the program polls its async collectives
all_reduce = dist.all_reduce


def polled_all_reduce(tensor, *args, **kwargs):
    work = all_reduce(tensor, *args, **kwargs)
    if kwargs.get("async_op"):
        while not work.is_completed():
            pass
    return work


solo = [dist.new_group([r]) for r in range(world)][rank]


class Busy(nn.Linear):
    """Its forward completes a few more works that C++ might hold (a group of its own rank alone, so the
    rank that has joined need not shadow them) after Join's, before the reducer reads Join's in backward:
    a completed work that only simgpu holds is let go of once newer ones completed, unless nobody has
    read it yet."""

    def forward(self, x):
        for _ in range(backend._STRONG_COMPLETED + 1):
            dist.all_reduce(torch.ones(1, device="cuda"), group=solo, async_op=True)
        return super().forward(x)


if "polled" in CASES:
    dist.all_reduce = polled_all_reduce
    train_under_join()
    train_under_join(Busy(1, 1))
    dist.all_reduce = all_reduce


def issue_and_poll() -> dist.Work:
    ones = torch.ones(1, device="cuda")
    work = dist.all_reduce(ones, async_op=True)
    while not work.is_completed():
        pass
    return work


def issue_and_wait() -> dist.Work:
    ones = torch.ones(1, device="cuda")
    work = dist.all_reduce(ones, async_op=True)
    work.wait()
    return work


for issue in (issue_and_poll, issue_and_wait) if "python" in CASES else ():  # the same, read by Python
    result = issue().result()
    assert len(result) == 1 and result[0].item() == world, (issue.__name__, result)

# ...while a polled work that its holder then waits for and drops frees its tensors with it, as on CUDA
if "python" in CASES:
    def settled(before: int) -> int:
        """memory_allocated once gloo's thread has let go of the last operation (see work_lifetime.py)."""
        for _ in range(50):
            if torch.cuda.memory_allocated() == before:
                break
            time.sleep(0.02)
        return torch.cuda.memory_allocated()

    def poll(work: dist.Work) -> None:
        while not work.is_completed():
            pass

    before = torch.cuda.memory_allocated()
    for _ in range(4):
        t = torch.ones(1 << 20, device="cuda")
        work = dist.all_reduce(t, async_op=True)
        poll(work)
        work.wait()
        del t, work
        assert settled(before) == before, (before, torch.cuda.memory_allocated())

# 2. the transport lets go of the finished operation after the waiter returns, before the reader reads
held = []
let_go_of_transport, read_result = backend.SimWork._let_go_of_transport, backend.SimWork.result


def late_let_go(self):
    held.append(self._inner)  # as gloo's worker thread, which still holds its finished work
    let_go_of_transport(self)


def result(self):
    held.clear()  # ...and lets go of it now
    return read_result(self)


if "transport" in CASES:
    backend.SimWork._let_go_of_transport, backend.SimWork.result = late_let_go, result
    train_under_join()
    backend.SimWork._let_go_of_transport, backend.SimWork.result = let_go_of_transport, read_result

dist.destroy_process_group()
if rank == 0:
    print("OK work_result_race")
    sys.stdout.flush()
