#!/usr/bin/env python3
"""The tree's C++ and CUDA sources are formatted by .clang-format (clang-format 14, Debian 12's).

Usage: tools/check_format.py [--clang-format PATH] [--root DIR] [--fix] [--self-test]

Checks every tracked .cpp/.hpp/.cu/.cuh/.h outside docs/results with `clang-format
--dry-run --Werror` and prints, for each file that is not formatted, its name and the first
lines that would change; exit 1 when any is not, 0 when all are, 2 on an error (no clang-format,
another major version than 14: other versions format some constructs differently, so their
verdict would not match CI's). --fix formats those files in place instead. --self-test checks
that a badly formatted file is reported (the check can fail) and a formatted one is not.
"""
import argparse
import difflib
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".h")
EXCLUDED_PREFIXES = ("docs/results/",)
MAJOR = 14


def fail(message: str) -> "NoReturn":
    print(f"check_format: {message}", file=sys.stderr)
    sys.exit(2)


def clang_format_binary(requested: str | None) -> str:
    path = requested or shutil.which("clang-format")
    if not path:
        fail("no clang-format on the PATH (Debian: apt-get install clang-format; scripts/setup.sh installs it)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\d+)\.", version)
    if not found or int(found.group(1)) != MAJOR:
        fail(f"{path} is '{version.strip()}'; allowed: major version {MAJOR} (Debian 12's, the one CI uses)")
    return path


def tracked_sources(root: pathlib.Path) -> list[str]:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True)
    if listed.returncode != 0:
        fail(f"{root} is not a git checkout: {listed.stderr.strip()}")
    return sorted(f for f in listed.stdout.split("\0")
                  if f.endswith(SUFFIXES) and not f.startswith(EXCLUDED_PREFIXES) and (root / f).is_file())


def unformatted(clang_format: str, root: pathlib.Path, files: list[str]) -> list[str]:
    """The files clang-format would change (it runs in `root`, so it reads root/.clang-format)."""
    bad = []
    for start in range(0, len(files), 200):
        batch = files[start:start + 200]
        run = subprocess.run([clang_format, "--dry-run", "--Werror", *batch], cwd=root, capture_output=True, text=True)
        if run.returncode != 0:
            named = {m.group(1) for m in re.finditer(r"^(\S+?):\d+:\d+: (?:error|warning)", run.stderr, re.M)}
            if not named:
                fail(f"clang-format failed: {run.stderr.strip()[:400]}")
            bad += [f for f in batch if f in named]
    return bad


def show(clang_format: str, root: pathlib.Path, name: str, lines: int = 8) -> None:
    original = (root / name).read_text().splitlines()
    formatted = subprocess.run([clang_format, name], cwd=root, capture_output=True, text=True).stdout.splitlines()
    diff = list(difflib.unified_diff(original, formatted, f"{name} (as is)", f"{name} (formatted)", n=0, lineterm=""))
    print(f"{name}: not formatted by .clang-format (tools/check_format.py --fix formats it)")
    for line in diff[2:2 + lines]:
        print(f"    {line}")


def self_test(clang_format: str, root: pathlib.Path) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        tree = pathlib.Path(scratch)
        shutil.copy(root / ".clang-format", tree / ".clang-format")
        (tree / "good.cpp").write_text("int add(int a, int b) { return a + b; }\n")
        (tree / "bad.cpp").write_text("int  add( int a,int b ){return a+b;}\n")
        found = unformatted(clang_format, tree, ["good.cpp", "bad.cpp"])
    if found != ["bad.cpp"]:
        print(f"check_format self-test: expected only bad.cpp to be reported, got {found}", file=sys.stderr)
        return 1
    print("check_format self-test: a badly formatted file is reported, a formatted one is not")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clang-format", help="the clang-format binary (default: the one on the PATH)")
    parser.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    parser.add_argument("--fix", action="store_true", help="format the files that are not, in place")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    clang_format = clang_format_binary(args.clang_format)
    root = pathlib.Path(args.root).resolve()
    if args.self_test:
        return self_test(clang_format, root)
    files = tracked_sources(root)
    bad = unformatted(clang_format, root, files)
    if args.fix:
        if bad:
            subprocess.run([clang_format, "-i", *bad], cwd=root, check=True)
        print(f"check_format: formatted {len(bad)} of {len(files)} files")
        return 0
    for name in bad:
        show(clang_format, root, name)
    print(f"check_format: {len(files) - len(bad)} of {len(files)} files formatted" +
          (f"; {len(bad)} not" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
