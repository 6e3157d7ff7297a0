#!/usr/bin/env bash
# The package as a user installs it: `pip install .` (an isolated build, as pip does by default)
# into the Python environment of scripts/setup-python.sh — in CI, with ATTNSUITE_TORCH=1, the
# one that already has PyPI's torch (CUDA build), the PyTorch user's case — then, from outside
# the source tree, what it installed: the CLI starts and lists the backends (with the torch peers
# wherever torch and the CUDA toolkit are of one CUDA major version), and the Python tests of the
# module, the drop-in and the libraries shared with torch run against the installed package.
# The package is uninstalled at the end. CI runs it after scripts/test.sh; with ccache (CI
# exports CMAKE_{CXX,CUDA}_COMPILER_LAUNCHER=ccache) its compile is the test build's, from the
# cache: the same sources, flags and paths. Measured on the 2-core VM (CUDA build, torch 2.15):
# 177 s, of which pip install . 110 s (with the test build's objects in the cache) and the
# tests 49 s.
# Usage: scripts/test-wheel.sh   (WHEEL_BUILD_DIR=... to build elsewhere; default build-wheel)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WHEEL_BUILD_DIR:-"$root/build-wheel"}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
python=$("$root/scripts/setup-python.sh")

# The build requirements pip fetches into its isolated environment, at the versions tested.
export PIP_CONSTRAINT="$root/python/requirements.txt"
# The compilers CMake picks by default, as in scripts/test.sh's build (scikit-build-core would
# take Python's own, g++, and the compiler cache would then miss every file).
export CC=${CC:-cc} CXX=${CXX:-c++}
work=$(mktemp -d)
start=$(date +%s)
if ! "$python" -m pip install --disable-pip-version-check -v -C "build-dir=$build" \
    -C "cmake.define.ATTNSUITE_WERROR=$werror" "$root" >"$work/pip.log" 2>&1; then
  tail -n 80 "$work/pip.log" >&2
  echo "test-wheel: pip install . failed (the whole log: $work/pip.log)" >&2
  exit 1
fi
trap '"$python" -m pip uninstall --disable-pip-version-check -y -q attnsuite >&2' EXIT
# What the configure found and left out, and why.
grep -E -- "-- attnsuite: " "$work/pip.log" | sed 's/^ *-- /test-wheel: configure: /' >&2
echo "test-wheel: pip install . took $(( $(date +%s) - start )) s" >&2

cd "$work"
scripts=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
installed=$("$python" -c 'import attnsuite, os; print(os.path.dirname(attnsuite.__file__))')
case "$installed" in
  "$root"/*) echo "test-wheel: imported attnsuite from the source tree ($installed), not the installed package" >&2; exit 1 ;;
esac
# Wide enough that no cell wraps (list fits its table to the terminal): one line per backend.
COLUMNS=1000 "$scripts/attnsuite" list >list.txt
echo "test-wheel: $scripts/attnsuite list ran ($(wc -l <list.txt) lines)" >&2

# The torch peers are expected where torch has CUDA of the toolkit's major version and the
# package is a CUDA build (AttnsuitePeers.cmake says why otherwise, and this says so too).
torch_cuda=$("$python" -c 'import importlib.util as u, sys
spec = u.find_spec("torch")
if spec is None: sys.exit()
for line in open(spec.submodule_search_locations[0] + "/version.py"):
    if line.startswith("cuda") and "=" in line: print(line.split("=")[1].strip().strip("\x27\x22"))')
cuda_build=$("$python" -c 'import attnsuite; print(int(attnsuite._core.cuda_build))')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
toolkit=$([ -x "$nvcc" ] && "$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)
if [ "$cuda_build" = 1 ] && [ -n "$torch_cuda" ] && [ "$torch_cuda" != None ] && [ "${torch_cuda%%.*}" = "$toolkit" ]; then
  # Listed, and loaded: their module (libattnsuite_torch.so) found from the installed CLI.
  for peer in torch-sdpa torch-flash torch-efficient torch-cudnn torch-math; do
    line=$(grep -F " $peer " list.txt || true)
    if [ -z "$line" ] || grep -q "could not be loaded" <<<"$line"; then
      cat list.txt >&2
      echo "test-wheel: $peer missing from attnsuite list or not loaded (torch for CUDA $torch_cuda, toolkit $toolkit)" >&2
      exit 1
    fi
  done
  if ! grep -qF "FlashAttention-2 (PyTorch flash backend)" list.txt; then
    cat list.txt >&2
    echo "test-wheel: torch-flash is not named 'FlashAttention-2 (PyTorch flash backend)' in attnsuite list" >&2
    exit 1
  fi
  echo "test-wheel: torch peers listed and loaded (torch for CUDA $torch_cuda, CUDA toolkit $toolkit)" >&2
else
  echo "test-wheel: torch peers not expected (CUDA build: $cuda_build, torch's CUDA: ${torch_cuda:-no torch}, toolkit: ${toolkit:-none})" >&2
fi

ATTNSUITE_CLI="$scripts/attnsuite" PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -p no:cacheprovider -rs \
  "$root/tests/python/test_module.py" "$root/tests/python/test_torch.py" "$root/tests/python/test_torch_libraries.py"
echo "test-wheel: passed in $(( $(date +%s) - start )) s" >&2
