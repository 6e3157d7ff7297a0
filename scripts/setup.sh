#!/usr/bin/env bash
# Installs what attnsuite needs from Debian's packages (only those missing), then configures
# and builds. Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-"$root/build"}
shift || true

# python3-matplotlib: the report's plots (src/report/plots.py), from Debian so that it installs on
# a clean machine without pip (Debian's own python3 is externally managed); `attnsuite report`
# finds the python3 that has it (a pyenv python3 first on the PATH may not).
# clang-format: the test command's format check (tools/check_format.py; Debian 12's is version 14).
packages=(cmake ninja-build g++ clang-format libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          libopenblas-dev libtomlplusplus-dev python3 python3-matplotlib python3-dev python3-venv)
# More for one build, e.g. clang and libFuzzer for scripts/reliability.sh.
read -r -a extra_packages <<< "${ATTNSUITE_EXTRA_PACKAGES:-}"
packages+=("${extra_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The Python packages (PyPI) for the module attnsuite._core, the ONNX parts, tests and notebook
# (and torch with ATTNSUITE_TORCH=1); CMake builds against the interpreter that has them.
python=$("$root/scripts/setup-python.sh")

# cuDNN's SDPA peer is built against the cudnn-frontend headers, which come from PyPI, into the
# same environment (CMake looks there); only worth fetching where CUDA can be built.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if ! "$python" -c "import importlib.metadata as m; m.distribution('nvidia-cudnn-frontend')" 2>/dev/null; then
    echo "setup: installing nvidia-cudnn-frontend (headers for the cudnn peer) into $python" >&2
    "$python" -m pip install -q --disable-pip-version-check --no-deps nvidia-cudnn-frontend==1.32.0 >&2
  fi
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DPython_EXECUTABLE=$python" "$@" >&2
cmake --build "$build" -j "$(nproc)" >&2
