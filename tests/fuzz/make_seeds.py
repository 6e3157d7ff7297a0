#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Run from anywhere: python3 tests/fuzz/make_seeds.py. The seeds are committed; this script is
how they were made (and how to add more). Formats are described in each fuzz_*.cpp.
"""
import pathlib
import struct

root = pathlib.Path(__file__).resolve().parent / "corpus"
repo = pathlib.Path(__file__).resolve().parents[2]


def write(target, name, data):
    directory = root / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


# fuzz_suite: one format byte (even JSON, odd TOML), then the text.
for suite in sorted((repo / "bench" / "suites").glob("*.json")):
    write("suite", suite.stem + ".json", b"\0" + suite.read_bytes())
suites = {
    "toml_basic": (1, b'name = "t"\nbackends = ["cpu-flash", "cpu-vanilla"]\ndtype = "fp32"\nseq = [128, 256]\n'
                      b'heads = 4\nkv_heads = [4, 2]\ncausal = [false, true]\n[timing]\nmin_reps = 2\nnoise = 0.05\n'),
    "toml_model_window": (1, b'backends = "cpu-flash"\nmodel = ["llama-3.2-1b", "mistral-7b"]\nwindow = [64, 0]\n'
                             b'tokens_per_batch = 4096\nseq = [512]\n[accuracy]\nreference_gflop = 0.5\n'),
    "json_hidden": (0, b'{"backends": ["reference"], "hidden": 512, "head_dim": [64, 128], "kv_heads": [1, 2],'
                       b' "seq": 64, "seq_kv": [32, 96], "layout": "bhsd", "generator": ["randn", "uniform"]}'),
    "json_timing": (0, b'{"backends": "cpu-flash", "timing": {"warmup": 0, "warmup_ms": 5, "min_reps": 1,'
                       b' "max_reps": 3, "noise": 0.5, "min_time_ms": 1, "max_time_ms": 10, "timeout_ms": 100,'
                       b' "cold": false}, "seed": 7, "description": "x"}'),
    "hostile_nesting": (0, b'{"backends": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "hostile_numbers": (0, b'{"backends": ["cpu-flash"], "batch": [1e999, 18446744073709551615, -9223372036854775808],'
                           b' "seq": 1.5, "timing": {"noise": 1e-400}}'),
    "hostile_types": (0, b'{"backends": {"a": 1}, "causal": "yes", "dtype": [null], "timing": [1], "window": "x"}'),
    "hostile_toml": (1, b'backends = [[[["a"]]]]\nseq = 9223372036854775807\nwhen = 1979-05-27T07:32:00Z\n'),
    "empty": (0, b""),
}
for name, (fmt, text) in suites.items():
    write("suite", name, bytes([fmt]) + text)

# fuzz_cli: bench's arguments separated by NUL bytes.
cli = {
    "default": [],
    "flags": ["--backends", "cpu-flash,cpu-vanilla", "--dtype", "fp32,bf16", "--batch", "1,2", "--seq", "128,256",
              "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--causal", "both", "--hot", "--quiet"],
    "model": ["--suite", "default", "--model", "llama-3.2-1b,gemma-2-9b", "--tokens", "8192", "--seq-kv", "512"],
    "window": ["--backends", "reference", "--window", "16,0", "--layout", "bhsd", "--generator", "uniform",
               "--seed", "3", "--noise", "0.02", "--min-reps", "2", "--max-reps", "9", "--warmup", "0",
               "--max-time-ms", "50", "--reference-gflop", "0.1"],
    "resume": ["--resume", "--out", "sweep", "--force"],
    "bad": ["--batch", "0", "--seq", "-1", "--causal", "maybe", "--window", "1"],
}
for name, args in cli.items():
    write("cli", name, b"\0".join(a.encode() for a in args))

# fuzz_problem: 11 little-endian 32-bit words (see fuzz_problem.cpp).
F32, F16, BF16, BHSD, CAUSAL = 0, 1, 2, 4, 8


def problem(batch, hq, hkv, nq, nk, d, dv=0, left=-1, right=-1, flags=F32, scale=0.0):
    return struct.pack("<10if", batch, hq, hkv, nq, nk, d, dv, left, right, flags, scale)


problems = {
    "small": problem(1, 2, 2, 7, 9, 32),
    "gqa_causal": problem(2, 4, 2, 33, 17, 64, flags=CAUSAL),
    "window_bf16": problem(1, 2, 1, 20, 40, 48, 40, 5, 0, BF16 | BHSD),
    "masked_rows": problem(1, 1, 1, 40, 8, 32, flags=F16 | CAUSAL),
    "scale": problem(1, 1, 1, 16, 16, 64, scale=2.5),
    "huge": problem(1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30),
    "zero": problem(0, 0, 0, 0, 0, 0),
    "not_divisible": problem(1, 6, 4, 8, 8, 64),
    "nan_scale": struct.pack("<10iI", 1, 1, 1, 8, 8, 64, 0, -1, -1, 0, 0x7FC00000),
}
for name, data in problems.items():
    write("problem", name, data)
