"""Record CUDA's memory_stats keys and memory_summary for a fixed sequence (compared with the simulation)."""
import json, sys, torch
a = torch.empty(4000, dtype=torch.uint8, device="cuda")
b = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
del a
torch.cuda.empty_cache()
out = {"keys": sorted(torch.cuda.memory_stats()), "stats": dict(torch.cuda.memory_stats()),
       "summary": torch.cuda.memory_summary(), "torch": torch.__version__}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(out["summary"])
