#!/usr/bin/env bash
# Run HERE (not on the GPU machine): downloads the Debian packages attnsuite builds against into
# .deps/ (git-ignored), so a device call can carry them: the GPU machine reaches no registry.
# tools/device/run.sh unpacks them into a private prefix there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$root/.deps"
cd "$root/.deps"
packages=(libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libgtest-dev libopenblas-dev libopenblas0-pthread
          libopenblas-pthread-dev libopenblas0 libtomlplusplus-dev libtomlplusplus3 libgfortran5)
missing=()
for p in "${packages[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] || apt-get download "${missing[@]}"
du -sh "$root/.deps"
