"""Invalid option and environment values fail once, up front, in one line (issue 19): RankPool, the pytest
plugin's options (--max-world-size, --rank-timeout), `simgpu run`, SIMGPU_FAULTS and SIMGPU_STRICT_TIMEOUT."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env

from simgpu import settings
from simgpu.pool import Binding, RankPool

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("env, message", [
    ({"SIMGPU_STRICT_TIMEOUT": "soon"}, "SIMGPU_STRICT_TIMEOUT must be a number of seconds, got 'soon'"),
    ({"SIMGPU_STRICT_TIMEOUT": "-5"}, "SIMGPU_STRICT_TIMEOUT must be a finite number of seconds > 0, got '-5'"),
    ({"SIMGPU_FAULTS": "[{"}, "SIMGPU_FAULTS is not JSON"),
    ({"SIMGPU_FAULTS": '[{"rank": 1, "action": "explode"}]'}, "SIMGPU_FAULTS: unknown action 'explode'"),
    ({"SIMGPU_FAULTS": '[{"rank": 1}]'}, "SIMGPU_FAULTS: "),
    ({"SIMGPU_FAULTS": '[{"rank": 1, "action": "kill", "op": "allreduce"}]'},
     "SIMGPU_FAULTS: op 'allreduce' is not a collective the sim backend counts (did you mean 'all_reduce'?)"),
    ({"SIMGPU_FAULTS": '[{"rank": 1, "action": "delay", "seconds": "soon"}]'},
     "SIMGPU_FAULTS: delay seconds must be a finite number >= 0, got 'soon'"),
    ({"SIMGPU_GPU_MEMORY_GB": "abc"}, "SIMGPU_GPU_MEMORY_GB must be a number of GiB, got 'abc'"),
    ({"SIMGPU_GPU_MEMORY_GB": "-1"}, "SIMGPU_GPU_MEMORY_GB must be a finite number of GiB > 0, got '-1'"),
])
def test_malformed_settings_are_one_line_naming_the_variable(env: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        settings.check_environment(env)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_good_settings_pass() -> None:
    settings.check_environment({"SIMGPU_STRICT_TIMEOUT": "2.5", "SIMGPU_FAULTS": '[{"rank": 1, "action": "kill"}]'})


@pytest.mark.parametrize("kwargs, binding, message", [
    ({"timeout": 0}, Binding("gloo"), "RankPool timeout must be a finite number of seconds > 0, got 0"),
    ({"timeout": -5}, Binding("gloo"), "RankPool timeout must be a finite number of seconds > 0, got -5"),
    ({}, Binding("sim", env=(("SIMGPU_FAULTS", "nope"),)), "SIMGPU_FAULTS is not JSON"),
    ({}, Binding("sim", env=(("SIMGPU_STRICT_TIMEOUT", "0"),)), "SIMGPU_STRICT_TIMEOUT must be a finite"),
    ({}, Binding("sim", env=(("SIMGPU_FAULTS", '[{"rank": 5, "action": "kill"}]'),)),
     r"SIMGPU_FAULTS: a fault names rank 5 \(kill on rank 5 at its 1st collective\), but a pool of 2 has 2 rank"),
])
def test_a_pool_refuses_bad_values_before_starting_a_rank(kwargs: dict, binding: Binding, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RankPool(2, binding, **kwargs)


@pytest.mark.parametrize("suite, args, env, message", [
    ("conformance", ["--max-world-size", "0"], {}, "ERROR: --max-world-size must be between 1 and 8, got 0"),
    ("conformance", ["--rank-timeout", "0"], {}, "ERROR: --rank-timeout must be a finite number of seconds > 0, got 0.0"),
    ("conformance", ["--rank-timeout", "-5"], {}, "ERROR: --rank-timeout must be a finite number of seconds > 0, got -5.0"),
    ("conformance", [], {"SIMGPU_FAULTS": "[{"}, "ERROR: SIMGPU_FAULTS is not JSON"),
    ("yours", ["--simgpu-rank-timeout", "0"], {},
     "ERROR: --simgpu-rank-timeout must be a finite number of seconds > 0, got 0.0"),
    ("yours", [], {"SIMGPU_FAULTS": "[{"}, "ERROR: SIMGPU_FAULTS is not JSON"),
    ("yours", [], {"SIMGPU_STRICT_TIMEOUT": "x"}, "ERROR: SIMGPU_STRICT_TIMEOUT must be a number of seconds, got 'x'"),
    ("yours", ["--simgpu-attach", "127.0.0.1:0", "--simgpu-attach-world-size", "2", "--simgpu-attach-timeout", "nan"],
     {}, "ERROR: --simgpu-attach-timeout must be a finite number of seconds > 0, got nan"),
    ("yours", [], {"SIMGPU_GPU_MEMORY_GB": "abc"}, "ERROR: SIMGPU_GPU_MEMORY_GB must be a number of GiB, got 'abc'"),
])
def test_pytest_stops_before_any_test_in_one_line(suite: str, args: list[str], env: dict, message: str,
                                                  tmp_path: Path) -> None:
    """The conformance suite's options and a user suite's --simgpu-* options alike."""
    (tmp_path / "test_nothing.py").write_text("def test_nothing(ranks):\n    pass\n")
    target, cwd = (str(ROOT / "conformance"), ROOT) if suite == "conformance" else (str(tmp_path), tmp_path)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, target],
                          cwd=cwd, env=child_env(**env), capture_output=True, text=True, timeout=300)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    assert lines[0].startswith(message) and len(lines) == 1, lines


def test_simgpu_run_checks_the_environment_before_starting_the_program(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "prog.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", "1", str(script)], cwd=ROOT,
                          env=child_env(SIMGPU_STRICT_TIMEOUT="-1"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and not marker.exists()
    assert done.stderr.strip() == ("simgpu run: SIMGPU_STRICT_TIMEOUT must be a finite number of seconds > 0, "
                                   "got '-1'")


@pytest.mark.parametrize("args, env, message", [
    (["--gpus", "10000"], {}, "simgpu run: --gpus must be at most 1024 (each simulated GPU's rank is a process on "
                              "this host), got 10000"),
    (["--gpus", "1"], {"SIMGPU_GPU_MEMORY_GB": "abc"}, "simgpu run: SIMGPU_GPU_MEMORY_GB must be a number of GiB, "
                                                       "got 'abc'"),
    (["--gpus", "2"], {"SIMGPU_FAULTS": '[{"rank": 2, "action": "hang"}]'},
     "simgpu run: SIMGPU_FAULTS: a fault names rank 2 (hang on rank 2 at its 1st collective), but simgpu run --gpus 2 "
     "(one rank per GPU) has 2 rank(s), 0..1; it would never fire"),
])
def test_simgpu_run_refuses_bad_settings_in_one_line(args: list[str], env: dict, message: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "prog.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", *args, str(script)], cwd=ROOT,
                          env=child_env(**env), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and not marker.exists()
    assert done.stderr.strip() == message


def test_a_fault_on_an_op_the_backend_never_counts_is_refused() -> None:
    from simgpu import faults

    with pytest.raises(ValueError, match="op 'all-reduce' is not a collective the sim backend counts"):
        faults.kill(1, at=2, op="all-reduce")


def test_the_ops_a_fault_may_name_are_the_ones_the_backend_counts() -> None:
    import re

    from simgpu import faults

    source = (ROOT / "simgpu" / "backend.py").read_text()
    assert sorted(set(re.findall(r'@_collective\("(\w+)"\)', source))) == sorted(faults.COUNTED_OPS)
