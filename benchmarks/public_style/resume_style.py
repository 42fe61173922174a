# A research-repo trainer with exact resume: deterministic settings, per-rank seeds, RNG states of every
# generator saved in the checkpoint (torch.cuda.get_rng_state_all, numpy, random), DDP with
# find_unused_parameters and non-reentrant gradient checkpointing, a run cut after 3 steps and resumed to 6;
# the resumed losses must equal the uninterrupted run's.
import os, random, sys, numpy as np, torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True); torch.backends.cudnn.deterministic = True; torch.backends.cudnn.benchmark = False

class Net(nn.Module):
    def __init__(self):
        super().__init__(); self.a = nn.Linear(16, 64); self.drop = nn.Dropout(0.3); self.b = nn.Linear(64, 16); self.unused = nn.Linear(4, 4)
    def forward(self, x):
        h = checkpoint(lambda t: self.drop(torch.relu(self.a(t))), x, use_reentrant=False)
        return self.b(h)

def seed_all(seed):
    random.seed(seed); np.random.seed(seed); torch.manual_seed(seed); torch.cuda.manual_seed_all(seed)

def run(rank, steps, resume_from, save_to):
    model = Net().cuda(); ddp = DDP(model, device_ids=[rank], find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if resume_from:
        ck = torch.load(resume_from, map_location=f"cuda:{rank}", weights_only=False)
        model.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"]); start = ck["step"]
        torch.cuda.set_rng_state_all([s.cpu() for s in ck["cuda_rng"]]); torch.set_rng_state(ck["cpu_rng"].cpu())
        np.random.set_state(ck["np_rng"]); random.setstate(ck["py_rng"])
    losses = []
    for step in range(start, steps):
        x = torch.from_numpy(np.random.randn(8, 16).astype(np.float32)).cuda() + random.random()
        loss = ddp(x.requires_grad_()).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        l = loss.detach(); dist.all_reduce(l); losses.append(round(l.item() / dist.get_world_size(), 7))
    if save_to:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": steps, "cuda_rng": torch.cuda.get_rng_state_all(),
                    "cpu_rng": torch.get_rng_state(), "np_rng": np.random.get_state(), "py_rng": random.getstate()}, save_to)
    return losses

def main():
    dist.init_process_group("nccl"); rank = dist.get_rank(); torch.cuda.set_device(rank)
    path = f"/tmp/resume_style_{os.environ.get('MASTER_PORT', '0')}_rank{rank}.pt"
    seed_all(1234)   # each rank saves and resumes its own generators
    full = run(rank, 6, None, None)
    seed_all(1234)
    first = run(rank, 3, None, path); dist.barrier()
    rest = run(rank, 6, path, None)
    if rank == 0:
        print("full   ", full); print("resumed", first + rest)
        print("resume equal:", full == first + rest)
    dist.destroy_process_group()
if __name__ == "__main__": main()
