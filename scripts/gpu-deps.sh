#!/usr/bin/env bash
# Packs the Debian packages Rudder's GPU build needs besides LibTorch, CMake and the CUDA toolkit (which a GPU
# machine's PyTorch brings) into one archive, for a GPU machine without internet (docs/gpu.md, "The GPU check"):
# the .debs are downloaded here with apt (no root needed) and unpacked; scripts/gpu-check.sh unpacks the archive there
# and points CMake and the loader at it.
#   scripts/gpu-deps.sh [ARCHIVE=gpu-deps.tar.xz]
# The libraries are Debian 12's: they load where the GPU machine's C library is at least as new (glibc 2.36), which
# gpu-check.sh checks.
set -euo pipefail
archive=$(realpath -m "${1:-gpu-deps.tar.xz}")
packages=(
  libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0   # Boost.DLL (plugins) and its filesystem
  nlohmann-json3-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev libdlpack-dev
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 zlib1g-dev libssl-dev
  libcpp-httplib-dev libcpp-httplib0.11 prometheus-cpp-dev libprometheus-cpp-core1.0 libbrotli-dev
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "downloading ${#packages[@]} packages"
apt-get download -qq "${packages[@]}"
mkdir prefix
for deb in *.deb; do dpkg-deb -x "$deb" prefix; done
# Documentation and the static archives are not needed to build or run.
rm -rf prefix/usr/share/doc prefix/usr/share/man
find prefix -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' ! -name 'libbenchmark*.a' -delete
tar -C prefix -cJf "$archive" .
echo "$archive: $(du -h "$archive" | cut -f1) ($(du -sh prefix | cut -f1) unpacked)"
