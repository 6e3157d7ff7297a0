#!/usr/bin/env bash
# Proof of no change for device code: tools/ptx-diff.sh OLD [NEW] compares the PTX of every
# src/cuda TU and architecture of two git revisions (NEW omitted: the working tree), symbol
# names and line information aside. Exit 0: identical; 1: different (per-TU summary); 2: error.
# tools/ptx-diff.sh --help for the options; the work is done by tools/ptx_diff.py.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/ptx_diff.py" "$@"
