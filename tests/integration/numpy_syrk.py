"""Integration host: numpy's a @ a.T (Debian's python3-numpy calls cblas_?syrk for a matrix
times its own transpose, then mirrors the triangle) for small float32 and float64 shapes, each
result checked against a float64 product computed without BLAS, within the bound of a sum of k
products. Each product is repeated until argv[1] seconds have passed (at least REPS times), with
short pauses; after the first pass the JIT settles (opjit_settle, when the agent runs in jit
mode: every compile it queued ends however loaded the machine), so that compiled variants serve
the later calls. Prints "products N bad M" and exits 1 when M > 0."""
import ctypes
import sys
import time

import numpy as np

REPS = 40
SHAPES = ((40, 24), (7, 5), (64, 64), (33, 100))
rng = np.random.default_rng(5)
cases = []
for dt in (np.float32, np.float64):
    for n, k in SHAPES:
        a = rng.standard_normal((n, k)).astype(dt)
        a64 = a.astype(np.float64)
        exact = (a64[:, None, :] * a64[None, :, :]).sum(-1)
        mag = (np.abs(a64)[:, None, :] * np.abs(a64)[None, :, :]).sum(-1)
        bound = 4.0 * (k + 2) * np.finfo(dt).eps * mag
        cases.append((a, exact, bound))
settle = getattr(ctypes.CDLL(None), "opjit_settle", None)
products = bad = 0
end = time.monotonic() + float(sys.argv[1])
while products < REPS * len(cases) or time.monotonic() < end:
    for a, exact, bound in cases:
        c = a @ a.T
        products += 1
        if c.dtype != a.dtype or not (np.abs(c - exact) <= bound).all():
            bad += 1
    if products == len(cases) and settle:
        settle(300000)
    time.sleep(0.002)
print(f"products {products} bad {bad}")
sys.exit(1 if bad else 0)
