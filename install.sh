#!/usr/bin/env bash
# Installs edgespec and its dependencies into the current Python environment.
#
# llama-cpp-python is built from source with CPU flags chosen for *this* machine:
# the default native build enables AMX where the CPU has it, and that path crashes in
# llama_decode on some CPUs, so on x86-64 we switch native detection off and turn on
# each ISA extension the CPU reports, except AMX. The built wheel is kept in a cache
# keyed by version, flags and interpreter, so it is built once per machine.
#
#   ./install.sh         the runtime: chat, generate, bench, ONNX Runtime backend
#   ./install.sh --dev   also the export pipeline (torch, transformers, optimum), the tests and Xvfb
set -euo pipefail

extras=""
for arg in "$@"; do
    case "$arg" in
        --dev) extras="[test,export]" ;;
        *) echo "usage: ./install.sh [--dev]" >&2; exit 2 ;;
    esac
done

LLAMA_CPP_PYTHON_VERSION="0.3.36"
PYTHON="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${EDGESPEC_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/wheels}"

cmake_flags() {
    local args="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
    case "$(uname -m)" in
        x86_64|amd64) ;;
        *) echo "$args"; return ;;   # ARM and others: llama.cpp's native detection is safe
    esac
    [ -r /proc/cpuinfo ] || { echo "$args"; return; }
    local f
    f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    on() { case "$f" in *" $1 "*) echo ON ;; *) echo OFF ;; esac; }
    args+=" -DGGML_NATIVE=OFF"
    args+=" -DGGML_SSE42=$(on sse4_2) -DGGML_AVX=$(on avx) -DGGML_AVX2=$(on avx2)"
    args+=" -DGGML_FMA=$(on fma) -DGGML_F16C=$(on f16c) -DGGML_BMI2=$(on bmi2)"
    args+=" -DGGML_AVX_VNNI=$(on avx_vnni)"
    args+=" -DGGML_AVX512=$(on avx512f) -DGGML_AVX512_VBMI=$(on avx512vbmi)"
    args+=" -DGGML_AVX512_VNNI=$(on avx512_vnni) -DGGML_AVX512_BF16=$(on avx512_bf16)"
    args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    echo "$args"
}

flags="${EDGESPEC_CMAKE_ARGS:-$(cmake_flags)}"
pyver="$("$PYTHON" -c 'import sys, platform; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')"
key="$(printf '%s|%s|%s' "$LLAMA_CPP_PYTHON_VERSION" "$flags" "$pyver" | sha256sum | cut -c1-16)"
wheel_dir="$cache_root/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$key"

installed="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
# the stamp lives inside the installed package; find_spec locates it without importing it
stamp_file="$("$PYTHON" -c 'import importlib.util, os; s = importlib.util.find_spec("llama_cpp"); print(os.path.join(os.path.dirname(s.origin), ".edgespec-build") if s else "")' 2>/dev/null || true)"
stamp="$(cat "$stamp_file" 2>/dev/null || true)"

if [ "$installed" = "$LLAMA_CPP_PYTHON_VERSION" ] && [ "$stamp" = "$key" ]; then
    echo "edgespec: llama-cpp-python $installed already built for this machine ($key)"
else
    if ! ls "$wheel_dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        echo "edgespec: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (10-20 minutes, once per machine)"
        echo "edgespec: CMAKE_ARGS=$flags"
        mkdir -p "$wheel_dir.tmp"
        CMAKE_ARGS="$flags" "$PYTHON" -m pip wheel --no-deps --no-cache-dir \
            -w "$wheel_dir.tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
        rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"   # only a finished build enters the cache
    fi
    # --no-deps: a wheel of the same version would otherwise count as installed and be skipped
    "$PYTHON" -m pip install --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-*.whl
    "$PYTHON" -c 'import importlib.util, os, sys; s = importlib.util.find_spec("llama_cpp"); open(os.path.join(os.path.dirname(s.origin), ".edgespec-build"), "w").write(sys.argv[1])' "$key"
fi

if [ -n "$extras" ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    # pinned: an unpinned torch resolves to a multi-GB CUDA build; 2.13.0 is the CPU
    # build where a local wheel of it exists (as on the project's machines)
    "$PYTHON" -m pip install "torch==2.13.0"
fi

if [ -n "$extras" ] && ! command -v Xvfb >/dev/null 2>&1; then
    # the desktop app's test draws on a virtual screen
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        apt-get install -y -q xvfb >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null && apt-get install -y -q xvfb >/dev/null; } \
            || echo "edgespec: could not install xvfb; the desktop app's test will be skipped" >&2
    else
        echo "edgespec: install Xvfb (Debian: apt-get install xvfb) to run the desktop app's test" >&2
    fi
fi

# edgespec itself, with llama-cpp-python's own dependencies (the pin above is already met)
"$PYTHON" -m pip install -e "$here$extras"
