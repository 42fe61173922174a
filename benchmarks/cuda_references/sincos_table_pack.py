"""Pack curand_math_probe's __sincosf table (raw .bin files) for the trip back from a GPU box: per function,
the difference of its bits from float32(sin or cos(2 pi q 2^-25)), int32, in parts of 2^23 + 1 cells,
xz-compressed; plus what the table shows at a glance (printed as JSON).
    python3 sincos_table_pack.py RAW_DIR OUT_DIR [parts]"""
import json
import lzma
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

raw, out = sys.argv[1], sys.argv[2]
parts = int(sys.argv[3]) if len(sys.argv) > 3 else 3
found = np.fromfile(f"{raw}/found.bin", np.uint8).astype(bool)
q = np.arange(found.size, dtype=np.float64)
facts: dict = {"cells": int(found.size), "found": int(found.sum())}
bounds = np.linspace(0, found.size, parts + 1).astype(np.int64)
for name, fn in (("sin", np.sin), ("cos", np.cos)):
    bits = np.fromfile(f"{raw}/{name}.bin", np.uint32)
    value = bits.view(np.float32).astype(np.float64)
    ref = fn(2 * np.pi * q * 2.0**-25).astype(np.float32).view(np.uint32).astype(np.int64)
    residual = np.where(found, bits.astype(np.int64) - ref, 0).astype(np.int32)
    mant = bits & 0x7FFFFF
    big = found & (np.abs(value) >= 0.5) & (np.abs(value) < 1)
    tz = np.array([(int(m) & -int(m)).bit_length() - 1 if m else 23 for m in mant[big][::997]])
    err = np.abs(value - fn(2 * np.pi * q * 2.0**-25))[found]
    facts[name] = {"residual_min": int(residual.min()), "residual_max": int(residual.max()),
                   "residual_zero_fraction": float((residual[found] == 0).mean()),
                   "max_abs_error_vs_exact_at_cell_start": float(err.max()),
                   "mantissa_trailing_zeros_in_[0.5,1)_min": int(tz.min()) if tz.size else None,
                   "first_values": [float(x) for x in value[:6]]}
    chunks = [residual[bounds[i]:bounds[i + 1]].tobytes() for i in range(parts)]
    with ProcessPoolExecutor(parts) as pool:
        blobs = list(pool.map(lzma.compress, chunks))
    for i, blob in enumerate(blobs):
        with open(f"{out}/{name}{i}.xz", "wb") as f:
            f.write(blob)
        facts[name][f"part{i}_bytes"] = len(blob)
print(json.dumps(facts))
