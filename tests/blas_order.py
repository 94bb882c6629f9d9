"""Whether this machine's BLAS adds a product's terms in XLA:CPU's order.

A bf16 or f16 product XLA adds in f32 has exact f32 terms -- 8- or 11-bit significands
multiply within f32's 24 -- so its bits (in f32, or rounded back to bf16 or f16) depend
only on the order of the sum.  XLA:CPU adds k in sequence for these small dots (checked
against XLA in the tests that use this); xlaplug's dot is numpy's BLAS, whose kernel is
picked by the CPU: OpenBLAS adds k in sequence on the Intel machines CI has run on, and
in another order on an AMD Zen 4 (6,869 of 65,536 elements differ for a 128x256x512
product).  A test that holds us to XLA's bits for such a product holds us to them where the
BLAS adds in sequence, and to XLA's values within the rounding of the sum elsewhere."""
import numpy as np


def sequential_matmul(a, b):
    """a @ b in f32, k added in sequence (each term exact, so no fused multiply-add
    question arises)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1] * b[k:k + 1, :]
    return acc


def blas_adds_in_sequence(a, b) -> bool:
    """Whether numpy's f32 product of these operands is the sequential sum, bit for bit."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.array_equal((a @ b).view(np.uint32), sequential_matmul(a, b).view(np.uint32))
