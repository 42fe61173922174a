"""Hypothesis draws of TrainingCases, one per property. Small models and few steps: the ci profile
draws 4 examples per cell, each a full DDP training run on every rank.

Sizes, options and the data seed are drawn; the values (initial state, batches) come from a NumPy
generator seeded by the draw, so a failing example is reproduced by its printed seed.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from conformance.training.case import DDPOptions, OptimizerSpec, TrainingCase, split_sizes
from conformance.training.check import GAP_FACTOR, predicted_gap
from conformance.training.model import ACTIVATIONS, ModelSpec, initial_state
from conformance.training.oracle import reference

Draw = Callable[[st.SearchStrategy], Any]
TINY_BUCKET_MB = 1e-6  # below any parameter's size: DDP puts every parameter in its own bucket


def model_specs(draw: Draw, scale_buffer: bool | None = None, branch: bool = False) -> ModelSpec:
    hidden = draw(st.lists(st.integers(1, 8), min_size=0, max_size=2), label="hidden widths")
    widths = (draw(st.integers(1, 6), label="in"), *hidden, draw(st.integers(1, 4), label="out"))
    return ModelSpec(widths=widths, activation=draw(st.sampled_from(ACTIVATIONS), label="activation"),
                     bias=draw(st.booleans(), label="bias"),
                     scale_buffer=draw(st.booleans(), label="scale buffer") if scale_buffer is None else scale_buffer,
                     branch=branch)


def batch_sizes(draw: Draw, world: int, divisible: bool | None = None, at_least: int = 1) -> int:
    """A batch of at least `at_least` samples per rank; divisible by the world size or not (drawn unless given)."""
    per_rank = draw(st.integers(at_least, at_least + 4), label="samples per rank")
    divisible = draw(st.booleans(), label="batch divisible by world") if divisible is None else divisible
    extra = 0 if divisible or world == 1 else draw(st.integers(1, world - 1), label="remainder")
    return per_rank * world + extra


def optimizers(draw: Draw, dtype: str) -> OptimizerSpec:
    """SGD (momentum, nesterov, weight decay) in both dtypes; Adam only in float64.

    Adam's first update is lr * g / (|g| + eps): an entry whose gradient cancels to within float32
    rounding of zero can flip sign and move by 2 lr, so float32 Adam has no useful bound
    (docs/training-properties.md).
    """
    names = ["sgd", "adam"] if dtype == "float64" else ["sgd"]
    name = draw(st.sampled_from(names), label="optimizer")
    lr = draw(st.sampled_from([0.01, 0.05, 0.1]), label="lr")
    decay = draw(st.sampled_from([0.0, 0.01]), label="weight decay")
    if name == "adam":
        return OptimizerSpec("adam", lr=lr / 10, weight_decay=decay)
    momentum = draw(st.sampled_from([0.0, 0.9]), label="momentum")
    nesterov = momentum > 0 and draw(st.booleans(), label="nesterov")
    return OptimizerSpec("sgd", lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=decay)


def ddp_options(draw: Draw, find_unused: bool = False, static_graph: bool = False) -> DDPOptions:
    """Bucket cap: DDP's default (one bucket here), one parameter per bucket, or a few per bucket.

    DDP reduces the first step in one bucket and then rebuilds its buckets by the cap, so the caps
    act from step 2 on (step 3 with static_graph). static_graph is drawn only where the caller allows it.
    """
    cap = draw(st.sampled_from([None, TINY_BUCKET_MB, 0.0002]), label="bucket_cap_mb")
    return DDPOptions(bucket_cap_mb=cap, gradient_as_bucket_view=draw(st.booleans(), label="gradient_as_bucket_view"),
                      find_unused_parameters=find_unused,
                      static_graph=static_graph and draw(st.booleans(), label="static_graph"))


def _case(draw: Draw, prop: str, world: int, dtype: str, model: ModelSpec, batch: int, steps: int,
          **fields: Any) -> TrainingCase:
    seed = draw(st.integers(0, 2 ** 32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    state = initial_state(model, rng, dtype)
    x = rng.standard_normal((steps, batch, model.widths[0])).astype(dtype)
    y = rng.standard_normal((steps, batch, model.widths[-1])).astype(dtype)
    fields.setdefault("optimizer", optimizers(draw, dtype))
    return TrainingCase(prop=prop, world_size=world, dtype=dtype, model=model, state=state, x=x, y=y,
                        seed=seed, **fields)


def equivalence_case(draw: Draw, world: int, dtype: str) -> TrainingCase:
    """Whole-batch-mean weighting, batches divisible or not, replicas perturbed or not, 1..3 steps."""
    model = model_specs(draw)
    return _case(draw, "ddp_equivalence", world, dtype, model, batch_sizes(draw, world),
                 draw(st.integers(1, 3), label="steps"), ddp=ddp_options(draw, static_graph=True),
                 perturb=draw(st.booleans(), label="perturb replicas"))


def naive_mean_case(draw: Draw, world: int, dtype: str) -> TrainingCase:
    """Each rank's plain mean loss over an uneven split (world >= 2, N % world != 0), kept only where
    the split rule predicts a gradient measurably off the whole-batch mean (in 1000 draws the
    smallest predicted gap was 240 tolerances, so this discards next to nothing)."""
    model = model_specs(draw)
    case = _case(draw, "ddp_uneven_naive_mean", world, dtype, model, batch_sizes(draw, world, divisible=False),
                 draw(st.integers(1, 2), label="steps"), ddp=ddp_options(draw), weighting="naive_mean")
    gap = predicted_gap(reference(case, global_mean=False), reference(case, global_mean=True), dtype)
    assume(gap > GAP_FACTOR)
    return case


def unused_case(draw: Draw, world: int, dtype: str) -> TrainingCase:
    """A branch used by a drawn subset of ranks (none: globally unused), find_unused_parameters=True."""
    model = model_specs(draw, branch=True)
    ranks = draw(st.sets(st.integers(0, world - 1)), label="ranks using the branch")
    return _case(draw, "ddp_unused_parameters", world, dtype, model, batch_sizes(draw, world),
                 draw(st.integers(1, 3), label="steps"), ddp=ddp_options(draw, find_unused=True),
                 branch_ranks=tuple(sorted(ranks)))


def no_sync_case(draw: Draw, world: int, dtype: str) -> TrainingCase:
    """2..3 micro-batches per rank per step, all but the last under no_sync(); batches divisible or not."""
    model = model_specs(draw)
    micro = draw(st.integers(2, 3), label="micro-batches")
    batch = batch_sizes(draw, world, at_least=micro)
    assert min(split_sizes(batch, world)) >= micro
    return _case(draw, "ddp_no_sync", world, dtype, model, batch, draw(st.integers(1, 2), label="steps"),
                 ddp=ddp_options(draw), micro_batches=micro)

