# timm/torchvision-style: mp.spawn, SyncBatchNorm, channels_last, fp16 autocast + GradScaler, EMA with _foreach,
# cudnn.benchmark, cuda Events timing, DataLoader(num_workers=2, pin_memory), DistributedSampler, ZeroRedundancyOptimizer
import os, copy, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist, torch.multiprocessing as mp
from torch.utils.data import TensorDataset, DataLoader, DistributedSampler
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

def net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.SiLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))

class EMA:
    def __init__(self, model, decay=0.9):
        self.m = copy.deepcopy(model).eval(); self.decay = decay
        for p in self.m.parameters(): p.requires_grad_(False)
    @torch.no_grad()
    def update(self, model):
        e = [v for v in self.m.state_dict().values() if v.dtype.is_floating_point]
        s = [v for v in model.state_dict().values() if v.dtype.is_floating_point]
        torch._foreach_mul_(e, self.decay); torch._foreach_add_(e, s, alpha=1 - self.decay)

def worker(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank); dev = torch.device("cuda", rank)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(net()).to(dev, memory_format=torch.channels_last)
    ema = EMA(model)
    model = DDP(model, device_ids=[rank], broadcast_buffers=False)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=8)
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 10, (64,), generator=g))
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
    dl = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, pin_memory=True, persistent_workers=True, drop_last=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for epoch in range(2):
        sampler.set_epoch(epoch); start.record()
        for x, y in dl:
            x = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last); y = y.to(dev, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True); scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); sched.step()
            ema.update(model.module)
        end.record(); torch.cuda.synchronize()
        t = torch.tensor([loss.item()], device=dev); dist.all_reduce(t); t /= world
        if rank == 0: print(f"epoch {epoch} loss {t.item():.5f} ms {start.elapsed_time(end):.1f} scale {scaler.get_scale()}")
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "ema": ema.m.state_dict(), "opt": opt.state_dict()}, "/tmp/public_style_timm.pt")
        sd = torch.load("/tmp/public_style_timm.pt", map_location="cpu", weights_only=True)
        ema.m.eval(); 
        with torch.no_grad(): print("ema out", ema.m(torch.ones(1, 3, 16, 16, device=dev).contiguous(memory_format=torch.channels_last)).float().sum().item())
        print("saved keys", sorted(sd), sd["model"]["0.weight"].device)
    dist.destroy_process_group()

if __name__ == "__main__":
    n = torch.cuda.device_count(); mp.spawn(worker, args=(n,), nprocs=n, join=True)
