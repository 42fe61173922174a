"""Candidate D: PrivateUse1 backend (torch.utils.rename_privateuse1_backend).

Records (a) that the PrivateUse1 backend cannot be renamed to "cuda", so the
"cuda" strings in unmodified programs never reach it; (b) what a Python-only
PrivateUse1 setup (torch.utils.backend_registration.
_setup_privateuseone_for_python_backend("simcuda")) gives without a C++
extension; then runs the standard steps with device "cuda:1" (as programs
write it) and, for comparison, with "simcuda:1".

Run: python benchmarks/cuda_sim_probes/probe_privateuse1.py
     VENV214/bin/python benchmarks/cuda_sim_probes/probe_privateuse1.py   # a venv with torch 2.14.1+cu130
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import _common as C  # noqa: E402


def main():
    part = os.environ.get("PROBE_PART")
    name = "D: PrivateUse1"
    if part is None:
        C.run_parts_in_subprocesses(os.path.abspath(__file__), ["setup", "std_cuda", "std_simcuda"], name)
        return
    C.maybe_install_cuda_shim()
    C.record("0a rename_privateuse1_backend('cuda')", lambda: torch.utils.rename_privateuse1_backend("cuda"))
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    ok = C.record("0b _setup_privateuseone_for_python_backend('simcuda')",
                  lambda: _setup_privateuseone_for_python_backend(rename="simcuda"))
    if part == "setup":
        C.record("0c torch.device('simcuda:1')", lambda: str(torch.device("simcuda:1")))
        C.record("0d torch.empty(2, device='simcuda:1') (no C++ kernels/allocator)",
                 lambda: str(torch.empty(2, device="simcuda:1").device))
        C.record("0e torch.device('cuda:1').type after rename", lambda: torch.device("cuda:1").type)
    elif part == "std_cuda":
        C.run_standard_steps(None, device="cuda:1", mesh_device_type="cuda")
    elif part == "std_simcuda" and ok:
        import _common
        _common.ORDER.clear()
        _common.RESULTS.clear()
        C.run_standard_steps(None, device="simcuda:1", mesh_device_type="simcuda")
        # rename keys so they do not collide with the cuda run
        for k in list(C.ORDER):
            C.RESULTS["[simcuda:1] " + k] = C.RESULTS.pop(k)
        C.ORDER[:] = ["[simcuda:1] " + k for k in C.ORDER]
    C.finish(name)


if __name__ == "__main__":
    main()
