"""Golden of the fused int8 MLP block (kernels/tiled/mlp.py), from docs/tile.md and docs/numerics.md.

Computed transposed, as the chip does (tokens are columns):

    H^T = W1^T X^T                       int32, wrapping (golden.gemm_int8)
    h   = DEQ(H^T, fp32(s1))             I2F then FMUL, each rounded
    g   = GELU(h), the tanh form through the sigmoid, nine fp32 vector operations in this order:
          t = h*h; t = t*h; t = t*C3; t = t+h; t = t*K; t = exp(t); t = t+1; t = recip(t); g = h*t
          with C3 = fp32(0.044715), K = fp32(-2 sqrt(2/pi))
    q   = CVT_I8(g, fp32(s2))            int8(g * s2), nearest even, saturating
    Y^T = W2^T q                         int32, wrapping

The hidden rows and token columns past the real sizes (the chip's padding) are zero in H^T, and
GELU(0) = 0 * recip(1 + exp(0)) = +0, so they add nothing to Y^T: the golden works on the real
sizes only.
"""
import numpy as np

from golden import gemm_int8
from golden.vector import bits, floats, to_int8, vector_op

C3 = np.float32(0.044715)
K_GELU = np.float32(-2.0 * np.sqrt(2.0 / np.pi))


def _scalar(v):
    return bits(np.array([v], dtype=np.float32))


def gelu_bits(h):
    """GELU of fp32 bit patterns (uint32), the kernel's nine operations, each rounded."""
    t = vector_op("fmul", h, h)
    t = vector_op("fmul", t, h)
    t = vector_op("fmul", t, _scalar(C3))
    t = vector_op("fadd", t, h)
    t = vector_op("fmul", t, _scalar(K_GELU))
    t = vector_op("exp", t, t)
    t = vector_op("fadd", t, _scalar(1.0))
    t = vector_op("recip", t, t)
    return vector_op("fmul", h, t)


def hidden_bits(w1t, xt, s1):
    """g = GELU(DEQ(W1^T X^T, s1)) as fp32 bit patterns (d_hidden x tokens)."""
    ht = gemm_int8(np.asarray(w1t, np.int8), np.asarray(xt, np.int8)).astype(np.int32)
    return gelu_bits(vector_op("deq", ht.view(np.uint32), _scalar(s1)))


def mlp(w1t, xt, w2t, s1, s2):
    """The chip's Y^T (d_out x tokens, int32) and g (d_hidden x tokens, fp32)."""
    g = hidden_bits(w1t, xt, s1)
    q = to_int8(g, _scalar(s2))
    return gemm_int8(np.asarray(w2t, np.int8), q).astype(np.int32), floats(g).copy()


def gelu_tanh64(h):
    """The tanh-form GELU in float64 (the mathematics, for the SQNR reference)."""
    h = np.asarray(h, np.float64)
    return 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))


def reference(w1t, xt, w2t, s1, s2):
    """float64 Y^T = W2^T (s2 * GELU(s1 * W1^T X^T)): the chip's result without its roundings."""
    h = float(np.float32(s1)) * (np.asarray(w1t, np.float64) @ np.asarray(xt, np.float64))
    return np.asarray(w2t, np.float64) @ (float(np.float32(s2)) * gelu_tanh64(h))
