"""Per-call overhead of attnsuite.attention() over the C++ call it makes.

The C++ side (_core.time_forward) times backend.forward() alone in a C++ loop; the Python side
times attention() (argument checks, output allocation, DLPack import of four arrays, backend
lookup, GIL release) on the same arrays. A tiny problem keeps the kernel short, so the
difference is the binding's. Prints the median of several trials.

    PYTHONPATH=build/python python3 tools/python/binding_overhead.py [--backend cpu-flash] [--calls 20000]
"""
import argparse
import statistics
import time

import numpy as np

import attnsuite
from attnsuite import _core


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="reference")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 1, 32)).astype(np.float32) for _ in range(3))
    out = np.empty_like(q)
    rows = []
    for _ in range(args.trials):
        cpp = _core.time_forward(args.backend, q, k, v, out, False, "bshd", args.calls)
        start = time.perf_counter()
        for _ in range(args.calls):
            attnsuite.attention(q, k, v, backend=args.backend)
        python = (time.perf_counter() - start) / args.calls
        start = time.perf_counter()
        for _ in range(args.calls):
            attnsuite.attention(q, k, v, backend=args.backend, out=out)
        python_out = (time.perf_counter() - start) / args.calls
        rows.append((cpp, python, python_out))
    cpp, python, python_out = (statistics.median(column) * 1e6 for column in zip(*rows))
    print(f"backend {args.backend}, B=1 H=1 N=4 D=32 fp32, {args.calls} calls x {args.trials} trials (medians):")
    print(f"  C++ backend.forward()            {cpp:8.2f} us")
    print(f"  attnsuite.attention()            {python:8.2f} us  (+{python - cpp:.2f} us)")
    print(f"  attnsuite.attention(out=...)     {python_out:8.2f} us  (+{python_out - cpp:.2f} us)")


if __name__ == "__main__":
    main()
