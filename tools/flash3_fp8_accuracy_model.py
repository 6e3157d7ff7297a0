#!/usr/bin/env python3
"""The accuracy model behind docs/kernels/flash3-fp8.md "Accuracy".

flash3-fp8's numerics in numpy float64: Q, K, V quantized per tensor to e4m3 (amax -> 448,
round to nearest even, saturating), P = exp(s - max) rounded to e4m3 unnormalized, everything
else exact. Prints the cosine similarity against exact attention of the unquantized N(0, 1)
inputs, with all / only some of the quantization steps. Usage: python3 flash3_fp8_accuracy_model.py
"""
import numpy as np


def e4m3(x):
    """Round to the nearest e4m3 value (ties to even), saturating to +-448."""
    x = np.asarray(x, dtype=np.float64)
    magnitude = np.minimum(np.abs(x), 448.0)
    exponent = np.maximum(np.floor(np.log2(np.maximum(magnitude, 2.0**-9))), -6)  # subnormals: 2^-9 steps
    step = 2.0 ** (exponent - 3)
    return np.sign(x) * np.minimum(np.round(magnitude / step) * step, 448.0)  # np.round: half to even


def quantize(x):
    amax = np.abs(x).max()
    return e4m3(x * (448.0 / amax)) * (amax / 448.0)


def attention(q, k, v, causal, fp8_p):
    n, d = q.shape
    s = q @ k.T / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((n, n))) > 0, s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (e4m3(p) if fp8_p else p) @ v / p.sum(axis=1, keepdims=True)


def cosine(a, b):
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def main():
    n = 1024
    print(f"N = {n}, one head, N(0, 1) inputs; cosine against exact attention of the unquantized inputs")
    print("| quantized | d128 | d128 causal | d64 | d64 causal |")
    rows = {"Q, K, V and P": (True, True), "Q, K, V only": (True, False), "P only": (False, True)}
    results = {name: [] for name in rows}
    for d in (128, 64):
        for causal in (False, True):
            rng = np.random.default_rng(0)
            q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
            exact = attention(q, k, v, causal, fp8_p=False)
            for name, (inputs, fp8_p) in rows.items():
                qq, kk, vv = (quantize(t) for t in (q, k, v)) if inputs else (q, k, v)
                results[name].append(cosine(exact, attention(qq, kk, vv, causal, fp8_p)))
    for name, values in results.items():
        print(f"| {name} | " + " | ".join(f"{value:.5f}" for value in values) + " |")


if __name__ == "__main__":
    main()
