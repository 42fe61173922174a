"""Model parallelism by hand: the first half of the model on cuda:0, the second on cuda:1, the
activation moved between them; one optimizer over both halves.

    python model_parallel.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

BATCH = 16
STEPS = 4


class ToyMpModel(nn.Module):
    def __init__(self, dev0, dev1):
        super().__init__()
        self.dev0 = dev0
        self.dev1 = dev1
        self.net1 = torch.nn.Linear(10, 64).to(dev0)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(64, 5).to(dev1)

    def forward(self, x):
        x = x.to(self.dev0)
        x = self.relu(self.net1(x))
        x = x.to(self.dev1)
        return self.net2(x)


def main():
    assert torch.cuda.device_count() >= 2, "needs 2 GPUs"
    torch.manual_seed(0)
    model = ToyMpModel("cuda:0", "cuda:1")
    loss_fn = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(5)
    for step in range(STEPS):
        x = torch.randn(BATCH, 10, generator=g)
        labels = torch.randn(BATCH, 5, generator=g).to("cuda:1")
        optimizer.zero_grad()
        outputs = model(x)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)

    total = model.net1.weight.sum() + model.net1.bias.sum()
    total = total.to("cuda:1") + model.net2.weight.sum() + model.net2.bias.sum()
    print(f"final {total.item():.8e}")


if __name__ == "__main__":
    main()
