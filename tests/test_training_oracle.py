"""The training properties' reference and checker (conformance/training/), and that they catch broken DDP.

- The split rule is torch.tensor_split's; the whole-batch weighting gives the whole-batch mean.
- The NumPy oracle against hand-worked cases, and against torch autograd in float64 in one process
  (the per-rank losses of the split rule summed there, so the DDP arithmetic is checked without DDP).
- The checker accepts the reference itself and rejects, naming rank, parameter and step: gradients
  summed instead of averaged, one rank off by one ulp, zeros where DDP must leave None, a buffer
  rank 0 did not broadcast.
- Real DDP on a 2-rank sim pool: the plain run passes; a comm hook that sums instead of averaging,
  a no_sync() that still communicates, and the plain per-rank mean over uneven shards all fail the
  whole-batch property; the GPU-shaped path (device_ids=[cuda:r]) runs on simulated GPUs.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.training.case import (DDPOptions, OptimizerSpec, TrainingCase, local_weights, loss_factor,
                                       split_sizes)
from conformance.training.check import GRAD_RTOL, check_training, param_allowance
from conformance.training.model import ModelSpec, build_module, initial_state
from conformance.training.oracle import Optimizer, reference
from conformance.training.properties import PROPERTIES
from conformance.training.ranks import train_ddp
from simgpu import Binding, RankPool


def make_case(prop: str = "ddp_equivalence", world: int = 2, dtype: str = "float32", widths: tuple = (3, 4, 2),
              batch: int = 6, steps: int = 2, seed: int = 0, **fields: Any) -> TrainingCase:
    """A case built by hand (the conformance suite draws them with hypothesis)."""
    model = fields.pop("model", ModelSpec(widths, "tanh", bias=True))
    rng = np.random.default_rng(seed)
    state = initial_state(model, rng, dtype)
    x = rng.standard_normal((steps, batch, model.widths[0])).astype(dtype)
    y = rng.standard_normal((steps, batch, model.widths[-1])).astype(dtype)
    fields.setdefault("optimizer", OptimizerSpec("sgd", lr=0.1, momentum=0.9))
    return TrainingCase(prop=prop, world_size=world, dtype=dtype, model=model, state=state, x=x, y=y,
                        seed=seed, **fields)


# ----------------------------------------------------------------------------- the split rule
@pytest.mark.parametrize("world", range(1, 9))
def test_split_sizes_are_torch_tensor_split(world: int) -> None:
    for n in range(0, 41):
        assert split_sizes(n, world) == [len(c) for c in torch.tensor_split(torch.arange(n), world)], (n, world)


@pytest.mark.parametrize("batch,world,micro", [(8, 4, 1), (7, 2, 1), (11, 4, 2), (13, 3, 3), (5, 1, 2)])
def test_global_mean_weighting_is_the_whole_batch_mean(batch: int, world: int, micro: int) -> None:
    case = make_case(world=world, batch=batch, micro_batches=micro, widths=(2, 3))
    weights = np.zeros(batch)
    for per_rank in local_weights(case):
        for start, stop, w in per_rank:
            weights[start:stop] = w / world  # DDP divides the summed gradient by the world size
    assert np.allclose(weights, 1.0 / (batch * 3), rtol=1e-15, atol=0)


def test_naive_mean_weighting_favours_the_smaller_shards() -> None:
    case = make_case(world=2, batch=3, widths=(1, 1), weighting="naive_mean")
    assert [[w for _, _, w in r] for r in local_weights(case)] == [[0.5], [1.0]]  # 1/(n_r * out)
    assert loss_factor("naive_mean", 2, 2, 3) == 1.0 and loss_factor("global_mean", 2, 2, 3) == 4 / 3


# ----------------------------------------------------------------------------- the oracle by hand
def _linear_case(world: int, weighting: str) -> TrainingCase:
    """out = w * x with w = 0.5, x = (1, 2, 3), y = 0, one step of plain SGD (lr 0.1)."""
    model = ModelSpec((1, 1), "tanh", bias=False)
    case = make_case(world=world, dtype="float64", model=model, batch=3, steps=1, weighting=weighting,
                     optimizer=OptimizerSpec("sgd", lr=0.1))
    case.state = {"layers.0.weight": np.array([[0.5]])}
    case.x = np.array([[[1.0], [2.0], [3.0]]])
    case.y = np.zeros((1, 3, 1))
    return case


def test_oracle_by_hand_whole_batch_mean() -> None:
    # d/dw mean_i (w x_i)^2 = (2/3) sum_i w x_i^2 = (2/3) * 0.5 * 14 = 14/3
    ref = reference(_linear_case(2, "global_mean"), global_mean=True)
    assert ref.grads["layers.0.weight"][0, 0] == pytest.approx(14 / 3, rel=1e-15)
    assert ref.params["layers.0.weight"][0, 0] == pytest.approx(0.5 - 0.1 * 14 / 3, rel=1e-15)


def test_oracle_by_hand_naive_mean_over_uneven_shards() -> None:
    # shards (1, 2) and (3): (1/2) [ (2/2) 0.5 (1 + 4) + 2 * 0.5 * 9 ] = (2.5 + 9) / 2 = 5.75
    ref = reference(_linear_case(2, "naive_mean"), global_mean=False)
    assert ref.grads["layers.0.weight"][0, 0] == pytest.approx(5.75, rel=1e-15)
    # the per-sample magnitudes summed: (1/2) [ 0.5 + 2.0 ] + 4.5 = 5.75 (no cancellation here)
    assert ref.grad_scale["layers.0.weight"] == pytest.approx(5.75, rel=1e-15)


def test_sgd_momentum_nesterov_and_adam_by_hand() -> None:
    g = {"p": np.array([1.0])}
    for spec, steps in [(OptimizerSpec("sgd", lr=0.1, momentum=0.9), [0.1, 0.19]),
                        (OptimizerSpec("sgd", lr=0.1, momentum=0.9, nesterov=True), [0.19, 0.271]),
                        (OptimizerSpec("adam", lr=0.1), [0.1, 0.1])]:
        opt, params, before = Optimizer(spec), {"p": np.array([0.0])}, 0.0
        for expected in steps:
            opt.step(params, g)
            assert before - params["p"][0] == pytest.approx(expected, rel=1e-6), spec
            before = params["p"][0]


def test_optimizer_skips_parameters_without_gradient() -> None:
    params = {"p": np.array([1.0])}
    Optimizer(OptimizerSpec("sgd", lr=0.1, momentum=0.9, weight_decay=0.5)).step(params, {"p": None})
    assert params["p"][0] == 1.0


# ----------------------------------------------------------------------------- the oracle against torch
def _torch_reference(case: TrainingCase) -> tuple[dict, dict, list]:
    """One process, float64 autograd: (1/W) sum over ranks and micro-batches of c * mean loss, k steps."""
    state = {k: v.astype(np.float64) for k, v in case.state.items()}
    module = build_module(case.model, state, torch.device("cpu"))
    o = case.optimizer
    opt = (torch.optim.SGD(module.parameters(), lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                           weight_decay=o.weight_decay) if o.name == "sgd" else
           torch.optim.Adam(module.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay))
    local = []
    if case.micro_batches > 1:  # what each rank accumulates under no_sync() in step 1
        x, y = torch.from_numpy(case.x[0].astype(np.float64)), torch.from_numpy(case.y[0].astype(np.float64))
        for rank, (xs, ys) in enumerate(zip(torch.tensor_split(x, case.world_size),
                                            torch.tensor_split(y, case.world_size))):
            grads = torch.autograd.grad(loss_so_far(module, xs, ys, case, rank), list(module.parameters()),
                                        allow_unused=True)
            local.append({n: None if g is None else g.numpy() for (n, _), g in zip(module.named_parameters(), grads)})
    first = {}
    for step in range(case.steps):
        x, y = torch.from_numpy(case.x[step].astype(np.float64)), torch.from_numpy(case.y[step].astype(np.float64))
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for rank, (xs, ys) in enumerate(zip(torch.tensor_split(x, case.world_size),
                                            torch.tensor_split(y, case.world_size))):
            for mx, my in zip(torch.tensor_split(xs, case.micro_batches), torch.tensor_split(ys, case.micro_batches)):
                c = loss_factor(case.weighting, mx.shape[0], case.world_size, case.batch)
                total = total + F.mse_loss(module(mx, branch_on=rank in case.branch_ranks), my) * c / case.world_size
        total.backward()
        if step == 0:
            first = {n: None if p.grad is None else p.grad.numpy().copy() for n, p in module.named_parameters()}
        opt.step()
    return first, {n: p.detach().numpy() for n, p in module.named_parameters()}, local


def loss_so_far(module: Any, xs: Any, ys: Any, case: TrainingCase, rank: int) -> Any:
    """Rank `rank`'s loss over all its micro-batches but the last (what no_sync accumulates locally)."""
    micro = list(zip(torch.tensor_split(xs, case.micro_batches), torch.tensor_split(ys, case.micro_batches)))
    return sum(F.mse_loss(module(mx, branch_on=rank in case.branch_ranks), my)
               * loss_factor(case.weighting, mx.shape[0], case.world_size, case.batch) for mx, my in micro[:-1])


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), prop=st.sampled_from(sorted(PROPERTIES)), world=st.integers(2, 4))
def test_oracle_matches_torch_autograd_in_float64(data: st.DataObject, prop: str, world: int) -> None:
    case = PROPERTIES[prop].cases(data.draw, world, "float64")
    grads, params, local = _torch_reference(case)
    ref = reference(case, global_mean=case.weighting == "global_mean")
    for name, g in grads.items():
        assert (g is None) == (ref.grads[name] is None), name
        if g is not None:
            assert np.allclose(g, ref.grads[name], rtol=1e-12, atol=1e-14), (name, case.summary())
        assert np.allclose(params[name], ref.params[name], rtol=1e-12, atol=1e-14), (name, case.summary())
    for mine, theirs in zip(local, ref.local_grads):
        for name, g in mine.items():
            assert np.allclose(g, theirs[name], rtol=1e-12, atol=1e-14), (name, case.summary())


def test_whole_batch_reference_is_plain_mse_on_the_whole_batch() -> None:
    """The property's target needs no split at all: F.mse_loss over the whole batch, one process."""
    case = make_case(world=3, batch=7, dtype="float64", steps=1)
    module = build_module(case.model, case.state, torch.device("cpu"))
    F.mse_loss(module(torch.from_numpy(case.x[0])), torch.from_numpy(case.y[0])).backward()
    ref = reference(case, global_mean=True)
    for name, p in module.named_parameters():
        assert np.allclose(p.grad.numpy(), ref.grads[name], rtol=1e-13, atol=1e-15), name


# ----------------------------------------------------------------------------- the checker, no ranks
def _as_ranks(case: TrainingCase, global_mean: bool = True) -> list[dict]:
    """What correct ranks would return: the reference rounded to the case's dtype, on every rank."""
    ref = reference(case, global_mean=global_mean)

    def cast(arrays: dict) -> dict:
        return {k: None if v is None else v.astype(case.dtype) for k, v in arrays.items()}

    one = {"grads": cast(ref.grads), "params": cast(ref.params),
           "buffers": {k: case.state[k].copy() for k in case.model.buffer_shapes()},
           "local_grads": None}
    outs = [copy.deepcopy(one) for _ in range(case.world_size)]
    for rank, local in enumerate(ref.local_grads):
        outs[rank]["local_grads"] = cast(local)
    return outs


FULL = ModelSpec((3, 4, 2), "gelu_tanh", bias=True, scale_buffer=True, branch=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checker_accepts_the_reference_rounded_to_the_dtype(dtype: str) -> None:
    for case in (make_case(dtype=dtype, model=FULL, branch_ranks=(1,)),
                 make_case(dtype=dtype, world=3, batch=10, micro_batches=3),
                 make_case(dtype=dtype, model=FULL, steps=3)):
        assert check_training(case, _as_ranks(case), reference(case)) == []


def test_checker_rejects_gradients_summed_instead_of_averaged() -> None:
    case = make_case(world=2, steps=1)
    outs = _as_ranks(case)
    for out in outs:
        out["grads"] = {k: v * 2 for k, v in out["grads"].items()}
    lines = check_training(case, outs, reference(case))
    assert any(ln.startswith("rank 0, step 1 gradient, parameter layers.0.weight: max |got - ref|") for ln in lines)
    assert any(ln.startswith("rank 1, step 1 gradient, parameter layers.1.bias") for ln in lines)


def test_checker_rejects_one_rank_one_ulp_off() -> None:
    """Within the reference tolerance, but replicas must agree bit for bit: only that check fires."""
    case = make_case(world=3, steps=2)
    outs = _as_ranks(case)
    p = outs[2]["params"]["layers.1.weight"]
    p[0, 0] = np.nextafter(p[0, 0], np.float32(np.inf))
    assert check_training(case, outs, reference(case)) == [
        "rank 2, after step 2, parameter layers.1.weight: differs bitwise from rank 0 (max diff "
        f"{float(np.spacing(outs[0]['params']['layers.1.weight'][0, 0])):.3g})"]


@pytest.mark.parametrize("optimizer", [OptimizerSpec("sgd", lr=0.1, momentum=0.9), OptimizerSpec("adam", lr=0.01)])
def test_tolerances_are_the_stated_bounds(optimizer: OptimizerSpec) -> None:
    """Half the stated bound passes, twice it fails, naming rank, parameter and step (float64: exact reference)."""
    case = make_case(world=2, steps=3, dtype="float64", optimizer=optimizer)
    ref = reference(case)
    name = "layers.0.bias"
    bounds = {"grads": GRAD_RTOL["float64"] * ref.grad_scale[name],
              "params": param_allowance(ref.params[name], ref.initial[name], 3, "float64", optimizer,
                                        ref.grad_scale[name])}
    for key, bound in bounds.items():
        for factor, expected in [(0.5, []), (2.0, [f"rank 1, {'step 1 gradient' if key == 'grads' else 'after step 3'}"
                                                  f", parameter {name}"])]:
            outs = _as_ranks(case)
            outs[1][key][name] = outs[1][key][name] + factor * bound
            outs[0][key][name] = outs[1][key][name]  # keep the replicas equal: only the bound is under test
            lines = check_training(case, outs, ref)
            assert [ln.split(":")[0] for ln in lines if ln.startswith("rank 1")] == expected, (key, factor, lines)


def test_checker_rejects_zeros_where_no_rank_used_the_parameter() -> None:
    case = make_case(model=FULL, branch_ranks=())
    outs = _as_ranks(case)
    assert outs[0]["grads"]["branch.weight"] is None
    outs[1]["grads"]["branch.weight"] = np.zeros((2, 3), np.float32)
    lines = check_training(case, outs, reference(case))
    assert "rank 1, step 1 gradient of branch.weight: set where rank 0 has None" in lines
    assert any(ln.startswith("rank 1, step 1 gradient, parameter branch.weight: gradient is set, the reference "
                             "says None") for ln in lines)


def test_checker_rejects_a_buffer_rank_0_did_not_broadcast() -> None:
    case = make_case(model=FULL, perturb=True)
    outs = _as_ranks(case)
    outs[1]["buffers"]["scale"] = outs[1]["buffers"]["scale"] + np.float32(0.5)
    lines = check_training(case, outs, reference(case))
    assert lines == ["rank 1, after step 2, buffer scale: differs bitwise from rank 0's initial value "
                     "(max diff 0.5)"]


def test_checker_rejects_no_sync_gradients_that_were_synchronised() -> None:
    case = make_case(world=2, batch=8, micro_batches=2)
    outs = _as_ranks(case)
    outs[1]["local_grads"] = outs[0]["local_grads"]
    lines = check_training(case, outs, reference(case))
    assert lines and all(ln.startswith("rank 1, step 1 gradient inside no_sync") for ln in lines)


# ----------------------------------------------------------------------------- real DDP, broken on purpose
def _sum_hook(state, bucket):  # noqa: ANN001, ANN202 - DDP rejects a bucket annotation other than GradBucket
    """A comm hook that sums the gradients over ranks and forgets to divide by the world size."""
    import torch.distributed as dist

    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


@contextlib.contextmanager
def _patched(cls: Any, name: str, value: Any) -> Any:
    original = getattr(cls, name)
    setattr(cls, name, value)
    try:
        yield
    finally:
        setattr(cls, name, original)


def train_summing(ctx: Any, case: TrainingCase) -> dict:
    """train_ddp with every DDP registering _sum_hook (runs on the ranks)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    original = DDP.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.register_comm_hook(None, _sum_hook)

    with _patched(DDP, "__init__", init):
        return train_ddp(ctx, case)


def train_no_sync_communicates(ctx: Any, case: TrainingCase) -> dict:
    """train_ddp with a no_sync() that does nothing: every micro-batch's backward synchronises."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _patched(DDP, "no_sync", lambda self: contextlib.nullcontext()):
        return train_ddp(ctx, case)


def count_buckets(ctx: Any, cap: float | None, static_graph: bool) -> list[int]:
    """Buckets DDP reduces in each of 3 steps (a counting comm hook around the default all-reduce)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    case = make_case(widths=(4, 8, 8, 2))
    ddp = DDP(build_module(case.model, case.state, ctx.device), bucket_cap_mb=cap, static_graph=static_graph)
    counts: list[int] = []

    def hook(state, bucket):  # noqa: ANN001, ANN202 - DDP rejects a bucket annotation other than GradBucket
        counts[-1] += 1
        return allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, hook)
    for step in range(3):
        counts.append(0)
        ddp(torch.from_numpy(case.x[0])).sum().backward()
    return counts


@pytest.fixture(scope="module")
def pool2() -> Any:
    with RankPool(2, Binding("sim"), timeout=120) as pool:
        yield pool


def _run(pool: RankPool, fn: Any, *args: Any) -> list[Any]:
    outcomes = pool.run(fn, *args)
    assert all(o.ok for o in outcomes), [o.traceback for o in outcomes if not o.ok]
    return [o.value for o in outcomes]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_real_ddp_satisfies_every_property(pool2: RankPool, dtype: str) -> None:
    buffered = ModelSpec((3, 4, 2), "sigmoid", bias=True, scale_buffer=True)
    several_buckets = DDPOptions(bucket_cap_mb=1e-6, gradient_as_bucket_view=True)
    cases = {"ddp_equivalence": make_case(dtype=dtype, model=buffered, batch=7, perturb=True, ddp=several_buckets),
             "ddp_uneven_naive_mean": make_case(dtype=dtype, batch=7, weighting="naive_mean"),
             "ddp_unused_parameters": make_case(dtype=dtype, model=FULL, branch_ranks=(0,),
                                                ddp=DDPOptions(find_unused_parameters=True)),
             "ddp_no_sync": make_case(dtype=dtype, batch=9, micro_batches=3)}
    for name, case in cases.items():
        assert PROPERTIES[name].judge(case, _run(pool2, train_ddp, case)) == [], name


@pytest.mark.parametrize("cap,static_graph,expected", [(1e-6, False, [1, 6, 6]), (0.0002, False, [1, 2, 2]),
                                                       (None, False, [1, 1, 1]), (1e-6, True, [1, 1, 6])])
def test_drawn_bucket_caps_give_several_buckets_after_the_rebuild(pool2: RankPool, cap: float | None,
                                                                  static_graph: bool, expected: list[int]) -> None:
    """What the strategies' bucket_cap_mb choices do (docs/training-properties.md): DDP reduces step 1 in
    one bucket, then buckets by the cap, from step 2 (step 3 with static_graph)."""
    assert _run(pool2, count_buckets, cap, static_graph) == [expected, expected]


def test_summing_comm_hook_is_caught(pool2: RankPool) -> None:
    case = make_case(steps=2)
    lines = PROPERTIES["ddp_equivalence"].judge(case, _run(pool2, train_summing, case))
    named = {ln.split(":")[0] for ln in lines}
    assert {"rank 0, step 1 gradient, parameter layers.0.weight", "rank 1, step 1 gradient, parameter layers.1.bias",
            "rank 0, after step 2, parameter layers.0.weight"} <= named


def test_no_sync_that_communicates_is_caught(pool2: RankPool) -> None:
    case = make_case(batch=8, micro_batches=2, steps=1)
    lines = PROPERTIES["ddp_no_sync"].judge(case, _run(pool2, train_no_sync_communicates, case))
    assert lines and any(ln.startswith("rank 0, step 1 gradient inside no_sync") for ln in lines)


def test_plain_per_rank_mean_over_uneven_shards_is_not_the_whole_batch_mean(pool2: RankPool) -> None:
    """The fact the naive-mean property rests on, shown with real DDP: the unweighted run fails the
    whole-batch property and passes the per-rank prediction."""
    naive = make_case(batch=7, weighting="naive_mean", steps=1)
    outs = _run(pool2, train_ddp, naive)
    assert PROPERTIES["ddp_uneven_naive_mean"].judge(naive, outs) == []
    lines = check_training(naive, outs, reference(naive, global_mean=True))
    assert any(ln.startswith("rank 0, step 1 gradient, parameter layers.0.weight") for ln in lines)
    gap = np.abs(reference(naive, global_mean=False).grads["layers.0.weight"]
                 - reference(naive, global_mean=True).grads["layers.0.weight"]).max()
    assert gap > 100 * GRAD_RTOL["float32"]


def test_gpu_path_on_simulated_gpus() -> None:
    """device_ids=[cuda:r], tensors moved to and from the rank's GPU: the nccl path, on simgpu.cuda_sim."""
    with RankPool(2, Binding("sim", device="simulated-cuda"), timeout=120) as pool:
        case = make_case(model=FULL, branch_ranks=(1,), ddp=DDPOptions(find_unused_parameters=True), perturb=True)
        assert PROPERTIES["ddp_unused_parameters"].judge(case, _run(pool, train_ddp, case)) == []
