"""Integration host: numpy (Debian's python3-numpy) calling BLAS through matmul, dot and vector
products in float32 and float64. Writes a SHA-256 of every result's raw bytes to argv[1], so
runs with and without the agent can be compared bit for bit. Each product below is repeated
REPS times, and each repetition is one BLAS call of a known signature (see test_numpy)."""
import hashlib
import sys

import numpy as np

REPS = 25
rng = np.random.default_rng(3)
h = hashlib.sha256()
for dt in (np.float32, np.float64):
    a = rng.standard_normal((40, 24)).astype(dt)
    b = rng.standard_normal((24, 33)).astype(dt)
    x = rng.standard_normal(24).astype(dt)
    v = rng.standard_normal(1000).astype(dt)
    for _ in range(REPS):
        h.update((a @ b).tobytes())          # gemm 40x24 @ 24x33
        h.update(np.dot(a, x).tobytes())     # gemv 40x24 . 24
        h.update(np.dot(v, v).tobytes())     # dot n=1000
        h.update(np.matmul(a.T, a[:, :7]).tobytes())  # gemm with a transposed operand
with open(sys.argv[1], "w") as f:
    f.write(h.hexdigest() + "\n")
