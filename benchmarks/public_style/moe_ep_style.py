# Expert-parallel MoE in the style of public MoE trainers: top-2 gating, token dispatch with all_to_all_single
# (uneven splits learned from a first all_to_all of counts), index_add_ combine, load-balancing aux loss,
# bf16 autocast, torch.distributions for a sampled router jitter, inference_mode eval
import os, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
import torch.distributed.nn.functional as dnnf

class Experts(nn.Module):
    def __init__(self, n_local, d, h):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(n_local, d, h) * d ** -0.5); self.w2 = nn.Parameter(torch.randn(n_local, h, d) * h ** -0.5)
    def forward(self, x, counts):  # x sorted by local expert
        outs, start = [], 0
        for e, c in enumerate(counts.tolist()):
            outs.append(F.silu(x[start:start + c] @ self.w1[e]) @ self.w2[e]); start += c
        return torch.cat(outs) if outs else x

class MoE(nn.Module):
    def __init__(self, d, n_experts, world, k=2):
        super().__init__(); self.router = nn.Linear(d, n_experts, bias=False); self.k = k; self.E = n_experts; self.world = world
        self.experts = Experts(n_experts // world, d, 2 * d)
    def forward(self, x):
        T, d = x.shape
        logits = self.router(x)
        if self.training:
            logits = logits + torch.distributions.Normal(0.0, 0.01).sample(logits.shape).to(logits.device)
        probs = logits.float().softmax(-1); w, idx = probs.topk(self.k, dim=-1); w = w / w.sum(-1, keepdim=True)
        aux = self.E * (F.one_hot(idx[:, 0], self.E).float().mean(0) * probs.mean(0)).sum()
        flat = idx.reshape(-1); order = flat.argsort(stable=True); tok = order // self.k
        send_counts = torch.bincount(flat, minlength=self.E)                     # per global expert
        recv_counts = torch.empty_like(send_counts); dist.all_to_all_single(recv_counts, send_counts)
        per_rank_send = send_counts.view(self.world, -1).sum(1); per_rank_recv = recv_counts.view(self.world, -1).sum(1)
        sent = x[tok]
        recv = dnnf.all_to_all_single(torch.empty(int(per_rank_recv.sum()), d, device=x.device, dtype=x.dtype), sent,
                                      per_rank_recv.tolist(), per_rank_send.tolist())
        # received rows come grouped by source rank, then by local expert: regroup by local expert
        rc = recv_counts.view(self.world, -1)                                    # [src, local expert]
        src_off = torch.cat([rc.new_zeros(1), rc.sum(1).cumsum(0)[:-1]])
        pieces = [recv[src_off[s] + rc[s, :e].sum(): src_off[s] + rc[s, :e + 1].sum()] for e in range(rc.shape[1]) for s in range(self.world)]
        back_order = [(s, e) for e in range(rc.shape[1]) for s in range(self.world)]
        out = self.experts(torch.cat(pieces), rc.sum(0))
        sizes = [int(rc[s, e]) for s, e in back_order]; chunks = list(out.split(sizes))
        by_src = [torch.cat([chunks[i] for i, (s, e) in enumerate(back_order) if s == src] or [out[:0]]) for src in range(self.world)]
        back = torch.cat(by_src); ret = dnnf.all_to_all_single(sent.new_empty(sent.shape, dtype=back.dtype), back, per_rank_send.tolist(), per_rank_recv.tolist())
        y = torch.zeros_like(x).index_add_(0, tok, (ret * w.reshape(-1)[order, None].to(ret.dtype)).to(x.dtype))
        return y, aux

def main():
    dist.init_process_group("nccl"); rank, world = dist.get_rank(), dist.get_world_size(); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda"); torch.manual_seed(0); torch.cuda.manual_seed_all(0)
    emb = nn.Embedding(50, 32).to(dev); moe = MoE(32, 4 * world, world).to(dev); head = nn.Linear(32, 50).to(dev)
    dense = list(emb.parameters()) + list(head.parameters()) + list(moe.router.parameters())
    for p in dense: dist.broadcast(p.data, 0)
    opt = torch.optim.AdamW(list(emb.parameters()) + list(moe.parameters()) + list(head.parameters()), lr=3e-3)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(4):
        x = torch.randint(0, 50, (64,), generator=g).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h, aux = moe(emb(x)); loss = F.cross_entropy(head(h).float(), x) + 0.01 * aux
        opt.zero_grad(); loss.backward()
        for p in dense: dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        opt.step()
        l = loss.detach(); dist.all_reduce(l, op=dist.ReduceOp.AVG)
        if rank == 0: print(f"step {step} loss {l.item():.5f} aux {aux.item():.5f}")
    moe.eval()
    with torch.inference_mode():
        y, _ = moe(emb(torch.arange(50, device=dev)))
        s = y.float().abs().sum(); dist.all_reduce(s)
    if rank == 0: print(f"eval |y| {s.item():.4f} peak MiB {torch.cuda.max_memory_allocated() / 2**20:.2f}")
    dist.destroy_process_group()
if __name__ == "__main__": main()
