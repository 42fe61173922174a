"""Run under `simgpu run --gpus 2`: torch.save / torch.load keep CUDA's device tags."""
import os
import tempfile

import torch

path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
torch.save({"gpu": torch.arange(6.0).cuda(1), "host": torch.ones(2)}, path)
plain = torch.load(path)
assert plain["gpu"].device == torch.device("cuda:1") and plain["host"].device.type == "cpu", plain
assert plain["gpu"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
for map_location, expected in [("cuda:0", "cuda:0"), ({"cuda:1": "cuda:0"}, "cuda:0"), ("cpu", "cpu"),
                               (torch.device("cuda", 1), "cuda:1"), (lambda s, loc: s.cuda(0), "cuda:0")]:
    loaded = torch.load(path, map_location=map_location)["gpu"]
    assert loaded.device == torch.device(expected), (map_location, loaded.device)
    assert loaded.tolist() == plain["gpu"].tolist()
assert torch.load(path, map_location="cuda:0")["host"].device == torch.device("cuda:0")
before = torch.cuda.memory_allocated(0)
kept = torch.load(path, map_location="cuda:0")
assert torch.cuda.memory_allocated(0) - before == 2 * 512, "loaded storages count on their GPU (512-byte blocks)"
model = torch.nn.Linear(3, 2).cuda()
opt = torch.optim.Adam(model.parameters())
model(torch.ones(1, 3, device="cuda")).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
state = torch.load(path, map_location={"cuda:0": "cuda:1"})
assert all(v.device == torch.device("cuda:1") for v in state["model"].values())
assert state["opt"]["state"][0]["exp_avg"].device == torch.device("cuda:1")
print("OK checkpoints")
