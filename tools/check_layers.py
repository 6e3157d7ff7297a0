#!/usr/bin/env python3
"""The layer rule over the #include graph (docs/architecture.md, "Layers").

Every `#include "..."` in src/, include/, apps/, python/src/ and tests/ is resolved the way the
compiler resolves it (the including file's folder, then include/ and src/), both ends are mapped
to their room, and the edge is checked against the rule table below. Each include the table does
not allow is one line, `file:line includes X (room A may not include room B)`; any such line makes
the exit status 1. The table here and the one in docs/architecture.md say the same.

    python3 tools/check_layers.py               # this repository
    python3 tools/check_layers.py --root DIR    # another tree of the same shape
    python3 tools/check_layers.py --self-test   # a tiny tree with one violation must fail

ctest runs the check (`include_layers`) and the self-test (`include_layers_self_test`).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

SOURCE_SUFFIXES = (".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh", ".inl")
HEADER_SUFFIXES = (".hpp", ".h", ".cuh", ".inl")
SCANNED = ("src", "include", "apps", "python/src", "tests")

# Rooms, lowest first, and the rooms each may include besides its own files. A target is a room
# ("core": any of its files) or one sub-room ("cuda/common": the files under src/cuda/common/).
# Mirrored in docs/architecture.md.
EVERY_LIBRARY_ROOM = {"include", "fault", "core", "sparse", "cpu", "cuda", "peers", "ring",
                      "backends", "bench", "report", "tune"}
MAY_INCLUDE = {
    "include": set(),
    "fault": {"include"},
    "core": {"include", "fault"},
    "sparse": {"include", "core"},
    "cpu": {"include", "core", "sparse"},
    "cuda": {"include", "core", "sparse", "fault"},
    "peers": {"include", "core", "cuda/common"},
    "ring": {"include", "core", "cpu", "cuda"},
    "backends": {"include", "core", "cpu", "cuda", "peers", "ring"},
    "bench": {"include", "core"},
    "report": {"include", "core", "bench"},
    "tune": {"include", "core", "sparse", "bench", "report"},
    "apps": EVERY_LIBRARY_ROOM,
    "python": EVERY_LIBRARY_ROOM,
    "tests": None,  # anything
}

# Rooms that no header outside them may include: test-only fault injection stays in the .cpp
# files that host an injection site, never in an interface.
SOURCE_ONLY = {"fault"}

# Inside a room: a file may include its own sub-room, the room's top-level files (cpu/common.hpp,
# cuda/cuda_backends.hpp, peers/peers.hpp) and the room's shared layers, each of those only the
# layers before it; the top-level files may include every sub-room (registration).
SHARED_LAYERS = {"cuda": ["common", "sm80", "hopper"]}

# Includes between sub-rooms that the rule above does not allow, kept on purpose:
# (including sub-room, included sub-room or file, why).
# An exception no #include uses any more is reported too (stale), so the list stays the truth.
EXCEPTIONS = [
    ("cuda/flash3", "cuda/sparge/launch.hpp",
     "the block-mask parameters that flash3's kernel takes when it runs for sparge"),
    ("cuda/sage", "cuda/sparge/launch.hpp",
     "the block-mask parameters that sage2's wgmma kernel takes when it runs for sparge-sage"),
    ("cuda/sparge", "cuda/flash2", "sparge runs flash2's kernel with a block mask"),
    ("cuda/sparge", "cuda/flash3", "sparge runs flash3's kernel with a block mask on sm_90"),
    ("cuda/sparge", "cuda/sage", "sparge-sage runs sage2's wgmma kernel with a block mask"),
]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def location(rel):
    """(room, sub-room or None) of a repository-relative path, or None outside every room."""
    parts = rel.split("/")
    if parts[0] == "include":
        return ("include", None)
    if parts[0] == "apps":
        return ("apps", None)
    if parts[0] == "tests":
        return ("tests", None)
    if parts[:2] == ["python", "src"]:
        return ("python", None)
    if parts[0] == "src" and len(parts) >= 3:
        return (parts[1], parts[2] if len(parts) >= 4 else None)
    return None


def name(loc):
    room, sub = loc
    return room if sub is None else f"{room}/{sub}"


def resolve(root, including, target):
    """The repository-relative path that `#include "target"` in `including` reads, or None."""
    for base in (os.path.dirname(including), "include", "src"):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate.replace(os.sep, "/")
    return None


def target_matches(spec, rel, loc):
    if "/" in spec and "." in spec.rsplit("/", 1)[1]:  # a file
        return rel == "src/" + spec
    return spec in (loc[0], name(loc))


USED_EXCEPTIONS = set()


def within_room(src, dst, rel):
    """None when a file of sub-room src may include `rel` (sub-room dst) of the same room."""
    room = src[0]
    if src[1] == dst[1] or dst[1] is None or src[1] is None:
        return None
    layers = SHARED_LAYERS.get(room, [])
    if dst[1] in layers and (src[1] not in layers or layers.index(dst[1]) < layers.index(src[1])):
        return None
    for index, (frm, spec, _) in enumerate(EXCEPTIONS):
        if frm == name(src) and target_matches(spec, rel, dst):
            USED_EXCEPTIONS.add(index)
            return None
    shared = ", ".join(f"{room}/{layer}" for layer in layers)
    allowed = f"its own files, {room}'s top-level headers" + (f" and {shared}" if shared else "")
    return f"room {name(src)} may not include room {name(dst)}: a sub-room includes {allowed}"


def check_edge(src, dst, rel, including):
    """None when allowed, else the reason."""
    if src[0] == "tests":
        return None
    if dst[0] in SOURCE_ONLY and src[0] != dst[0] and including.endswith(HEADER_SUFFIXES):
        return f"room {src[0]} may not include room {dst[0]} from a header"
    if src[0] == dst[0]:
        return within_room(src, dst, rel)
    allowed = MAY_INCLUDE.get(src[0])
    if allowed is None:
        return None
    if any(target_matches(spec, rel, dst) for spec in allowed):
        return None
    return f"room {src[0]} may not include room {name(dst) if dst[0] == 'cuda' else dst[0]}"


def scan(root):
    violations = []
    files = 0
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for file_name in sorted(names):
                if not file_name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, file_name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                src = location(rel)
                files += 1
                if src is None or (src[0] not in MAY_INCLUDE):
                    violations.append(f"{rel}:1 is in no room of the rule table (tools/check_layers.py, MAY_INCLUDE)")
                    continue
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for number, line in enumerate(handle, 1):
                        match = INCLUDE_RE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        resolved = resolve(root, rel, target)
                        if resolved is None:
                            if src[0] != "tests":
                                violations.append(f"{rel}:{number} includes {target} (not found next to the file, "
                                                  "in include/ or in src/)")
                            continue
                        dst = location(resolved)
                        if dst is None or dst[0] not in MAY_INCLUDE:
                            if src[0] != "tests":
                                violations.append(f"{rel}:{number} includes {target} ({resolved} is in no room)")
                            continue
                        reason = check_edge(src, dst, resolved, rel)
                        if reason:
                            violations.append(f"{rel}:{number} includes {target} ({reason})")
    return files, violations


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="repository root (default: this script's)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on a tiny tree")
    parser.add_argument("--no-stale-check", action="store_true",
                        help="do not report exceptions that no #include uses (the self-test's small trees)")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    files, violations = scan(args.root)
    if not args.no_stale_check:
        violations += [f"tools/check_layers.py: exception ({frm} includes {spec}) is used by no #include: remove it"
                       for index, (frm, spec, _) in enumerate(EXCEPTIONS) if index not in USED_EXCEPTIONS]
    for line in violations:
        print(line)
    if files == 0:
        print(f"{args.root}: no source files under {', '.join(SCANNED)}")
        return 1
    if violations:
        print(f"{len(violations)} include(s) break the layer rule (docs/architecture.md, \"Layers\")")
        return 1
    print(f"layers: {files} files, every #include follows the rule")
    return 0


def self_test():
    """A tree that follows the rule passes; one bench → cpu include, one kernel → kernel include
    and one cpu → ring include (ring includes cpu, backends both) fail with one line each; fault
    from a header fails."""
    tree = {
        "include/attnsuite/backend.hpp": "",
        "src/core/registry.cpp": '#include "attnsuite/backend.hpp"\n',
        "src/fault/fault.hpp": "",
        "src/core/memory.cpp": '#include "fault/fault.hpp"\n',
        "src/cpu/common.hpp": '#include "core/parallel.hpp"\n',
        "src/core/parallel.hpp": "",
        "src/cpu/flash/flash.cpp": '#include "cpu/common.hpp"\n',
        "src/cuda/common/check.hpp": "",
        "src/cuda/flash2/primitives.cuh": '#include "cuda/common/check.hpp"\n',
        "src/cuda/flash3/primitives.cuh": '#include "cuda/common/check.hpp"\n',
        "src/cuda/sparge/launch.hpp": "",
        "src/cuda/sage/launch.cpp": '#include "cuda/sparge/launch.hpp"\n',
        "src/bench/runner.cpp": '#include "core/parallel.hpp"\n#include "attnsuite/backend.hpp"\n',
        "tests/cpp/test_x.cpp": '#include "cpu/common.hpp"\n#include "cuda/flash2/primitives.cuh"\n',
    }
    cases = [
        ({}, []),
        ({"src/bench/runner.cpp": '#include "core/parallel.hpp"\n#include "cpu/common.hpp"\n'},
         ["src/bench/runner.cpp:2 includes cpu/common.hpp (room bench may not include room cpu)"]),
        ({"src/cuda/sage/kernel.cuh": '#include "cuda/common/check.hpp"\n#include "cuda/sparge/launch.hpp"\n'
                                      '#include "cuda/flash3/primitives.cuh"\n'},
         ["src/cuda/sage/kernel.cuh:3 includes cuda/flash3/primitives.cuh (room cuda/sage may not include room "
          "cuda/flash3: a sub-room includes its own files, cuda's top-level headers and cuda/common, cuda/sm80, "
          "cuda/hopper)"]),
        ({"src/ring/cpu_ring.hpp": '#include "cpu/common.hpp"\n',
          "src/cpu/register.cpp": '#include "cpu/common.hpp"\n#include "ring/cpu_ring.hpp"\n',
          "src/backends/builtin.cpp": '#include "cpu/common.hpp"\n#include "ring/cpu_ring.hpp"\n'},
         ["src/cpu/register.cpp:2 includes ring/cpu_ring.hpp (room cpu may not include room ring)"]),
        ({"src/cuda/common/check.hpp": '#include "fault/fault.hpp"\n'},
         ["src/cuda/common/check.hpp:1 includes fault/fault.hpp (room cuda may not include room fault from a header)"]),
    ]
    failures = 0
    for overlay, expected in cases:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in {**tree, **overlay}.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w", encoding="utf-8") as handle:
                    handle.write(text)
            run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root, "--no-stale-check"],
                                 capture_output=True, text=True, check=False)
            got = run.stdout.splitlines()[:-1]  # the last line is the summary
            if got != expected or run.returncode != (1 if expected else 0):
                failures += 1
                print(f"self-test: tree with {sorted(overlay) or 'no change'}: exit {run.returncode}\n"
                      f"  expected {expected}\n  got      {got}")
    # The stale check: on the base tree every exception but sage → sparge/launch.hpp goes unused.
    with tempfile.TemporaryDirectory() as root:
        for rel, text in tree.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as handle:
                handle.write(text)
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root], capture_output=True,
                             text=True, check=False)
        stale = run.stdout.splitlines()[:-1]
        if (run.returncode != 1 or len(stale) != len(EXCEPTIONS) - 1
                or not all(line.startswith("tools/check_layers.py: exception (") for line in stale)
                or any("(cuda/sage includes cuda/sparge/launch.hpp)" in line for line in stale)):
            failures += 1
            print(f"self-test: the stale-exception check: exit {run.returncode}, got {stale}")
    if failures:
        print(f"self-test: {failures} case(s) failed")
        return 1
    print(f"self-test: {len(cases) + 1} trees checked as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
