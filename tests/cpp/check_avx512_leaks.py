#!/usr/bin/env python3
"""Fails when a function that the linker may merge across object files holds AVX-512 code.

The library is built for x86-64-v3 (AVX2); AVX-512 kernels are compiled only inside
ATTNSUITE_AVX512_BEGIN/END regions or under ATTNSUITE_TARGET_AVX512 (src/core/simd_target.hpp).
An inline function or template instantiation (a weak symbol) that picks up AVX-512 code in one
object while the others keep their AVX2 copy is a hazard: the linker keeps any one copy, and on an
AVX2-only CPU the program then dies of SIGILL outside any kernel. Weak functions that belong to
the AVX-512 kernels themselves (their name mentions the vector policy simd::Avx512, which only
AVX-512 code instantiates) are allowed.

Usage: check_avx512_leaks.py --nm NM --objdump OBJDUMP object.o...
"""
import argparse
import re
import subprocess
import sys

# AVX-512 operands (zmm, mask and the upper 16 xmm/ymm registers, embedded broadcast and
# rounding) and EVEX-only mnemonics an AVX512VL compiler may use on xmm/ymm.
AVX512 = re.compile(
    r"%zmm|%k[0-7]\b|\{1to\d+\}|\{[a-z-]*sae\}|%[xy]mm(1[6-9]|2\d|3[01])\b"
    r"|\bv(movdq[au](8|16|32|64)|pternlog|perm[it]2|rndscale|scalef|getexp|getmant|fixupimm|range|reduce"
    r"|(extract|insert|broadcast)[fi](32|64)x|pro[lr]|psraq|pabsq|pmullq|p?compress|p?expand|pconflict"
    r"|plzcnt|p?blendm|fpclass|rcp14|rsqrt14|align[dq]|dbpsadbw|pmovu?s?(db|dw|qb|qw|qd|wb)\b)")
HEADER = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def weak_functions(nm, obj):
    out = subprocess.run([nm, "-C", "--defined-only", obj], check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in ("W", "V", "u"):
            names.add(parts[2])
    return names


def leaks(nm, objdump, obj):
    weak = weak_functions(nm, obj)
    if not weak:
        return {}
    text = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", obj], check=True, capture_output=True,
                          text=True).stdout
    found, current = {}, None
    for line in text.splitlines():
        header = HEADER.match(line)
        if header:
            name = header.group(1)
            current = name if name in weak and "Avx512" not in name else None
        elif current and AVX512.search(line):
            found.setdefault(current, line.strip())
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nm", required=True)
    parser.add_argument("--objdump", required=True)
    parser.add_argument("objects", nargs="+")
    args = parser.parse_args()
    bad = 0
    for obj in args.objects:
        for name, line in sorted(leaks(args.nm, args.objdump, obj).items()):
            print(f"{obj}: weak function {name} holds AVX-512 code: {line}")
            bad += 1
    if bad:
        print(f"{bad} weak functions hold AVX-512 code; include their headers before ATTNSUITE_AVX512_BEGIN "
              "(src/core/simd_target.hpp)")
        return 1
    print(f"{len(args.objects)} objects: no weak function outside the AVX-512 kernels holds AVX-512 code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
