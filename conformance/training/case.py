"""What one drawn training example holds, and the batch split rule the ranks and the reference share.

Split rule (the same as torch.tensor_split(batch, world)[rank] and numpy.array_split): a batch of N
samples over W ranks gives the first N % W ranks N // W + 1 samples and the rest N // W. A rank's
micro-batches split its shard by the same rule.

Loss weighting. Every rank computes the mean-squared error of its micro-batch and multiplies it by
a factor c; DDP sums the gradients over ranks and divides by W. So sample i, in a micro-batch of m
samples on any rank, enters the synchronised gradient with weight c / (W * m * out) on its squared
error ||o_i - y_i||^2:
  "global_mean":  c = m * W / N   -> weight 1 / (N * out): exactly the gradient of the whole-batch mean,
                                     for every N, divisible by W or not.
  "naive_mean":   c = 1 (one micro-batch) -> weight 1 / (W * n_r * out): equal to the whole-batch mean
                                     only when every shard has the same size n_r = N / W.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.training.model import ModelSpec

WEIGHTINGS = ("global_mean", "naive_mean")


@dataclass(frozen=True)
class OptimizerSpec:
    """torch.optim.SGD (momentum, nesterov, weight_decay) or torch.optim.Adam (betas, eps, weight_decay)."""

    name: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def describe(self) -> str:
        if self.name == "sgd":
            return (f"SGD(lr={self.lr}, momentum={self.momentum}, nesterov={self.nesterov}, "
                    f"weight_decay={self.weight_decay})")
        return f"Adam(lr={self.lr}, betas={self.betas}, eps={self.eps}, weight_decay={self.weight_decay})"


@dataclass(frozen=True)
class DDPOptions:
    """Keyword arguments of DistributedDataParallel the properties vary (None: DDP's default)."""

    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    find_unused_parameters: bool = False
    static_graph: bool = False

    def kwargs(self) -> dict:
        kw = {"gradient_as_bucket_view": self.gradient_as_bucket_view,
              "find_unused_parameters": self.find_unused_parameters, "static_graph": self.static_graph}
        if self.bucket_cap_mb is not None:
            kw["bucket_cap_mb"] = self.bucket_cap_mb
        return kw


@dataclass
class TrainingCase:
    """One example: model, initial state (rank 0's), k batches, optimizer, DDP options, split and weighting.

    x: (steps, N, in) and y: (steps, N, out), one whole batch per optimizer step, in `dtype`.
    perturb: ranks r > 0 start from state + 0.5 r (parameters and buffers); DDP must replace
      them by rank 0's at construction and broadcast the buffers at every forward.
    branch_ranks: the ranks whose forward adds the model's branch (the rest leave it unused).
    micro_batches: > 1 accumulates that many micro-batches per step, all but the last under no_sync().
    """

    prop: str
    world_size: int
    dtype: str
    model: ModelSpec
    state: dict[str, np.ndarray]
    x: np.ndarray
    y: np.ndarray
    optimizer: OptimizerSpec
    ddp: DDPOptions = field(default_factory=DDPOptions)
    weighting: str = "global_mean"
    micro_batches: int = 1
    branch_ranks: tuple[int, ...] = ()
    perturb: bool = False
    seed: int = 0

    @property
    def steps(self) -> int:
        return self.x.shape[0]

    @property
    def batch(self) -> int:
        return self.x.shape[1]

    def shard_sizes(self) -> list[int]:
        return split_sizes(self.batch, self.world_size)

    def summary(self) -> str:
        return (f"{self.prop}(world={self.world_size}, dtype={self.dtype}, model={self.model.describe()}, "
                f"batch={self.batch} shards={self.shard_sizes()}, steps={self.steps}, "
                f"{self.optimizer.describe()}, ddp={self.ddp.kwargs()}, weighting={self.weighting}, "
                f"micro_batches={self.micro_batches}, branch_ranks={list(self.branch_ranks)}, "
                f"perturb={self.perturb}, seed={self.seed})")


def split_sizes(n: int, parts: int) -> list[int]:
    """Sizes of torch.tensor_split(range(n), parts): the first n % parts get one more."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def split_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """(start, stop) of each part under split_sizes."""
    stops = np.cumsum([0] + split_sizes(n, parts))
    return [(int(a), int(b)) for a, b in zip(stops, stops[1:])]


def local_weights(case: TrainingCase) -> list[list[tuple[int, int, float]]]:
    """Per rank, per micro-batch: (start, stop, weight) in the whole batch, weight on ||o_i - y_i||^2.

    The weight is the rank's own (before DDP averages over ranks): c / (m * out), see the module
    docstring; the synchronised gradient weights each sample by this divided by the world size.
    """
    n, world, out = case.batch, case.world_size, case.model.widths[-1]
    plan = []
    for start, stop in split_bounds(n, world):
        micro = []
        for a, b in split_bounds(stop - start, case.micro_batches):
            m = b - a
            micro.append((start + a, start + b, loss_factor(case.weighting, m, world, n) / (m * out)))
        plan.append(micro)
    return plan


def loss_factor(weighting: str, micro_size: int, world_size: int, batch: int) -> float:
    """The factor c a rank multiplies its micro-batch's mean loss by (module docstring)."""
    if weighting == "global_mean":
        return micro_size * world_size / batch
    if weighting == "naive_mean":
        return 1.0
    raise ValueError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")
