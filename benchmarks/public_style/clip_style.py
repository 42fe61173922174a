# CLIP-style contrastive training (open_clip-like): features gathered from every rank with gradients
# (torch.distributed.nn.all_gather), a learned logit scale, labels offset by rank, fp16 autocast +
# GradScaler, cosine LR, new_group subgroups for an eval all_reduce, all_gather_into_tensor of embeddings
import math, os, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
import torch.distributed.nn

class Tower(nn.Module):
    def __init__(self, d_in, d):
        super().__init__(); self.net = nn.Sequential(nn.Linear(d_in, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, d))
    def forward(self, x): return F.normalize(self.net(x), dim=-1)

def main():
    dist.init_process_group("nccl"); rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"])); dev = torch.device("cuda")
    torch.manual_seed(7)
    img, txt = Tower(24, 16).to(dev), Tower(12, 16).to(dev)
    logit_scale = nn.Parameter(torch.ones([], device=dev) * math.log(1 / 0.07))
    params = list(img.parameters()) + list(txt.parameters()) + [logit_scale]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / 6)))
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    for step in range(6):
        xi = torch.randn(8, 24, device=dev, generator=g); xt = xi[:, :12] * 0.5 + torch.randn(8, 12, device=dev, generator=g) * 0.1
        with torch.autocast("cuda", dtype=torch.float16):
            fi, ft = img(xi), txt(xt)
            all_i = torch.cat(torch.distributed.nn.all_gather(fi)); all_t = torch.cat(torch.distributed.nn.all_gather(ft))
            scale = logit_scale.exp().clamp(max=100)
            li, lt = scale * fi @ all_t.T, scale * ft @ all_i.T
            labels = torch.arange(8, device=dev) + rank * 8
            loss = (F.cross_entropy(li.float(), labels) + F.cross_entropy(lt.float(), labels)) / 2
        opt.zero_grad(set_to_none=True); scaler.scale(loss).backward()
        for p in params: dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        scaler.step(opt); scaler.update(); sched.step()
        with torch.no_grad(): logit_scale.clamp_(0, math.log(100))
        l = loss.detach(); dist.all_reduce(l, op=dist.ReduceOp.AVG)
        if rank == 0: print(f"step {step} loss {l.item():.5f} scale {logit_scale.exp().item():.4f} lr {sched.get_last_lr()[0]:.6f}")
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    with torch.inference_mode():
        e = img(torch.linspace(-1, 1, 24 * 4, device=dev).view(4, 24))
        out = torch.empty(world * 4, 16, device=dev); dist.all_gather_into_tensor(out, e.contiguous())
        acc = (out @ out.T).trace()
        if rank % 2 == 0: dist.all_reduce(acc, group=evens)
    if rank == 0: print(f"eval trace {acc.item():.5f} peak MiB {torch.cuda.max_memory_allocated() / 2**20:.2f}")
    dist.destroy_process_group()
if __name__ == "__main__": main()
