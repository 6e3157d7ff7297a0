#!/usr/bin/env bash
# Installs the Python packages of python/requirements.txt (PyPI, pinned): nanobind and
# scikit-build-core to build the module, onnx + onnxruntime, pytest, and what the example
# notebook runs. Only when something is missing or at another version (the check takes ~0.3 s).
# ATTNSUITE_TORCH=1 also installs python/requirements-torch.txt (PyPI's torch, 5.2 GB; CI sets it).
# Uses $PYTHON, else python3; where that interpreter is Debian's externally managed one, a
# virtual environment in .venv instead. Prints the interpreter used (its path) on stdout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
python=$("$python" -c 'import sys; print(sys.executable)')

# PEP 668: Debian's own python3 refuses pip installs; a venv (python3-venv) takes them.
if "$python" -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")) and sys.prefix == sys.base_prefix else 1)'; then
  if [ ! -x "$root/.venv/bin/python" ]; then
    echo "setup-python: $python is externally managed; creating $root/.venv" >&2
    "$python" -m venv "$root/.venv" >&2
  fi
  python="$root/.venv/bin/python"
fi

requirements=("$root/python/requirements.txt")
[ "${ATTNSUITE_TORCH:-0}" = "1" ] && requirements+=("$root/python/requirements-torch.txt")

# Pins not satisfied, by name==version lines (comments and blank lines skipped).
missing=$("$python" - "${requirements[@]}" <<'PY'
import importlib.metadata as metadata, sys
for path in sys.argv[1:]:
    for line in open(path):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, version = line.split("==")
        try:
            if metadata.version(name) == version:
                continue
        except metadata.PackageNotFoundError:
            pass
        print(line)
PY
)
if [ -n "$missing" ]; then
  echo "setup-python: installing $(echo $missing) into $python" >&2
  # shellcheck disable=SC2086
  "$python" -m pip install -q --disable-pip-version-check $missing >&2
fi
echo "$python"
