"""Under `simgpu run`: the malloc settings reach the program (simgpu.host_malloc), and memory freed on
the main thread and on another thread (autograd's device thread runs a simulated backward pass) is
kept and reused without faulting its pages in again. glibc's malloc directly (ctypes): a torch tensor's
aligned allocation and its intra-op threads would blur which pages a thread faults. One JSON line."""
import ctypes
import json
import os
import resource
import threading

import torch  # noqa: F401 - the process a simulated rank is: torch imported, malloc as it left it

LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]
SIZE, BLOCKS = 16 * 2**20, 3  # 48 MiB live at once, then freed: a step's activations, say


def refaults() -> int:
    """Minor page faults this thread takes touching BLOCKS x SIZE bytes from malloc after the same were touched and freed."""
    faults = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        blocks = [LIBC.malloc(SIZE) for _ in range(BLOCKS)]
        for block in blocks:
            ctypes.memset(block, 1, SIZE)
        for block in blocks:
            LIBC.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    return min(faults[1:])


got = {"env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}, "main": refaults()}
worker = threading.Thread(target=lambda: got.update(thread=refaults()))
worker.start()
worker.join()
print(json.dumps(got))
