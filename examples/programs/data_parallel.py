"""Single-process nn.DataParallel over every visible GPU, with an optimizer.

    python data_parallel.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
STEPS = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 48)
        self.bn = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.bn(self.fc1(x))))


def main():
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    print(f"Let's use {torch.cuda.device_count()} GPUs!")

    torch.manual_seed(0)
    model = Model()
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)

    g = torch.Generator().manual_seed(3)
    for step in range(STEPS):
        x = torch.randn(BATCH, 12, generator=g).to(device)
        y = torch.randn(BATCH, 4, generator=g).to(device)
        optimizer.zero_grad()
        out = model(x)
        loss = F.smooth_l1_loss(out, y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)

    total = sum(p.detach().sum() for p in model.parameters())
    print(f"final {total.item():.8e}")


if __name__ == "__main__":
    main()
