"""PyTorch's OpInfo database on simulated GPUs, held to the host and to the committed CUDA record
(tests/simulated_device/, docs/simulated-device-suite.md). The sweep runs under `simgpu run` in a child
process, in shards so xdist spreads them: by default one dtype and the first sample of every op; with
--opinfo-all every dtype CUDA supports and every sample (about 4 hours on 2 busy cores: no CI tier runs it)."""
from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.processes import run_bounded
from tests.test_simgpu_run import ROOT

DEFAULT_SHARDS = 4
FULL_SHARDS = 32


def _sweep(tmp_path: Path, shard: int, shards: int, full: bool, timeout: float) -> dict:
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", "2", sys.executable, "-m",
           "tests.simulated_device.opinfo_sweep", "--out", str(out), "--shard", f"{shard}/{shards}",
           *(["--full"] if full else [])]
    done = run_bounded(cmd, timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    return json.loads(out.read_text())


def _check(report: dict) -> None:
    print(json.dumps({"counts": report["counts"], "meta": report["meta"]}, indent=1))
    assert len(report["ops"]) == report["meta"]["expected_ops"], "an op of the shard was not swept"
    assert report["meta"]["reference"].get("torch"), "no CUDA record found in tests/simulated_device/cuda_reference"
    assert not report["failures"], "\n".join(" ".join(f) for f in report["failures"][:50])


@pytest.mark.parametrize("shard", range(DEFAULT_SHARDS))
def test_opinfo_first_samples(shard: int, tmp_path: Path) -> None:
    _check(_sweep(tmp_path, shard, DEFAULT_SHARDS, full=False, timeout=900))


@pytest.mark.opinfo_all
@pytest.mark.parametrize("shard", range(FULL_SHARDS))
def test_opinfo_every_dtype_and_sample(shard: int, tmp_path: Path) -> None:
    _check(_sweep(tmp_path, shard, FULL_SHARDS, full=True, timeout=7200))


def test_dropout_given_by_position_makes_a_sample_random() -> None:
    """multi_head_attention_forward's samples pass dropout_p by position (with training=True in some): those
    draw a mask, so their values are the generator's; with training=False no mask is drawn."""
    from torch.testing._internal.common_methods_invocations import op_db

    from tests.simulated_device.opinfo_sweep import drops_out

    op = next(o for o in op_db if o.name == "nn.functional.multi_head_attention_forward")
    samples = list(op.sample_inputs("cpu", torch.float32))
    random = [s for s in samples if drops_out(op, s)]
    assert random and len(random) < len(samples)
    for s in samples:
        bound = inspect.signature(torch.nn.functional.multi_head_attention_forward).bind(s.input, *s.args, **s.kwargs)
        assert drops_out(op, s) == (bound.arguments["dropout_p"] > 0 and bound.arguments["training"])


def test_a_sample_asking_for_the_host_expects_host_outputs() -> None:
    """new_ones/full_like/randint_like samples with device="cpu" give host tensors on CUDA too."""
    from torch.testing._internal.common_methods_invocations import SampleInput

    from tests.simulated_device.opinfo_sweep import compare, expected_device

    x = torch.ones(2)
    host_asked = SampleInput(x, args=((2,),), kwargs={"device": "cpu"})
    assert expected_device(host_asked) == "cpu" and expected_device(SampleInput(x)) == "cpu"
    assert compare(torch.ones(2), torch.ones(2), expected_device(host_asked), values=True) is None
    assert compare(torch.ones(2), torch.ones(2), "cuda:0", values=True) is not None
    assert expected_device(SampleInput(2)) == "cpu"  # arange(2): no device argument, a host tensor on CUDA too
    assert expected_device(SampleInput(2, kwargs={"device": "cuda"})) == "cuda:0"
    assert expected_device(SampleInput([torch.ones(2, device="meta")])) == "meta"  # stack's list of tensors
    assert expected_device(SampleInput(2.7, args=(torch.ones(2, device="meta"),))) == "meta"  # normal(2.7, std)


def test_the_host_copy_gives_gradients_where_the_sample_does() -> None:
    """istft's window samples are views made before their base required grad: they report requires_grad, but
    no gradient reaches them on any device. The host reference must be made alike, or the sweep takes the
    simulation's (correct) missing gradient for a bug."""
    from torch.testing._internal.common_methods_invocations import SampleInput, op_db

    from tests.simulated_device.opinfo_sweep import call, gradient_reaches, grad_inputs, host_copy

    op = next(o for o in op_db if o.name == "istft")
    s = list(op.sample_inputs("cpu", torch.complex64, requires_grad=True))[9]
    window = s.kwargs["window"]
    assert window.requires_grad and not gradient_reaches(window) and gradient_reaches(s.input)
    for sample in (s, host_copy(s)):
        out = call(op, sample)
        grads = torch.autograd.grad(out, grad_inputs(sample), torch.ones_like(out), allow_unused=True)
        assert [g is None for g in grads] == [False, True]
    connected = SampleInput(torch.ones(3, requires_grad=True) * 2, kwargs={"w": torch.ones(2, requires_grad=True)})
    copy = host_copy(connected)
    assert all(t.requires_grad and gradient_reaches(t) for t in (copy.input, copy.kwargs["w"]))


def test_outputs_whose_dtype_or_shape_is_cudas_own() -> None:
    """Half-precision layer norm keeps its statistics in float32 on CUDA (the host in float16), batch norm in
    evaluation returns them where the host returns empty tensors: the record's dtype and shape are accepted,
    the values compared in the host's dtype where the shapes agree; anything else still fails."""
    from tests.simulated_device.opinfo_sweep import compare

    out, mean = torch.randn(4, 6, dtype=torch.float16), torch.randn(4, 1)
    host = (out.clone(), mean.half())
    record = [["cpu", "float16", [4, 6]], ["cpu", "float32", [4, 1]]]
    assert compare((out, mean), host, None, values=True) is not None
    assert compare((out, mean), host, None, values=True, cuda=record) is None
    assert compare((out, mean + 1), host, None, values=True, cuda=record) is not None
    assert compare((out, torch.zeros(3)), (out, torch.zeros(0)), None, True, [record[0], ["cpu", "float32", [3]]]) is None
    assert compare((out, torch.zeros(3)), (out, torch.zeros(0)), None, True, [record[0], ["cpu", "float32", [2]]]) \
        is not None
    batched = (out.expand(2, 4, 6), mean.expand(2, 4, 1))
    assert compare(batched, (out.expand(2, 4, 6), mean.half().expand(2, 4, 1)), None, True, record, batched=True) is None


def test_half_samples_may_match_the_float32_computation_rounded_once() -> None:
    """CUDA computes half-precision ops in float32 and rounds once; where the host rounds its intermediates
    (layer norm's statistics) the two differ, and the simulation, computing as CUDA does, is right."""
    from torch.testing._internal.common_methods_invocations import SampleInput

    from tests.simulated_device.opinfo_sweep import as_cuda_computes

    x = torch.tensor([1.0, 1.0009765625, 1.001953125], dtype=torch.float16) * 300
    sample = SampleInput(x, args=([3], None, None, 1e-5))
    run = lambda s: torch.ops.aten.native_layer_norm(s.input, *s.args)  # noqa: E731
    wide = [t.to(torch.float16) if i == 0 else t for i, t in enumerate(run(SampleInput(x.float(), args=sample.args)))]
    assert as_cuda_computes("differs from the host", sample, wide, run, None) is None
    assert as_cuda_computes("differs from the host", sample, [wide[0] + 1, *wide[1:]], run, None) is not None
    assert as_cuda_computes("differs", SampleInput(x.float(), args=sample.args), wide, run, None) == "differs"


def test_record_entries_are_matched_on_the_samples_options() -> None:
    """meshgrid's samples differ only in indexing= and come in the order of a set of strings (hash-seeded): a
    record entry that keeps the options ("k") is used only for the sample it was made from."""
    from torch.testing._internal.common_methods_invocations import SampleInput

    from tests.simulated_device.opinfo_sweep import options, same_sample, signature

    xy, ij = (SampleInput([torch.ones(3), torch.ones(())], indexing=i) for i in ("xy", "ij"))
    assert signature(xy) == signature(ij) and options(xy) != options(ij)
    entry = {"s": signature(xy), "k": options(xy)}
    assert same_sample(entry, xy) and not same_sample(entry, ij)
    assert same_sample({"s": signature(xy)}, ij)  # records made before options were kept
