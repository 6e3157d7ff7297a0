#!/usr/bin/env bash
# Run HERE (the Debian 12 dev machine), not on the GPU machine: fetches the Debian packages of
# the host-side dependencies that the GPU machine's image lacks (fmt, CLI11, nlohmann-json,
# toml++, GoogleTest, OpenBLAS and its Fortran runtime, pkgconf) with `apt-get download` and
# unpacks them under .device-build/deps (ignored by git), pruned to ~17 MiB (the 58 MiB static
# OpenBLAS archive and the docs go, the shared library is xz-compressed). The lead's device call then names `.device-build/deps` in
# `carry`; tools/device/run.sh finds it there. Nothing is installed on either machine.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="$root/.device-build/deps"
packages=(libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3
          libgtest-dev libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5
          libquadmath0 pkgconf pkgconf-bin libpkgconf3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${packages[@]}")
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$dest"; done
rm -rf "$dest/usr/share/doc" "$dest/usr/share/man" "$dest/usr/share/lintian"
find "$dest" \( -name 'libopenblas*.a' -o -name 'liblapack*' -o -name 'libblas*' \) -delete
# Debian selects the OpenBLAS flavour through update-alternatives links, which a .deb does not
# contain: link the pthread flavour where FindBLAS and the loader look.
arch_lib="$dest/usr/lib/x86_64-linux-gnu"
ln -sf openblas-pthread/libopenblas.so.0 "$arch_lib/libopenblas.so.0"
ln -sf libopenblas.so.0 "$arch_lib/libopenblas.so"
# OpenBLAS's 36 MiB library travels xz-compressed (~9 MiB; a call carries 64 MiB with the checkout,
# whose committed results passed 18 MiB on 2026-12-06); run.sh unpacks it before configuring.
xz -9 -T2 "$arch_lib"/openblas-pthread/libopenblasp-r*.so
# cudnn-frontend's headers (PyPI nvidia-cudnn-frontend) for the cudnn peer: the GPU image has
# cuDNN but not the frontend.
python3 -m pip download -q --no-deps --only-binary=:all: nvidia-cudnn-frontend==1.32.0 -d "$work"
rm -rf "$root/.device-build/cudnn-frontend"
unzip -q "$work"/nvidia_cudnn_frontend-*.whl 'include/*' -d "$root/.device-build/cudnn-frontend"
du -sh "$dest" "$root/.device-build/cudnn-frontend"
