"""The differences between simulated CUDA and real CUDA (or the host) that the sweep accepts, each with
its reason, and the known open ones.

Keys are (OpInfo name, variant, check); variant "*" means every variant of the op. A difference that is
listed in neither table fails the sweep. EXPLAINED holds differences that are the simulation's nature;
OPEN holds bugs found by the sweep and not fixed yet (most in modules outside the op layer), each naming
where it lies: they are counted and listed in the report under their own heading, never as passes.
"""
from __future__ import annotations

_GENERATOR = ("the output's shape depends on the sample's random values, which CUDA's record drew with "
              "CUDA's generator on the GPU and the simulation with the simulated GPU's (a CPU generator)")
_DROPOUT = ("draws its mask from the simulated GPU's generator, not the host's (docs/cuda-simulation.md: GPU "
            "random numbers are not CUDA's either)")
_UNINITIALISED = "returns uninitialised memory: the values are whatever the allocator held, on CUDA too"
_JITERATOR = ("torch.cuda.jiterator compiles CUDA C++ at run time (NVRTC); the host cannot run CUDA C++, so "
              "the simulation refuses it (today with torch's AttributeError for the missing "
              "torch._C._cuda_jiterator_compile_and_launch_kernel; api.py could word it)")
_SPARSE_REFUSED = ("sparse tensors are not simulated: making one on a simulated GPU (to_sparse of a GPU tensor, a "
                   "sparse factory with device='cuda') is refused in one line (tensors.py)")
_RANDOM_PROJECTION = ("draws its random projection (torch.randn with the input's device) from the simulated GPU's "
                      "generator, the host's from the CPU generator: the factors differ (complex ones by phases); "
                      "the op's tolerance holds only for the reconstruction, which the OpInfo does not compare")

EXPLAINED: dict[tuple[str, str, str], str] = {
    **{(name, "*", check): _SPARSE_REFUSED for name in ("to_sparse", "sparse.mm", "sparse.sampled_addmm")
       for check in ("samples", "forward", "cuda", "backward", "grad", "autocast", "values", "vmap")},
    ("masked_select", "*", "cuda"): _GENERATOR,
    ("nn.functional.one_hot", "*", "cuda"): _GENERATOR,
    ("bincount", "*", "cuda"): _GENERATOR,
    ("nonzero", "*", "cuda"): _GENERATOR,
    ("nonzero_static", "*", "cuda"): _GENERATOR,
    ("unique", "*", "cuda"): _GENERATOR,
    ("unique_consecutive", "*", "cuda"): _GENERATOR,
    **{(name, "*", check): _DROPOUT for name in (
        "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout", "nn.functional.rrelu") for check in ("values", "backward")},
    ("nn.functional.rrelu", "*", "grad"): _DROPOUT,
    ("empty", "*", "values"): _UNINITIALISED,
    ("empty_like", "*", "values"): _UNINITIALISED,
    ("empty_permuted", "*", "values"): _UNINITIALISED,
    ("empty_strided", "*", "values"): _UNINITIALISED,
    ("new_empty", "*", "values"): _UNINITIALISED,
    ("new_empty_strided", "*", "values"): _UNINITIALISED,
    **{(name, "*", check): _RANDOM_PROJECTION for name in ("svd_lowrank", "pca_lowrank")
       for check in ("values", "backward", "grad", "vmap")},
    **{(name, "*", check): ("draws its pooling regions (random samples of the input's dtype and device) from the "
                            "simulated GPU's generator, the host's from the CPU generator")
       for name in ("nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d")
       for check in ("values", "backward", "grad", "vmap")},
    ("index_put", "", "backward"): ("complex32 samples: the gradient sums complex32 values, which the host refuses "
                                    "('sum_cpu not implemented for ComplexHalf') and CUDA computes, as the simulation "
                                    "does (half_kernels.py); the host is no reference there"),
    **{("meshgrid", variant, "cuda"): (
        "the OpInfo orders its samples by iterating the set {'xy', 'ij'}, whose order follows Python's string "
        "hashing (PYTHONHASHSEED, random per process): the torch 2.11 record's sample k was made with the other "
        "indexing in about half its processes, and that record keeps no sample options to tell them apart "
        "(records made since keep them, 'k', and are matched on them); simulated and host outputs agree")
       for variant in ("variadic_tensors", "list_of_tensors")},
    **{("nn.functional.scaled_dot_product_attention", "", check): (
        "the simulation runs the kernel CUDA picks (the memory-efficient kernel's formula: attention_kernels.py), "
        "the host its math kernel: other summation orders. Seen on one sample (24: a float attn_mask that "
        "requires grad), whose float32 gradients are 4e-5 from float64's at magnitude 12-17 (the host's 1e-5), "
        "outside assert_close's float32 default (1e-5 + 1.3e-6 relative), and one bfloat16 output element")
       for check in ("values", "backward")},
    **{(name, "*", check): _JITERATOR
       for name in ("jiterator_unary", "jiterator_binary", "jiterator_binary_return_by_ref",
                    "jiterator_2inputs_2outputs", "jiterator_4inputs_with_extra_args")
       for check in ("cuda", "autocast")},
}

OPEN: dict[tuple[str, str, str], str] = {
    ("nn.functional.rms_norm", "", "autocast"): (
        "found by the every-sample sweep on a GPU box (torch 2.11+cu130): from torch 2.13 on, rms_norm is in CUDA "
        "autocast's fp32 list (autocast.py's table, held to the installed torch by "
        "test_autocast_table_is_the_installed_torchs), so there the simulation's float32 is CUDA's and the "
        "difference is the record's torch (2.11's CUDA rms_norm runs _fused_rms_norm in the input's dtype). On "
        "torch 2.11 itself the simulation applied 2.13's list; it now follows the installed torch's lists "
        "(autocast.installed_lists), but whether 2.11's host path then gives the input's dtype, as CUDA's fused "
        "kernel does, is not checked: no torch 2.11 here"),
}


def explanation(name: str, variant: str, check: str) -> tuple[str, str] | None:
    """("explained" or "open", reason) for a listed difference, None for any other."""
    for status, table in (("explained", EXPLAINED), ("open", OPEN)):
        reason = table.get((name, variant, check)) or table.get((name, "*", check))
        if reason is not None:
            return status, reason
    return None
