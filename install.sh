#!/usr/bin/env bash
# Installs edgespec and its dependencies into the current Python environment.
#
# llama-cpp-python is built from source with CPU flags chosen for *this* machine:
# the default native build enables AMX where the CPU has it, and that path crashes in
# llama_decode on some CPUs, so on x86-64 we switch native detection off and turn on
# each ISA extension the CPU reports, except AMX. The built wheel is kept in a cache
# keyed by version, flags and interpreter, so it is built once per machine.
#
# Where the machine has a Vulkan toolchain (the loader, glslc, and headers new enough for
# ggml-vulkan), the same build also carries llama.cpp's Vulkan backend: one wheel runs on
# the CPU and, with --device gpu, on any Vulkan GPU. Without one, the build is CPU-only.
#
#   ./install.sh         the runtime: chat, generate, bench, ONNX Runtime backend
#   ./install.sh --dev   also the export pipeline (torch, transformers, optimum), the tests, Xvfb,
#                        (as root on Debian) the Vulkan toolchain and Mesa's software GPU
#                        (lavapipe), so the GPU code path runs and is tested on any machine, and
#                        llama-server from the same llama.cpp source, the peer `edgespec bench
#                        --peers llama-server` measures against
set -euo pipefail

extras=""
for arg in "$@"; do
    case "$arg" in
        --dev) extras="[test,export]" ;;
        *) echo "usage: ./install.sh [--dev]   (EDGESPEC_VULKAN=off: no Vulkan backend)" >&2; exit 2 ;;
    esac
done

LLAMA_CPP_PYTHON_VERSION="0.3.36"
PYTHON="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${EDGESPEC_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/wheels}"
vulkan_headers="${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/vulkan-headers"

as_root_with_apt() { command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }

apt_install() {
    apt-get install -y -q "$@" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; }
}

# Headers new enough for ggml-vulkan (it uses VK_EXT_layer_settings, Vulkan-Headers 1.3.261+):
# the system's, or a copy fetched from a newer Debian release into the cache.
vulkan_include() {
    local inc
    for inc in ${EDGESPEC_VULKAN_INCLUDE:-} /usr/include "$vulkan_headers/include"; do
        if grep -qs LayerSettingEXT "$inc"/vulkan/vulkan_structs.hpp; then echo "$inc"; return; fi
    done
}

fetch_vulkan_headers() {
    # Debian 12 ships Vulkan-Headers 1.3.239; the headers are compile-time only, so trixie's
    # libvulkan-dev is unpacked into the cache and the system's loader stays as it is
    local tmp
    tmp="$(mktemp -d)"
    mkdir -p "$tmp/lists/partial"
    echo "deb http://deb.debian.org/debian trixie main" >"$tmp/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
                -o "Dir::State::Lists=$tmp/lists" -o "APT::Get::List-Cleanup=0")
    if apt-get "${opts[@]}" update -q >/dev/null 2>&1 \
        && (cd "$tmp" && apt-get "${opts[@]}" download -q libvulkan-dev >/dev/null 2>&1) \
        && dpkg-deb -x "$tmp"/libvulkan-dev_*.deb "$tmp/x"; then
        rm -rf "$vulkan_headers" && mkdir -p "$vulkan_headers"
        cp -r "$tmp/x/usr/include" "$vulkan_headers/include"
        echo "edgespec: Vulkan headers $(basename "$tmp"/libvulkan-dev_*.deb .deb | cut -d_ -f2) in $vulkan_headers"
    else
        echo "edgespec: could not fetch Vulkan headers new enough for llama.cpp; building for the CPU only" >&2
    fi
    rm -rf "$tmp"
}

install_vulkan_toolchain() {
    as_root_with_apt || { echo "edgespec: not root on Debian: leaving the Vulkan toolchain as it is" >&2; return; }
    # mesa-vulkan-drivers: lavapipe, a real Vulkan implementation on the CPU; spirv-headers:
    # ggml-vulkan's CMake asks for SPIRV-HeadersConfig.cmake
    apt_install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers \
        || { echo "edgespec: could not install the Vulkan toolchain; building for the CPU only" >&2; return; }
    [ -n "$(vulkan_include)" ] || fetch_vulkan_headers
}

# SPIRV-Headers' CMake package (Debian: spirv-headers), which ggml-vulkan's CMake requires
spirv_headers() {
    local d f prefixes="${CMAKE_PREFIX_PATH:-}"
    for d in ${prefixes//:/ } /usr /usr/local; do
        for f in "$d"/share/cmake/SPIRV-Headers "$d"/lib/cmake/SPIRV-Headers "$d"/lib/*/cmake/SPIRV-Headers; do
            [ -e "$f/SPIRV-HeadersConfig.cmake" ] && return 0
        done
    done
    return 1
}

vulkan_flags() {
    [ "${EDGESPEC_VULKAN:-auto}" != off ] || return 0
    command -v glslc >/dev/null 2>&1 || return 0
    ldconfig -p 2>/dev/null | grep 'libvulkan\.so ' >/dev/null || return 0   # libvulkan-dev; not grep -q: under pipefail its early exit can SIGPIPE ldconfig and fail the check
    spirv_headers || return 0
    local inc
    inc="$(vulkan_include)"
    [ -n "$inc" ] || return 0
    echo " -DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$inc"
}

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

[ -z "$extras" ] || install_vulkan_toolchain
flags="${EDGESPEC_CMAKE_ARGS:-$(cmake_flags)$(vulkan_flags)}"
case "$flags" in
    *GGML_VULKAN=ON*) echo "edgespec: llama.cpp with its CPU and Vulkan backends" ;;
    *) echo "edgespec: llama.cpp for the CPU only (no Vulkan toolchain: loader, glslc, SPIRV-Headers, Vulkan-Headers 1.3.261+)" ;;
esac
pyver="$("$PYTHON" -c 'import sys, platform; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')"

# edgespec's patches to the llama.cpp that llama-cpp-python vendors (runtimes/patches: the x86
# small-batch kernels), applied before the wheel is built; the cache key holds their hash
patches=("$here"/runtimes/patches/*.patch)
patch_hash="$(cat "${patches[@]}" 2>/dev/null | sha256sum | cut -c1-16)"

wheel_dir_for() {   # the cache folder of a build: keyed by version, flags, interpreter and patches
    key="$(printf '%s|%s|%s|%s' "$LLAMA_CPP_PYTHON_VERSION" "$1" "$pyver" "$patch_hash" | sha256sum | cut -c1-16)"
    wheel_dir="$cache_root/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$key"
}

# the sdist in $1, with the patches applied to its vendor/llama.cpp when they apply; which
# did is written to $2 (none: the patches do not fit this version, and the build is llama.cpp's own)
patched_source() {
    local src="$1" p
    if ! command -v git >/dev/null 2>&1; then
        echo "edgespec: git is needed to apply edgespec's llama.cpp patches; building llama-cpp-python unpatched" >&2
        echo none >"$2"
        return
    fi
    # git apply is all or nothing: a series that does not fit leaves the source as it was
    if git -C "$src/vendor/llama.cpp" apply "${patches[@]}" 2>/dev/null; then
        for p in "${patches[@]}"; do basename "$p"; done >"$2"
    else
        echo "edgespec: edgespec's llama.cpp patches do not apply to llama-cpp-python $LLAMA_CPP_PYTHON_VERSION; building it unpatched" >&2
        echo none >"$2"
    fi
}

build_wheel() {
    echo "edgespec: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (10-20 minutes, once per machine)"
    echo "edgespec: CMAKE_ARGS=$flags"
    local tmp src
    tmp="$(mktemp -d)"
    rm -rf "$wheel_dir.tmp" && mkdir -p "$wheel_dir.tmp"
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
        && tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" || { rm -rf "$tmp"; return 1; }
    src="$(echo "$tmp"/llama_cpp_python-*/)"
    patched_source "$src" "$wheel_dir.tmp/patches"
    CMAKE_ARGS="$flags" "$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$wheel_dir.tmp" "$src" \
        || { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
    rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"   # only a finished build enters the cache
}

wheel_dir_for "$flags"
installed="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
# the stamp lives inside the installed package; find_spec locates it without importing it
stamp_file="$("$PYTHON" -c 'import importlib.util, os; s = importlib.util.find_spec("llama_cpp"); print(os.path.join(os.path.dirname(s.origin), ".edgespec-build") if s else "")' 2>/dev/null || true)"
stamp="$(cat "$stamp_file" 2>/dev/null || true)"

if [ "$installed" = "$LLAMA_CPP_PYTHON_VERSION" ] && [ "$stamp" = "$key" ]; then
    echo "edgespec: llama-cpp-python $installed already built for this machine ($key)"
else
    if ! ls "$wheel_dir"/llama_cpp_python-*.whl >/dev/null 2>&1 && ! build_wheel; then
        case "$flags" in
            *GGML_VULKAN=ON*)
                # a GPU build that fails must not leave the user without llama.cpp: the CPU build
                # needs only a compiler (and doctor then says Vulkan is not built in)
                echo "edgespec: the Vulkan build failed (the error is above); building for the CPU only" >&2
                flags="${flags% -DGGML_VULKAN=ON*}"
                wheel_dir_for "$flags"
                ls "$wheel_dir"/llama_cpp_python-*.whl >/dev/null 2>&1 || build_wheel ;;
            *) exit 1 ;;
        esac
    fi
    # --no-deps: a wheel of the same version would otherwise count as installed and be skipped
    "$PYTHON" -m pip install --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-*.whl
fi
# the key marks this build; the flags and the patches applied are for `edgespec doctor` and the tests
"$PYTHON" -c 'import importlib.util, os, sys; d = os.path.dirname(importlib.util.find_spec("llama_cpp").origin); open(os.path.join(d, ".edgespec-build-flags"), "w").write(sys.argv[2]); open(os.path.join(d, ".edgespec-build-patches"), "w").write(sys.argv[3]); open(os.path.join(d, ".edgespec-build"), "w").write(sys.argv[1])' "$key" "$flags" "$(cat "$wheel_dir/patches" 2>/dev/null || echo none)"

# llama-server, built from the llama.cpp source this llama-cpp-python vendors (its sdist's
# vendor/llama.cpp) with the same CPU flags, for the CPU only: the bench's peer. It is built
# without edgespec's patches, as users would get it. Cached per machine like the wheel;
# edgespec finds it through the "llama-server" link in the cache.
server_root="${EDGESPEC_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/llama-server}"
build_llama_server() {
    local cpu_flags="${flags% -DGGML_VULKAN=ON*}" key dir tmp src
    key="$(printf '%s|%s|server' "$LLAMA_CPP_PYTHON_VERSION" "$cpu_flags" | sha256sum | cut -c1-16)"
    dir="$server_root/$LLAMA_CPP_PYTHON_VERSION-$key"
    if [ -x "$dir/llama-server" ]; then
        echo "edgespec: llama-server already built for this machine ($key)"
    else
        echo "edgespec: building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's llama.cpp (5-10 minutes on 2 cores, once per machine)"
        tmp="$(mktemp -d)"
        "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
            && tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" || { rm -rf "$tmp"; return 1; }
        src="$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
        # no web UI (a prebuilt one would be downloaded), no HTTPS: the bench talks to it on loopback
        # shellcheck disable=SC2086
        cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF $cpu_flags \
                -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
                -DLLAMA_OPENSSL=OFF >"$tmp/cmake.log" 2>&1 \
            && cmake --build "$tmp/build" --target llama-server -j "$(nproc 2>/dev/null || echo 2)" >"$tmp/build.log" 2>&1 \
            || { tail -20 "$tmp"/*.log >&2; rm -rf "$tmp"; return 1; }
        mkdir -p "$dir.tmp" && cp "$tmp/build/bin/llama-server" "$dir.tmp/" && rm -rf "$dir" && mv "$dir.tmp" "$dir"
        rm -rf "$tmp"
    fi
    ln -sfn "$dir/llama-server" "$server_root/llama-server"
}

if [ -n "$extras" ]; then
    build_llama_server || echo "edgespec: could not build llama-server (the error is above); the bench's llama-server peer will be missing" >&2
fi

if [ -n "$extras" ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    # pinned: an unpinned torch resolves to a multi-GB CUDA build; 2.13.0 is the CPU
    # build where a local wheel of it exists (as on the project's machines)
    echo "edgespec: installing torch for the export tools (1-3 minutes)"
    "$PYTHON" -m pip install "torch==2.13.0"
fi

if [ -n "$extras" ] && ! command -v Xvfb >/dev/null 2>&1; then
    # the desktop app's test draws on a virtual screen
    if as_root_with_apt; then
        apt_install xvfb || echo "edgespec: could not install xvfb; the desktop app's test will be skipped" >&2
    else
        echo "edgespec: install Xvfb (Debian: apt-get install xvfb) to run the desktop app's test" >&2
    fi
fi

# edgespec itself, with llama-cpp-python's own dependencies (the pin above is already met)
echo "edgespec: installing edgespec and its Python dependencies (about a minute)"
"$PYTHON" -m pip install -e "$here$extras"
