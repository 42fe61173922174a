"""Single-process multi-GPU APIs: torch.cuda.comm, torch.cuda.nccl, nn.DataParallel and model parallel.

Importing the package registers every cell (conformance/comm/cells.py) and the APIs' confirmed defects
(conformance/comm/findings.py); the tests are in conformance/test_single_process.py and run in the
single-process worker (conformance/single_process.py).
"""
from conformance.comm import broadcast, findings, nccl, reduce_add, scatter_gather, training  # noqa: F401
