# nanoGPT-style trainer: torchrun, DDP, bf16 autocast ctx, fused AdamW, compile, memmap data, grad accumulation
import os, math, time, inspect
from contextlib import nullcontext
import numpy as np
import torch, torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group

ATTN_DROPOUT = float(os.environ.get("ATTN_DROPOUT", "0.1"))  # flash attention's own dropout mask is not simulated bit for bit

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.ln1 = nn.LayerNorm(d); s.attn = nn.Linear(d, 3*d); s.proj = nn.Linear(d, d); s.h = h
        s.ln2 = nn.LayerNorm(d); s.mlp = nn.Sequential(nn.Linear(d, 4*d), nn.GELU(), nn.Linear(4*d, d), nn.Dropout(0.1))
    def forward(s, x):
        B, T, C = x.size()
        q, k, v = s.attn(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=ATTN_DROPOUT if s.training else 0, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + s.mlp(s.ln2(x))

class GPT(nn.Module):
    def __init__(s, V=128, T=32, d=64, h=4, L=2):
        super().__init__(); s.wte = nn.Embedding(V, d); s.wpe = nn.Embedding(T, d)
        s.blocks = nn.ModuleList(Block(d, h) for _ in range(L)); s.ln = nn.LayerNorm(d); s.head = nn.Linear(d, V, bias=False)
        s.wte.weight = s.head.weight
        s.apply(s._init)
        for pn, p in s.named_parameters():
            if pn.endswith('proj.weight'): torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * L))
    def _init(s, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None: torch.nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding): torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
    def forward(s, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = s.wte(idx) + s.wpe(pos)
        for b in s.blocks: x = b(x)
        logits = s.head(s.ln(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1) if targets is not None else None
        return logits, loss
    def configure_optimizers(s, wd, lr, betas, device_type):
        params = [p for p in s.parameters() if p.requires_grad]
        groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': wd}, {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
        fused = 'fused' in inspect.signature(torch.optim.AdamW).parameters and device_type == 'cuda'
        return torch.optim.AdamW(groups, lr=lr, betas=betas, **(dict(fused=True) if fused else dict()))
    @torch.no_grad()
    def generate(s, idx, n, temperature=1.0, top_k=None):
        for _ in range(n):
            logits, _ = s(idx[:, -32:]); logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1))); logits[logits < v[:, [-1]]] = -float('Inf')
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx

ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    init_process_group(backend='nccl'); rank = int(os.environ['RANK']); local = int(os.environ['LOCAL_RANK']); world = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{local}'; torch.cuda.set_device(device); master = rank == 0
else:
    rank, world, master, device = 0, 1, True, 'cuda'
torch.manual_seed(1337 + rank)
torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
data = np.memmap('/tmp/public_style_train.bin', dtype=np.uint16, mode='w+', shape=(10000,)) if master else None
if master: data[:] = np.random.RandomState(0).randint(0, 128, size=10000); data.flush()
if ddp: torch.distributed.barrier()
def get_batch():
    d = np.memmap('/tmp/public_style_train.bin', dtype=np.uint16, mode='r')
    ix = torch.randint(len(d) - 32, (8,))
    x = torch.stack([torch.from_numpy((d[i:i+32]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((d[i+1:i+1+32]).astype(np.int64)) for i in ix])
    return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
model = GPT().to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), 'cuda')
if os.environ.get("COMPILE", "1") == "1": model = torch.compile(model)
if ddp: model = DDP(model, device_ids=[local])
raw = model.module if ddp else model
accum = 2
X, Y = get_batch(); t0 = time.time()
for it in range(6):
    lr = 6e-4 * min(1.0, (it + 1) / 3)
    for g in opt.param_groups: g['lr'] = lr
    for micro in range(accum):
        if ddp: model.require_backward_grad_sync = (micro == accum - 1)
        with ctx:
            logits, loss = model(X, Y); loss = loss / accum
        X, Y = get_batch()
        scaler.scale(loss).backward()
    scaler.unscale_(opt); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if master: print(f"iter {it}: loss {loss.item()*accum:.4f}, time {(time.time()-t0)*1000:.0f}ms, mem {torch.cuda.max_memory_allocated()/2**20:.1f} MiB")
if master:
    raw.eval()
    out = raw.generate(torch.zeros((1, 1), dtype=torch.long, device=device), 10, top_k=20)
    print("sample", out.tolist())
    torch.save({'model': raw.state_dict(), 'optimizer': opt.state_dict(), 'iter_num': 6}, '/tmp/public_style_ckpt.pt')
    ck = torch.load('/tmp/public_style_ckpt.pt', map_location=device)
    raw.load_state_dict(ck['model']); print("reloaded", ck['iter_num'])
if ddp: destroy_process_group()
