#!/bin/sh
# Configures and builds opjit into ./build (Release with debug info). Extra args go to cmake.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
