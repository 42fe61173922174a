# HF-accelerate-ish FSDP1: auto-wrap by transformer block, bf16 MixedPrecision, SHARD_GRAD_OP, activation checkpointing,
# full state dict offloaded to rank 0, sharded optimizer state, cosine schedule, memory_summary, a side stream prefetch
import functools, os, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy, StateDictType, FullStateDictConfig, BackwardPrefetch
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl

class Layer(nn.Module):
    def __init__(s, d=64):
        super().__init__(); s.attn = nn.MultiheadAttention(d, 4, batch_first=True); s.ff = nn.Sequential(nn.Linear(d, 256), nn.GELU(approximate="tanh"), nn.Linear(256, d)); s.n1 = nn.LayerNorm(d); s.n2 = nn.LayerNorm(d)
    def forward(s, x):
        h = s.n1(x); x = x + s.attn(h, h, h, need_weights=False)[0]; return x + s.ff(s.n2(x))
class Model(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(100, 64); s.layers = nn.ModuleList(Layer() for _ in range(3)); s.out = nn.Linear(64, 100)
    def forward(s, x):
        h = s.emb(x)
        for l in s.layers: h = l(h)
        return s.out(h)

def main():
    dist.init_process_group("nccl"); rank = dist.get_rank(); local = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local)
    torch.manual_seed(42)
    model = Model()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Layer})
    model = FSDP(model, auto_wrap_policy=policy, device_id=torch.cuda.current_device(), sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
                 mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16),
                 backward_prefetch=BackwardPrefetch.BACKWARD_PRE, limit_all_gathers=True, use_orig_params=True, sync_module_states=True)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT), check_fn=lambda m: isinstance(m, Layer))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
    g = torch.Generator().manual_seed(rank)
    side = torch.cuda.Stream()
    batches = [torch.randint(0, 100, (4, 16), generator=g) for _ in range(5)]
    with torch.cuda.stream(side):
        nxt = batches[0].pin_memory().cuda(non_blocking=True)
    for step in range(5):
        torch.cuda.current_stream().wait_stream(side); x = nxt; x.record_stream(torch.cuda.current_stream())
        if step + 1 < 5:
            with torch.cuda.stream(side): nxt = batches[step + 1].pin_memory().cuda(non_blocking=True)
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 100).float(), x[:, 1:].reshape(-1))
        loss.backward(); gn = model.clip_grad_norm_(1.0); opt.step(); sched.step(); opt.zero_grad()
        l = loss.detach().clone(); dist.all_reduce(l, op=dist.ReduceOp.AVG)
        if rank == 0: print(f"step {step} loss {l.item():.6f} gnorm {gn.item():.6f} lr {sched.get_last_lr()[0]:.6f}")
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        sd = model.state_dict()
    osd = FSDP.optim_state_dict(model, opt)
    if rank == 0:
        print("keys", len(sd), next(iter(sd.values())).device, sum(v.float().sum().item() for v in sd.values()))
        print("optim state entries", len(osd["state"]))
        print("peak MiB", round(torch.cuda.max_memory_allocated() / 2**20, 1), "summary lines", len(torch.cuda.memory_summary().splitlines()))
    dist.destroy_process_group()
if __name__ == "__main__": main()
