# Inference-server style on 2 GPUs (one model replica per rank): KV cache sized from mem_get_info and
# get_device_properties, filled with index_copy_, a side stream with priority for host transfers, pinned
# host buffers and non-blocking copies fenced by Events, per-request cuda Generators for sampling,
# inference_mode, results gathered with gather_object
import os, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist

class TinyLM(nn.Module):
    def __init__(s, V=64, d=32):
        super().__init__(); s.emb = nn.Embedding(V, d); s.qkv = nn.Linear(d, 3 * d); s.o = nn.Linear(d, d); s.head = nn.Linear(d, V)
    def forward(s, tok, pos, kc, vc):
        x = s.emb(tok); q, k, v = s.qkv(x).chunk(3, -1)
        kc.index_copy_(1, pos, k); vc.index_copy_(1, pos, v)
        n = int(pos[-1]) + 1
        att = F.scaled_dot_product_attention(q.unsqueeze(1), kc[:, :n].unsqueeze(1), vc[:, :n].unsqueeze(1),
                                             is_causal=False).squeeze(1)
        return s.head(x + s.o(att))

def main():
    dist.init_process_group("nccl"); rank = dist.get_rank(); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda"); torch.manual_seed(3)
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(dev)
    assert total == props.total_memory and 0 < free <= total
    model = TinyLM().to(dev).half().eval()
    max_len, batch = 24, 3
    kc = torch.zeros(batch, max_len, 32, device=dev, dtype=torch.half); vc = torch.zeros_like(kc)
    low, high = torch.cuda.Stream.priority_range()
    copy_stream = torch.cuda.Stream(priority=high)
    host_out = torch.empty(batch, max_len, dtype=torch.long).pin_memory()
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) + rank
    gens = [torch.Generator(device="cuda").manual_seed(100 * rank + i) for i in range(batch)]
    tokens = prompts.to(dev, non_blocking=True)
    out = torch.zeros(batch, max_len, dtype=torch.long, device=dev); out[:, :3] = tokens
    with torch.inference_mode():
        for t in range(3):
            logits = model(tokens[:, t:t + 1], torch.tensor([t], device=dev), kc, vc)
        for t in range(3, max_len):
            probs = F.softmax(logits[:, -1].float() / 0.8, -1)
            nxt = torch.stack([torch.multinomial(probs[i], 1, generator=gens[i]) for i in range(batch)])
            out[:, t:t + 1] = nxt
            logits = model(nxt, torch.tensor([t], device=dev), kc, vc)
        done = torch.cuda.Event()
        copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(copy_stream):
            host_out.copy_(out, non_blocking=True); done.record()
        done.synchronize(); assert done.query()
    gathered = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(host_out.tolist(), gathered, dst=0)
    if rank == 0:
        for r, seqs in enumerate(gathered):
            for s in seqs: print(f"sample rank{r}", s)
        print(f"eval kv {kc.float().abs().sum().item():.3f} peak MiB {torch.cuda.max_memory_allocated() / 2**20:.2f} priorities {low} {high}")
    dist.destroy_process_group()
if __name__ == "__main__": main()
