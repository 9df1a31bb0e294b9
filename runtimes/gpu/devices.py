"""Which compute devices this machine has, and where a `--device` request runs.

llama.cpp (built with Vulkan by install.sh where the toolchain exists) lists its GPUs
through ggml's device registry. ggml-vulkan hides CPU-type Vulkan devices such as Mesa's
lavapipe unless GGML_VK_VISIBLE_DEVICES names them, and it reads that variable once, when
the registry first starts. So `--device gpu` asks the Vulkan loader itself which devices
exist, before llama.cpp starts, and makes a software device visible only when no hardware
GPU is there: it is slow, but it is a real Vulkan implementation and runs the GPU code path.

ONNX Runtime reports its execution providers directly; `onnx_providers` picks among them.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from edgespec.errors import EdgespecError
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.kv_cache import KV_TYPES

DEVICES = ("cpu", "gpu", "npu", "auto")

# VkPhysicalDeviceType
_VK_KINDS = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
# enum ggml_backend_dev_type
_GGML_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise EdgespecError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")


@dataclass(frozen=True)
class VulkanDevice:
    """A physical device as the Vulkan loader reports it (lavapipe's kind is "cpu")."""

    index: int
    name: str
    kind: str
    api_version: str

    @property
    def software(self) -> bool:
        return self.kind == "cpu"


@functools.lru_cache(maxsize=1)
def vulkan_devices() -> tuple[VulkanDevice, ...]:
    """Every physical device the Vulkan loader finds; empty without a loader or a driver.
    Asked once per process (creating an instance loads every driver)."""
    try:
        vk = ctypes.CDLL("libvulkan.so.1")
    except OSError:
        return ()

    class InstanceInfo(ctypes.Structure):
        _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                    ("pApplicationInfo", ctypes.c_void_p), ("enabledLayerCount", ctypes.c_uint32),
                    ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                    ("ppEnabledExtensionNames", ctypes.c_void_p)]

    info = InstanceInfo(sType=1)  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
    instance = ctypes.c_void_p()
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return ()
    try:
        count = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        if vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles) not in (0, 5):  # SUCCESS, INCOMPLETE
            return ()
        found = []
        for i in range(count.value):
            # VkPhysicalDeviceProperties: apiVersion, driverVersion, vendorID, deviceID,
            # deviceType, deviceName[256], then limits this code does not read
            props = ctypes.create_string_buffer(4096)
            vk.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handles[i]), props)
            api, kind = int.from_bytes(props.raw[0:4], "little"), int.from_bytes(props.raw[16:20], "little")
            name = props.raw[20:276].split(b"\0", 1)[0].decode("utf-8", "replace")
            found.append(VulkanDevice(i, name, _VK_KINDS.get(kind, "other"),
                                      f"{api >> 22 & 0x7F}.{api >> 12 & 0x3FF}.{api & 0xFFF}"))
        return tuple(found)
    finally:
        vk.vkDestroyInstance(instance, None)


def _lib_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    return Path(spec.origin).parent / "lib"


def llama_has_vulkan() -> bool:
    """Whether the installed llama.cpp carries the Vulkan backend (checked without starting it)."""
    return any(_lib_dir().glob("libggml-vulkan.so*"))


@dataclass(frozen=True)
class GgmlDevice:
    """A device in llama.cpp's registry; `handle` is its ggml_backend_dev_t."""

    name: str
    description: str
    kind: str
    backend: str
    free: int
    total: int
    handle: int = field(repr=False, compare=False)


_lib: ctypes.CDLL | None = None


def _ggml() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    import llama_cpp  # noqa: F401  loads libllama and, through it, libggml

    # by the name libllama links against: opening libggml.so (a symlink to the same file)
    # would load a second copy, with a device registry of its own
    lib = ctypes.CDLL(str(next((p for p in (_lib_dir() / "libggml.so.0", _lib_dir() / "libggml.so") if p.exists()))))
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for fn, res, args in [("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                          ("ggml_backend_dev_name", cp, [vp]), ("ggml_backend_dev_description", cp, [vp]),
                          ("ggml_backend_dev_type", ctypes.c_int, [vp]),
                          ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
                          ("ggml_backend_dev_backend_reg", vp, [vp]), ("ggml_backend_reg_name", cp, [vp])]:
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


def ggml_devices() -> list[GgmlDevice]:
    """llama.cpp's devices. The first call starts ggml's registry: call `prepare` before it."""
    lib = _ggml()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        d = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(d, ctypes.byref(free), ctypes.byref(total))
        found.append(GgmlDevice(lib.ggml_backend_dev_name(d).decode(), lib.ggml_backend_dev_description(d).decode(),
                                _GGML_KINDS.get(lib.ggml_backend_dev_type(d), "other"),
                                lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(d)).decode(),
                                free.value, total.value, d))
    return found


_prepared: str | None = None


def prepare(device: str) -> None:
    """Start llama.cpp's device registry for the first request of this process.

    `gpu`: a software Vulkan device is made visible when the machine has no hardware
    GPU. `cpu`: the registry starts with the Vulkan loader finding no driver, so a
    CPU-only process does not load one (lavapipe brings LLVM: 63 MB of RSS that no
    memory plan counts); the environment is restored right after. Later calls change
    nothing: the registry starts once per process."""
    global _prepared
    check_device(device)  # before anything else: an unknown device must not start llama.cpp
    if _prepared is not None:
        return
    _prepared = device
    if not llama_has_vulkan():
        return
    if device == "gpu" and "GGML_VK_VISIBLE_DEVICES" not in os.environ:
        vk = vulkan_devices()
        if vk and all(d.software for d in vk):
            os.environ["GGML_VK_VISIBLE_DEVICES"] = ",".join(str(d.index) for d in vk)
    elif device == "cpu":
        hide = {"VK_DRIVER_FILES": os.devnull, "VK_ICD_FILENAMES": os.devnull}
        saved = {k: os.environ.get(k) for k in hide}
        os.environ.update(hide)
        try:
            _ggml().ggml_backend_dev_count()  # starts the registry
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@dataclass(frozen=True)
class Placement:
    """Where a llama.cpp model runs: `gpus` empty means the CPU alone."""

    request: str
    gpus: tuple[GgmlDevice, ...]
    notice: str | None = None  # one line for the user when the request could not be met as asked

    @property
    def label(self) -> str:
        return ", ".join(f"{d.name} ({d.description})" for d in self.gpus) if self.gpus else "CPU"


def place(device: str) -> Placement:
    """The llama.cpp devices for a `--device` request. `gpu` takes llama.cpp's GPUs (a software
    Vulkan device when there is no other) and falls back to the CPU with a notice when none
    exists; `auto` takes hardware GPUs only; `npu` has no llama.cpp backend here."""
    prepare(device)
    if device == "cpu":
        return Placement(device, ())
    gpus = tuple(d for d in ggml_devices() if d.kind in ("gpu", "igpu"))
    if device == "auto":
        hardware = tuple(d for d in gpus if not _is_software(d))
        return Placement(device, hardware)
    if device == "npu":
        return Placement(device, (), "no NPU backend in llama.cpp: running on the CPU (NPUs run ONNX exports)")
    if gpus:
        soft = [d for d in gpus if _is_software(d)]
        note = f"no hardware GPU: running on {soft[0].description}, a software Vulkan device (slow)" if soft else None
        return Placement(device, gpus, note)
    if not llama_has_vulkan():
        why = "llama.cpp was built without a GPU backend (install.sh builds Vulkan where its toolchain is installed)"
    elif _prepared != "gpu":
        why = "the first model of this process chose the CPU; llama.cpp sets up its devices once per process"
    else:
        why = "no Vulkan device found"
    return Placement(device, (), f"no GPU: {why}; running on the CPU")


def shares_ram(d: GgmlDevice) -> bool:
    """Whether a GPU's memory is the system's RAM: ggml says so for integrated GPUs, and the
    Vulkan loader for integrated and CPU-type (software) devices, which ggml lists as GPUs."""
    if d.kind == "igpu" or _is_software(d):
        return True
    return any(v.kind in ("integrated", "cpu") for v in vulkan_devices() if v.name == d.description)


def _is_software(d: GgmlDevice) -> bool:
    name = d.description.lower()
    return any(s in name for s in ("llvmpipe", "lavapipe", "swiftshader"))


# -- ONNX Runtime -----------------------------------------------------------------

# Providers per request, best first. XNNPACK is a CPU provider tuned for ARM, taken for `cpu`
# when present; NNAPI, CoreML and QNN reach a phone's or a Mac's NPU (and GPU).
_ONNX_CHOICES = {
    "cpu": ["XnnpackExecutionProvider", "CPUExecutionProvider"],
    "gpu": ["CUDAExecutionProvider", "ROCMExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider",
            "NnapiExecutionProvider", "WebGpuExecutionProvider", "OpenVINOExecutionProvider"],
    "npu": ["QNNExecutionProvider", "NnapiExecutionProvider", "CoreMLExecutionProvider", "VitisAIExecutionProvider",
            "OpenVINOExecutionProvider"],
}
_ONNX_CHOICES["auto"] = list(dict.fromkeys(_ONNX_CHOICES["npu"] + _ONNX_CHOICES["gpu"] + _ONNX_CHOICES["cpu"]))

# Options a user reaches for first, by their ONNX Runtime names; `--ep-option KEY=VALUE` passes any other.
EP_OPTIONS = {
    "NnapiExecutionProvider": "NNAPI flags, e.g. NNAPI_FLAG_USE_FP16=1, NNAPI_FLAG_CPU_DISABLED=1",
    "CoreMLExecutionProvider": "MLComputeUnits=ALL|CPUAndNeuralEngine|CPUAndGPU|CPUOnly, ModelFormat=MLProgram",
    "QNNExecutionProvider": "backend_path=libQnnHtp.so (HTP, the NPU) or libQnnGpu.so",
    "XnnpackExecutionProvider": "intra_op_num_threads=N",
}


@dataclass(frozen=True)
class OnnxPlacement:
    providers: list  # what InferenceSession takes: names, or (name, options) pairs
    notice: str | None = None


def onnx_providers(device: str, available: Sequence[str] | None = None,
                   options: dict[str, str] | None = None, threads: int | None = None) -> OnnxPlacement:
    """The execution providers for a `--device` request among those ONNX Runtime reports,
    with `options` passed to the chosen one; the CPU provider always comes last, as the
    fallback for operators the chosen provider does not take."""
    if available is None:
        import onnxruntime as ort

        available = ort.get_available_providers()
    check_device(device)
    chosen = next((p for p in _ONNX_CHOICES[device] if p in available), None)
    opts = dict(options or {})
    notice = None
    if chosen is None:
        notice = (f"no {device.upper()} execution provider in this onnxruntime "
                  f"(it has {', '.join(available)}): running on the CPU"
                  + (" without the --ep-option settings" if opts else ""))
        chosen, opts = "CPUExecutionProvider", {}  # the options were meant for the missing provider
    if chosen == "XnnpackExecutionProvider" and threads and "intra_op_num_threads" not in opts:
        opts["intra_op_num_threads"] = str(threads)
    first = (chosen, opts) if opts else chosen
    providers = [first] if chosen == "CPUExecutionProvider" else [first, "CPUExecutionProvider"]
    return OnnxPlacement(providers, notice)


def parse_ep_options(pairs: Sequence[str]) -> dict[str, str]:
    """`KEY=VALUE` strings from the command line into a provider-options dict."""
    opts = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise EdgespecError(f"--ep-option takes KEY=VALUE, got {p!r}")
        opts[key.strip()] = value.strip()
    return opts


# What a GPU keeps besides weights and KV cache (compute buffers, the driver's own):
# a share of its memory and a fixed amount, left free when layers are offloaded.
GPU_RESERVE_SHARE = 0.1
GPU_RESERVE_BYTES = 256 << 20


def gpu_layers(facts: ModelFacts, device_free: int, n_ctx: int, kv_type: str = "f16") -> int:
    """The largest n_gpu_layers whose weights and KV cache fit a GPU's free memory. llama.cpp
    offloads the output layer first (the LM head; a tied one as a second copy of the
    embedding), then blocks from the last one down; the input embedding stays on the host.
    On a GPU that shares the system's RAM (an integrated or software GPU) `device_free` is
    what the device reports as its share of that RAM."""
    head = facts.output_bytes or facts.embd_bytes
    per_block = (facts.tensor_bytes - facts.embd_bytes - facts.output_bytes) / facts.n_layer
    kv_per_block = n_ctx * facts.n_head_kv * (facts.head_k + facts.head_v) * KV_TYPES[kv_type]
    allowance = device_free * (1 - GPU_RESERVE_SHARE) - GPU_RESERVE_BYTES
    if allowance < head or allowance <= 0:
        return 0
    return 1 + min(facts.n_layer, int((allowance - head) // (per_block + kv_per_block)))
