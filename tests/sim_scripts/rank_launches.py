"""Run under `simgpu run`: start ranks every way programs do (mp.spawn, a forkserver Process, subprocess,
torchrun); every process prints `LAUNCH <how> <served>`, served meaning a fork of the run's warm template."""
import os
import subprocess
import sys

import torch  # noqa: F401 - this program imports torch, so the run serves it from the template
import torch.multiprocessing as mp


def served() -> bool:
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"template_main.py" in f.read():
                return True
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return False


def report(how: str) -> None:
    print(f"LAUNCH {how} {served()}", flush=True)


def spawned(index: int) -> None:
    report(f"mp.spawn-{index}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        report(f"torchrun-{os.environ['LOCAL_RANK']}")
        sys.exit(0)
    report("main")
    mp.spawn(spawned, nprocs=2)
    ctx = mp.get_context("forkserver")
    proc = ctx.Process(target=report, args=("forkserver",))
    proc.start()
    proc.join()
    subprocess.run([sys.executable, "-c", "import torch, os; print('LAUNCH subprocess', os.getppid() != %d, flush=True)"
                    % os.getpid()], check=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__, "--worker"],
                   check=True)
