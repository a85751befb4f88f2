"""opjit demo workload: a numpy program whose time goes into BLAS calls of a few shapes, one of
them small and called often enough for opjit to compile it (OPJIT_HOT_PAYBACK)."""
import numpy as np

rng = np.random.default_rng(7)
a32 = rng.standard_normal((64, 64), dtype=np.float32)
b32 = rng.standard_normal((64, 64), dtype=np.float32)
w64 = rng.standard_normal((256, 128))
x64 = rng.standard_normal(128)
v32 = rng.standard_normal(4096, dtype=np.float32)
s32 = rng.standard_normal((16, 16), dtype=np.float32)

acc = 0.0
for i in range(2000):
    acc += float((a32 @ b32)[0, 0])          # cblas_sgemm 64x64x64
    acc += float((w64 @ x64)[0])             # cblas_dgemv 256x128
    acc += float(v32 @ v32)                  # cblas_sdot n=4096
big = rng.standard_normal((512, 512), dtype=np.float32)
for i in range(20):
    acc += float((big @ big)[1, 1])          # cblas_sgemm 512x512x512
for i in range(500000):
    acc += float((s32 @ s32)[0, 0])          # cblas_sgemm 16x16x16: hot, compiled by the JIT
print(f"demo workload done, checksum {acc:.6g}")
