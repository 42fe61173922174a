"""The multi-node recipes in docs/recipes/ (docs/multinode.md): their syntax, and their simgpu and
torchrun command lines parsed by simgpu's and torchrun's own argument parsers. Neither recipe is run
here (no Slurm, no Kubernetes cluster): tests/test_across_hosts.py runs the same command on
namespace hosts."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parent.parent / "docs" / "recipes"


def _parse_node_command(line: str) -> None:
    """`simgpu run ... torchrun ... train.py`, variables given sample values: both parsers accept it."""
    from torch.distributed.run import get_args_parser

    from simgpu.launcher import _parser

    line = re.sub(r'\$\(\[.*?\]\s*&&\s*echo 1 \|\| echo 0\)', "1", line)  # is_host=$([ ... ] && echo 1 || echo 0)
    line = re.sub(r"\$\{?(\w+)(:-[^}]*)?\}?", lambda m: "2" if "NODES" in m[1] or m[1] in ("WORLD_SIZE", "GPUS_PER_NODE")
                  else "eth0" if "IFACE" in m[1] else "10.0.0.1", line)
    argv = shlex.split(line)
    assert argv[:2] == ["simgpu", "run"], argv
    ns = _parser().parse_args(argv[1:])
    assert ns.sim_interface == "eth0" and ns.target == "torchrun", ns
    run = get_args_parser().parse_args(ns.args)
    assert run.rdzv_backend == "c10d" and run.training_script == "train.py", run
    assert int(run.nproc_per_node) == ns.gpus  # one rank per simulated GPU of the node


def test_the_pytorchjob_manifest_parses_and_its_command_is_one_simgpu_and_torchrun_accept() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML: the [test] extra, which the README's test command installs")
    job = yaml.safe_load((RECIPES / "simgpu-pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"} and specs["Master"]["replicas"] == 1
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the operator sets MASTER_ADDR, RANK, ... in this container only
        env = {e["name"]: e for e in container["env"]}
        assert "secretKeyRef" in env["SIMGPU_GROUP_SECRET"]["valueFrom"]  # from a Secret, never a literal
        assert container["command"] == ["bash", "-c"]
        _parse_node_command(container["args"][0].removeprefix("exec "))


def test_the_slurm_script_is_valid_bash_and_its_command_is_one_simgpu_and_torchrun_accept() -> None:
    script = (RECIPES / "simgpu-slurm.sbatch").read_text()
    if shutil.which("bash"):
        done = subprocess.run(["bash", "-n", str(RECIPES / "simgpu-slurm.sbatch")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    inner = script[script.index("exec simgpu run"):script.rindex("'")]
    _parse_node_command(inner.replace("\\\n", " ").removeprefix("exec "))
    assert "SIMGPU_GROUP_SECRET=" in script and "--group-secret" not in script
