"""Host time per call of the PyTorch drop-in against PyTorch's own SDPA, where the GPU is idle
(tiny inputs: each call's time is its host work): forward alone (no grad) and forward + backward.
    python tools/device/drop_in_overhead.py [--device cuda] [--backend flash3] [--calls 2000]
Prints one line per path: microseconds per call, median of 5 rounds."""
import argparse
import statistics
import time

import torch

import attnsuite.torch as drop_in


def per_call_us(step, calls, synchronize):
    rounds = []
    for _ in range(5):
        synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        synchronize()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", default="flash3" if torch.cuda.is_available() else "cpu-flash")
    parser.add_argument("--dtype", default="bfloat16" if torch.cuda.is_available() else "float32")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    cuda = args.device.startswith("cuda")
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    # One head of 64 rows at d64: the kernels take microseconds, the calls are host-bound.
    q, k, v = (torch.randn(1, 1, 64, 64, device=args.device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.ones(1, 1, 64, 64, device=args.device, dtype=dtype)

    def forward(attend):
        def step():
            with torch.no_grad():
                attend(q, k, v, is_causal=True)
        return step

    def training(attend):
        def step():
            attend(q, k, v, is_causal=True).backward(grad)
        return step

    drop_in.set_backend(args.backend)
    for name, attend in (("PyTorch SDPA", drop_in._torch_sdpa), (f"drop-in ({args.backend})",
                                                                  drop_in.scaled_dot_product_attention)):
        for path, make in (("forward", forward), ("forward + backward", training)):
            step = make(attend)
            for _ in range(50):
                step()
            print(f"{name:<24} {path:<20} {per_call_us(step, args.calls, synchronize):8.1f} us/call", flush=True)


if __name__ == "__main__":
    main()
