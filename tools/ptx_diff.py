#!/usr/bin/env python3
"""Proof of no change for device code: the PTX of every instantiation of two commits, compared.

Usage: tools/ptx-diff.sh [options] OLD [NEW]

OLD and NEW are git revisions; NEW omitted (or ".") is the working tree, uncommitted changes
included. Each revision is exported into a temporary tree, configured with CMake once (the
compile commands are cached per CMake inputs), and every .cu under src/cuda that the build
compiles is turned into PTX (`nvcc -ptx`: no ptxas) for each architecture the build gives it —
the flash3 and sage-wgmma TUs for sm_90a, the others for sm_90a and sm_80 — with the build's own
flags, defines and includes. The PTX is normalized before the comparison:
  - comments, `.file` and `.loc` lines (the build uses -lineinfo) and `.section .debug_*` blocks
    are dropped, so line numbers and file names do not count;
  - every mangled symbol (`_Z...`: kernels, device functions, their parameters, shared arrays,
    anonymous-namespace hashes) and basic-block label is renamed by order of first appearance
    within its top-level item (a kernel, a function, a declaration), and the items are compared
    in sorted order, so renamed functions, types and namespaces and the order in which a TU
    defines its kernels do not count, while any difference in what the code does does.
Exit status: 0 when every TU's PTX is identical (or, with --ptxas, every differing one assembles
to a byte-identical cubin), 1 (with a per-TU summary and the first lines of each difference)
when not, 2 on an error. With --ptxas, each differing pair is also assembled
(ptxas -v, both sides): byte-identical cubins (the same SASS: what differed in the PTX, e.g. the
operand order of a commutative multiply, did not reach the machine code) are said so; otherwise
its kernels' registers, spills and SASS bytes are printed side by side, a first look at what the
change did to the machine code before the GPU A/B.

The PTX of a (TU, architecture) is cached under $ATTNSUITE_PTX_CACHE (default
~/.cache/attnsuite-ptx-diff), keyed by the compiler, the compile command and the contents of
every file of the tree the TU includes (quoted and angle includes that resolve inside the tree,
followed recursively, conditional ones included): a TU whose sources did not change between
OLD and NEW is compiled once.
"""
import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT_TOKEN = "@ROOT@"
SELF_CHECK_TU = "src/cuda/common/generate.cu"
# The build options that make CMake compile every device TU there is: flash3 and sage-wgmma are
# default ON, the flash2 variants are not (tools/device/run.sh builds them for experiments).
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DATTNSUITE_CUDA=ON", "-DATTNSUITE_FLASH3=ON", "-DATTNSUITE_FLASH2_VARIANTS=ON",
    "-DATTNSUITE_TESTS=OFF", "-DATTNSUITE_PYTHON=OFF", "-DATTNSUITE_ONNXRUNTIME=OFF", "-DATTNSUITE_TORCH=OFF",
    "-DATTNSUITE_CUDNN_PEER=OFF", "-Wno-dev"
]


class Failure(Exception):
    """An error that ends the run with one line and exit status 2."""


# ---- PTX normalization ------------------------------------------------------------------------

_SYMBOL = re.compile(r"_Z[A-Za-z0-9_$]*")
_DEBUG_LABEL = re.compile(r"^\$L__(tmp|func_begin|func_end)\d+:$")


_LABEL = re.compile(r"\$L__BB\d+_\d+|__local_depot\d+")
_HEADER = (".version", ".target", ".address_size")


def _top_level_blocks(lines):
    """The module header and its top-level items (a kernel or function with its body, a
    declaration, a global), each as a list of lines."""
    header, blocks, current, depth = [], [], [], 0
    for line in lines:
        if depth == 0 and not current and line.startswith(_HEADER):
            header.append(line)
            continue
        current.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and line.endswith(("}", ";")):
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return header, blocks


def normalize_ptx(text):
    """The PTX `text` without what does not change the program: comments, line information, debug
    sections, the spelling of mangled names and basic-block labels (renamed _S0, _S1, ... and L0,
    L1, ... by first appearance within each top-level item), and the order of the items (a kernel
    moved to another header, or defined before another, compiles to the same code)."""
    lines = []
    in_debug_section = False
    depth = 0
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if in_debug_section:
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                in_debug_section = False
            continue
        if line.startswith(".section") and ".debug" in line:
            in_debug_section, depth = True, 0
            continue
        if line.startswith((".file", ".loc")) or _DEBUG_LABEL.match(line):
            continue
        lines.append(" ".join(line.split()))
    header, blocks = _top_level_blocks(lines)
    normalized = []
    for block in blocks:
        names, labels = {}, {}

        def rename(match, names=names):
            return names.setdefault(match.group(0), f"_S{len(names)}")

        def relabel(match, labels=labels):
            return labels.setdefault(match.group(0), f"L{len(labels)}")

        normalized.append("\n".join(_LABEL.sub(relabel, _SYMBOL.sub(rename, line)) for line in block))
    return "\n".join(header + sorted(normalized)) + "\n"


# ---- Trees and compile commands ---------------------------------------------------------------


def run(command, cwd=None, **kwargs):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise Failure(f"{shlex.join(map(str, command))} failed ({result.returncode}):\n"
                      f"{(result.stderr or result.stdout).strip()[-3000:]}")
    return result.stdout


def export_tree(repo, revision, destination):
    """The tracked files of `revision` in `destination` (git archive: no worktree to clean up)."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd=repo,
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise Failure(f"revision '{revision}' is not a commit of {repo}; give a git revision, or '.' for the working tree")
    commit = found.stdout.strip()
    destination.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=repo, stdout=subprocess.PIPE)
    run(["tar", "-x", "-C", str(destination)], stdin=archive.stdout)
    if archive.wait() != 0:
        raise Failure(f"git archive {commit} failed")
    return commit


def tree_files(tree):
    """The files of `tree` relative to it: in a git checkout those git tracks and the untracked
    ones it does not ignore (not build folders); in an exported tree all of them."""
    if (tree / ".git").exists():
        listing = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=tree)
        return sorted(name for name in set(listing.split("\0")) if name and (tree / name).is_file())
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())


def cmake_inputs_key(tree):
    """A hash of what decides the compile commands: every CMake file, and the list of sources
    (src/cuda globs its .cu and .cpp files)."""
    digest = hashlib.sha256()
    for relative in tree_files(tree):
        path = tree / relative
        if path.name == "CMakeLists.txt" or path.suffix == ".cmake":
            digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
        elif relative.startswith("src/"):
            digest.update(relative.encode() + b"\0")
    digest.update(" ".join(CMAKE_OPTIONS).encode())
    return digest.hexdigest()


_COMMANDS_THIS_RUN = {}  # cmake inputs key -> entries: both sides of one run share them without a cache


def compile_commands(tree, cache, scratch):
    """The CUDA compile commands of src/cuda in `tree`, with the tree's path as ROOT_TOKEN."""
    key = cmake_inputs_key(tree)
    if key in _COMMANDS_THIS_RUN:
        # The same CMake inputs (the commands differ only in ROOT_TOKEN): configuring the other
        # tree into the same build folder would fail on CMake's cache (another source folder).
        return _COMMANDS_THIS_RUN[key]
    cached = cache / "commands" / f"{key}.json" if cache else None
    if cached and cached.exists():
        return json.loads(cached.read_text())
    build = scratch / f"cmake-{key[:12]}"
    command = ["cmake", "-S", str(tree), "-B", str(build), *CMAKE_OPTIONS]
    if shutil.which("ninja"):
        command += ["-G", "Ninja"]
    run(command)
    entries = []
    for entry in json.loads((build / "compile_commands.json").read_text()):
        file = pathlib.Path(entry["file"])
        if file.suffix != ".cu" or not file.is_relative_to(tree / "src" / "cuda"):
            continue
        arguments = entry.get("arguments") or shlex.split(entry["command"])
        if any(str(build) in a for a in arguments):
            raise Failure(f"{file}: its compile command names the build folder, which is not kept")
        entries.append({
            "file": file.relative_to(tree).as_posix(),
            "arguments": [a.replace(str(tree), ROOT_TOKEN) for a in arguments],
        })
    entries.sort(key=lambda e: e["file"])
    _COMMANDS_THIS_RUN[key] = entries
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(entries))
    return entries


_GENCODE = re.compile(r"^(?:--generate-code|-gencode)=?arch=compute_(\w+),code=")


def ptx_commands(arguments):
    """(arch, arguments without output, architectures and dependency flags) of one compile."""
    archs, kept = [], []
    skip = 0
    for i, argument in enumerate(arguments):
        if skip:
            skip -= 1
            continue
        if i == 0 and os.path.basename(argument) in ("ccache", "sccache"):
            continue
        gencode = _GENCODE.match(argument)
        if gencode:
            archs.append(gencode.group(1))
        elif argument in ("-gencode", "--generate-code"):
            archs.append(_GENCODE.match("-gencode=" + arguments[i + 1]).group(1))
            skip = 1
        elif argument.startswith(("-arch=compute_", "--gpu-architecture=compute_", "-arch=sm_",
                                  "--gpu-architecture=sm_")):
            archs.append(argument.split("_", 1)[1])
        elif argument in ("-o", "-MF", "-MT", "-MQ", "--output-file", "--dependency-output"):
            skip = 1
        elif argument in ("-c", "-MD", "-MMD", "--compile") or argument.startswith(("-o=", "--output-file=")):
            continue
        else:
            kept.append(argument)
    if not archs:
        raise Failure(f"no GPU architecture in {shlex.join(arguments)}")
    return sorted(set(archs)), kept


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def include_dirs(arguments, tree):
    dirs = []
    for i, argument in enumerate(arguments):
        value = None
        if argument.startswith("-I") and len(argument) > 2:
            value = argument[2:]
        elif argument == "-I" and i + 1 < len(arguments):
            value = arguments[i + 1]
        if value:
            path = pathlib.Path(value.replace(ROOT_TOKEN, str(tree)))
            if path.is_relative_to(tree):
                dirs.append(path)
    return dirs


def dependencies(tree, source, dirs):
    """Every file of `tree` that `source` includes, transitively (conditional includes too: more
    files in the key only ever means a recompile, never a stale result)."""
    seen, stack = set(), [tree / source]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        for kind, name in _INCLUDE.findall(path.read_text(errors="replace")):
            candidates = ([path.parent] if kind == '"' else []) + dirs
            for directory in candidates:
                found = directory / name
                if found.is_file():
                    stack.append(found.resolve())
                    break
    return sorted(p.relative_to(tree.resolve()).as_posix() for p in (s.resolve() for s in seen))


def compiler_identity(nvcc):
    return run([nvcc, "--version"])


# ---- Assembling (--ptxas) ----------------------------------------------------------------------

_PTXAS_FUNCTION = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")


def elf_text_bytes(cubin):
    """{function: bytes of its .text.<function> section} of an ELF64 cubin."""
    import struct
    data = cubin.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = sections[shstrndx][4]

    def name(offset):
        end = data.index(b"\0", names_offset + offset)
        return data[names_offset + offset:end].decode()

    return {name(sh[0])[len(".text."):]: sh[5] for sh in sections if name(sh[0]).startswith(".text.")}


def assemble(ptx_text, arch, scratch, tag):
    """({kernel: (registers, stack, spill stores, spill loads, SASS bytes)}, cubin bytes) of
    one TU's PTX as nvcc wrote it."""
    ptx = scratch / f"{tag}.ptx"
    cubin = scratch / f"{tag}.cubin"
    ptx.write_text(ptx_text)
    ptxas = os.path.join(os.path.dirname(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"), "ptxas")
    report = subprocess.run([ptxas, f"-arch=sm_{arch}", "-O3", "-v", str(ptx), "-o", str(cubin)], capture_output=True,
                            text=True)
    if report.returncode != 0:
        raise Failure(f"ptxas failed on {tag}: {report.stderr.strip()[-2000:]}")
    sizes = elf_text_bytes(cubin)
    kernels, current, frame = {}, None, None
    for line in report.stderr.splitlines():
        if match := _PTXAS_FUNCTION.search(line):
            current = match.group(1)
        elif (match := _PTXAS_FRAME.search(line)) and current:
            frame = tuple(int(x) for x in match.groups())
        elif (match := _PTXAS_REGISTERS.search(line)) and current:
            kernels[current] = (int(match.group(1)), *frame, sizes.get(current, 0))
            current = None
    return kernels, cubin.read_bytes()


# ---- The comparison ---------------------------------------------------------------------------


class Job:
    def __init__(self, side, tree, entry, arch, arguments, key):
        self.side, self.tree, self.entry, self.arch, self.arguments, self.key = side, tree, entry, arch, arguments, key
        self.ptx = self.raw = None


def prepare_jobs(side, tree, entries, only, nvcc_id):
    jobs = []
    for entry in entries:
        if only and not re.search(only, entry["file"]):
            continue
        archs, arguments = ptx_commands(entry["arguments"])
        deps = dependencies(tree.resolve(), entry["file"], include_dirs(arguments, tree.resolve()))
        for arch in archs:
            digest = hashlib.sha256()
            digest.update(nvcc_id.encode())
            digest.update("\0".join(arguments).encode())
            digest.update(arch.encode())
            for dep in deps:
                digest.update(b"\0" + dep.encode() + b"\0" + (tree / dep).read_bytes())
            jobs.append(Job(side, tree, entry, arch, arguments, digest.hexdigest()))
    return jobs


def compile_ptx(job, cache, scratch):
    """The PTX of a job as nvcc wrote it (the tree's path aside) and whether it came from the cache.
    The cache keeps that raw PTX, so a change of normalize_ptx needs no new compile; --ptxas
    assembles it (normalized PTX renames symbols per item and is no longer one valid module)."""
    cached = cache / "ptx-raw" / f"{job.key}.ptx" if cache else None
    if cached and cached.exists():
        return cached.read_text(), True
    output = scratch / f"{job.key}.ptx"
    arguments = [a.replace(ROOT_TOKEN, str(job.tree)) for a in job.arguments]
    arguments += [f"-arch=compute_{job.arch}", "-ptx", "-o", str(output)]
    run(arguments, cwd=str(job.tree))
    raw = output.read_text().replace(str(job.tree), ROOT_TOKEN)
    output.unlink()
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(raw)
        temporary.replace(cached)
    return raw, False


def main(argv):
    parser = argparse.ArgumentParser(prog="tools/ptx-diff.sh", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("old", nargs="?", help="git revision")
    parser.add_argument("new", nargs="?", default=".", help="git revision; '.' or omitted: the working tree")
    parser.add_argument("--only", metavar="REGEX", help="only the TUs whose path (src/cuda/...) matches")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    parser.add_argument("--keep", metavar="DIR", type=pathlib.Path,
                        help="write the normalized PTX of both sides under DIR/old, DIR/new")
    parser.add_argument("--no-cache", action="store_true", help="compile everything; read and write no cache")
    parser.add_argument("--context", type=int, default=12, help="difference lines shown per TU (default 12)")
    parser.add_argument("--ptxas", action="store_true",
                        help="assemble each differing pair and compare registers, spills and SASS size")
    parser.add_argument("--self-check", action="store_true",
                        help=f"HEAD against HEAD for {SELF_CHECK_TU} only: the pipeline runs and finds no change")
    args = parser.parse_args(argv)
    if args.self_check:
        args.old, args.new, args.only = "HEAD", "HEAD", "^" + re.escape(SELF_CHECK_TU) + "$"
    if not args.old:
        parser.error("OLD is required (or --self-check)")
    if args.jobs < 1:
        parser.error(f"-j {args.jobs}: at least 1")

    repo = pathlib.Path(run(["git", "rev-parse", "--show-toplevel"]).strip())
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not shutil.which(nvcc):
        raise Failure(f"nvcc not found ({nvcc}); set CUDACXX")
    cache = None
    if not args.no_cache:
        cache = pathlib.Path(os.environ.get("ATTNSUITE_PTX_CACHE", pathlib.Path.home() / ".cache" / "attnsuite-ptx-diff"))
    nvcc_id = compiler_identity(nvcc)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ptx-diff.") as scratch_name:
        scratch = pathlib.Path(scratch_name)
        sides = {}
        for side, revision in (("old", args.old), ("new", args.new)):
            if revision == ".":
                tree, label = repo, "working tree"
            else:
                tree = scratch / side
                label = export_tree(repo, revision, tree)[:12]
            sides[side] = (tree, label)
        jobs = []
        for side, (tree, _) in sides.items():
            jobs += prepare_jobs(side, tree, compile_commands(tree, cache, scratch), args.only, nvcc_id)
        if not jobs:
            raise Failure(f"no TU of src/cuda matches --only {args.only!r}")
        compiled = 0
        # One compile per distinct key (a TU unchanged between the sides is compiled once).
        unique = {}
        for job in jobs:
            unique.setdefault(job.key, job)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {key: pool.submit(compile_ptx, job, cache, scratch) for key, job in unique.items()}
            for key, future in futures.items():
                raw, hit = future.result()
                compiled += 0 if hit else 1
                text = normalize_ptx(raw)
                for job in jobs:
                    if job.key == key:
                        job.ptx, job.raw = text, raw

    results, raws = {}, {}
    for job in jobs:
        results.setdefault((job.entry["file"], job.arch), {})[job.side] = job.ptx
        raws.setdefault((job.entry["file"], job.arch), {})[job.side] = job.raw
    if args.keep:
        for (file, arch), texts in results.items():
            for side, text in texts.items():
                path = args.keep / side / f"{file}.sm_{arch}.ptx"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    differing = same_sass = 0
    print(f"ptx-diff: {sides['old'][1]} -> {sides['new'][1]}: {len(results)} (TU, arch) pairs, "
          f"{compiled} compiled, {len(unique) - compiled} cached, {time.monotonic() - started:.0f} s")
    for (file, arch), texts in sorted(results.items()):
        old, new = texts.get("old"), texts.get("new")
        if old == new:
            continue
        differing += 1
        if old is None or new is None:
            print(f"  {file} sm_{arch}: only in {'new' if old is None else 'old'}")
            continue
        diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "old", "new", n=0, lineterm=""))
        changed = sum(1 for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---")))
        print(f"  {file} sm_{arch}: differs ({changed} lines changed of {len(old.splitlines())})")
        for line in diff[2:2 + args.context]:
            print(f"      {line[:160]}")
        if args.ptxas:
            with tempfile.TemporaryDirectory(prefix="ptx-diff-ptxas.") as work:
                before, old_cubin = assemble(raws[(file, arch)]["old"], arch, pathlib.Path(work), "old")
                after, new_cubin = assemble(raws[(file, arch)]["new"], arch, pathlib.Path(work), "new")
            if old_cubin == new_cubin:
                same_sass += 1
                print("      ptxas: the cubins are byte-identical (the same SASS)")
                continue
            for kernel in sorted(set(before) | set(after)):
                a, b = before.get(kernel), after.get(kernel)
                fields = ("registers", "stack", "spill stores", "spill loads", "SASS bytes")
                cells = [f"{f} {a[i] if a else '-'} -> {b[i] if b else '-'}" for i, f in enumerate(fields)
                         if not a or not b or a[i] != b[i] or i in (0, 4)]
                print(f"      ptxas {kernel}: " + ", ".join(cells))
    if differing and same_sass == differing:
        print(f"ptx-diff: {differing} of {len(results)} differ in PTX; every one assembles to a byte-identical cubin: "
              "the same machine code")
        return 0
    if differing:
        print(f"ptx-diff: {differing} of {len(results)} differ"
              + (f"; {same_sass} of them assemble to byte-identical cubins" if args.ptxas else ""))
        return 1
    print("ptx-diff: identical")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as failure:
        print(f"ptx-diff: {failure}", file=sys.stderr)
        sys.exit(2)
