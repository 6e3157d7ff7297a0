#!/usr/bin/env python3
"""Every host C++ file that tests a feature macro (ATTNSUITE_HAVE_FLASH3, _CUDNN_PEER, _NCCL, ...)
still compiles with that feature off, checked in a build that has it on.

A build configures each feature once, so the branch of `#if ATTNSUITE_HAVE_X` that the build does
not take is never compiled: a CUDA build with ATTNSUITE_FLASH3=OFF failed in sparge.cpp (a helper
included only under `#if ATTNSUITE_HAVE_FLASH3` and used outside it) while every test passed.
This reads the build's compile_commands.json and, for each C++ file whose text tests a macro the
build defines to 1, compiles it once per such macro with `-D<macro>=0` and -fsyntax-only
(turning a feature on where the build has it off would need what the build did not find).

    tools/check_feature_macros.py --build BUILD_DIR [-j JOBS] [--only REGEX]
    tools/check_feature_macros.py --self-test

Exit 0 when every variant compiles, 1 with one line per failing (file, macro) and its first
errors, 2 on bad usage.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

MACRO_TEST = re.compile(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b.*?\b(ATTNSUITE_HAVE_[A-Z0-9_]+)")
MACRO_ANY = re.compile(r"\b(ATTNSUITE_HAVE_[A-Z0-9_]+)\b")
DEFINED_ON = re.compile(r"^-D(ATTNSUITE_HAVE_[A-Z0-9_]+)(?:=1)?$")


def tested_macros(path):
    """The ATTNSUITE_HAVE_* macros the file's preprocessor conditions name."""
    found = set()
    with open(path, encoding="utf-8", errors="replace") as source:
        for line in source:
            if MACRO_TEST.match(line):
                found.update(MACRO_ANY.findall(line.split("//")[0]))
    return found


def syntax_only(arguments):
    """The compile command as a syntax check: no object, no dependency file, no launcher."""
    out, skip = [], False
    for index, argument in enumerate(arguments):
        if skip:
            skip = False
            continue
        if argument in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if argument in ("-c", "-MD", "-MMD") or argument.startswith(("-MF", "-MT", "-MQ")):
            continue
        if index == 0 and os.path.basename(argument) in ("ccache", "sccache"):
            continue
        out.append(argument)
    return out + ["-fsyntax-only"]


def variants(entries):
    """(file, macro, command, directory) for every C++ entry and every tested macro the command turns on."""
    for entry in entries:
        path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        if not path.endswith((".cpp", ".cc", ".cxx")) or not os.path.exists(path):
            continue
        arguments = entry.get("arguments") or shlex.split(entry["command"])
        if os.path.basename(arguments[0]).startswith("nvcc"):
            continue
        on = {m.group(1) for m in map(DEFINED_ON.match, arguments) if m}
        check_only = syntax_only(arguments)
        for macro in sorted(tested_macros(path) & on):
            command = [a for a in check_only if a not in (f"-D{macro}", f"-D{macro}=1")]
            yield path, macro, command[:1] + [f"-D{macro}=0"] + command[1:], entry["directory"]


def check(build, jobs, only=None):
    database = os.path.join(build, "compile_commands.json")
    if not os.path.exists(database):
        print(f"check_feature_macros: {database} not found (configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON)",
              file=sys.stderr)
        return 2
    with open(database, encoding="utf-8") as f:
        entries = json.load(f)
    work = [item for item in variants(entries) if only is None or re.search(only, item[0])]

    def run(item):
        path, macro, command, directory = item
        result = subprocess.run(command, cwd=directory, capture_output=True, text=True)
        return path, macro, result.returncode, result.stderr

    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, macro, code, stderr in pool.map(run, work):
            if code != 0:
                errors = [line for line in stderr.splitlines() if "error" in line][:3]
                failures.append(f"{os.path.relpath(path)} with {macro}=0: " + " | ".join(errors or [stderr.strip()[:300]]))
    for failure in failures:
        print(f"check_feature_macros: {failure}")
    print(f"check_feature_macros: {len(work) - len(failures)} of {len(work)} (file, feature off) variants compile")
    return 1 if failures else 0


def self_test():
    """A file that uses under `#if` what it declares only there fails; a clean one passes."""
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "bad.cpp")
        good = os.path.join(tmp, "good.cpp")
        with open(bad, "w") as f:
            f.write("#if ATTNSUITE_HAVE_DEMO\nint helper() { return 1; }\n#endif\nint use() { return helper(); }\n")
        with open(good, "w") as f:
            f.write("int helper() { return 1; }\n#if ATTNSUITE_HAVE_DEMO\nint extra() { return helper(); }\n#endif\n")
        entries = [{"directory": tmp, "file": name, "arguments": [compiler, "-DATTNSUITE_HAVE_DEMO=1", "-o",
                                                                  name + ".o", "-c", name]}
                   for name in ("bad.cpp", "good.cpp")]
        with open(os.path.join(tmp, "compile_commands.json"), "w") as f:
            json.dump(entries, f)
        listed = [(os.path.basename(p), m) for p, m, _, _ in variants(entries)]
        if listed != [("bad.cpp", "ATTNSUITE_HAVE_DEMO"), ("good.cpp", "ATTNSUITE_HAVE_DEMO")]:
            print(f"self-test: variants listed {listed}")
            return 1
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            code = check(tmp, 2)
        finally:
            os.chdir(cwd)
        if code != 1:
            print(f"self-test: the bad file was not reported (exit {code})")
            return 1
        os.remove(bad)
        entries = entries[1:]
        with open(os.path.join(tmp, "compile_commands.json"), "w") as f:
            json.dump(entries, f)
        if check(tmp, 2) != 0:
            print("self-test: the good file was reported")
            return 1
    print("self-test: ok")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", help="the build directory (its compile_commands.json)")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", metavar="REGEX", help="only the files whose path matches")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.build:
        parser.error("--build BUILD_DIR is required")
    return check(args.build, max(1, args.jobs), args.only)


if __name__ == "__main__":
    sys.exit(main())
