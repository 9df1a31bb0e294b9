"""`edgespec doctor`: the backends, devices and execution providers this machine has,
and where each `--device` request would run."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import psutil
import typer
from rich.console import Console
from rich.table import Table

from edgespec.cli.common import app, out, user_errors


def diagnose() -> dict:
    """Everything `doctor` prints, as plain data (the CLI prints it, `--json` dumps it)."""
    import llama_cpp as ll
    import onnxruntime as ort

    from edgespec.runtimes.gpu import devices as dv
    from edgespec.runtimes.llamacpp import init_backend

    lib = dv._lib_dir()
    stamp = lib.parent / ".edgespec-build-flags"
    vk = dv.vulkan_devices()
    # what `--device gpu` sees: software Vulkan devices too, where there is no hardware GPU
    init_backend("gpu")
    ggml = dv.ggml_devices()
    report = {
        "machine": {
            "cpu": _cpu_name(), "cores": psutil.cpu_count(logical=False), "threads": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version(),
        },
        "llama_cpp": {
            "version": ll.__version__,
            "backends": sorted({p.name.split(".so")[0].removeprefix("libggml-") for p in lib.glob("libggml-*.so*")}
                               - {"base"}),
            "gpu_offload": bool(ll.llama_supports_gpu_offload()),
            "system_info": ll.llama_print_system_info().decode(errors="replace").strip(" |"),
            "build_flags": stamp.read_text() if stamp.is_file() else None,
            "patches": _patches(lib.parent),
            "devices": [{"name": d.name, "description": d.description, "kind": d.kind, "backend": d.backend,
                         "memory_free": d.free, "memory_total": d.total} for d in ggml],
        },
        "vulkan_devices": [{"index": d.index, "name": d.name, "kind": d.kind, "api": d.api_version,
                            "software": d.software} for d in vk],
        "onnxruntime": {"version": ort.__version__, "providers": ort.get_available_providers()},
        "device_choice": {},
    }
    for request in dv.DEVICES:
        p = dv.place(request)
        o = dv.onnx_providers(request)
        report["device_choice"][request] = {
            "llama_cpp": p.label, "llama_cpp_notice": p.notice,
            "onnxruntime": [x if isinstance(x, str) else x[0] for x in o.providers], "onnxruntime_notice": o.notice,
        }
    return report


def _patches(package: Path) -> list[str] | None:
    """edgespec's llama.cpp patches install.sh applied (None: not built by install.sh)."""
    try:
        text = (package / ".edgespec-build-patches").read_text().split()
    except OSError:
        return None
    return [p for p in text if p != "none"]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_report(r: dict, console: Console) -> None:
    m = r["machine"]
    console.print(f"machine: {m['cpu']}, {m['cores']} cores ({m['threads']} threads), "
                  f"{m['memory_bytes'] / 2**30:.1f} GiB, Python {m['python']}", highlight=False)
    lc = r["llama_cpp"]
    console.print(f"llama.cpp (llama-cpp-python {lc['version']}): backends {', '.join(lc['backends'])}; "
                  f"GPU offload {'yes' if lc['gpu_offload'] else 'no'}", highlight=False)
    console.print(f"  {lc['system_info']}", highlight=False, soft_wrap=True)
    if lc["build_flags"]:
        console.print(f"  built with CMAKE_ARGS={lc['build_flags']}", highlight=False, soft_wrap=True)
    if lc["patches"] is not None:
        console.print(f"  edgespec's patches: {', '.join(lc['patches']) or 'none (they did not apply to this version)'}",
                      highlight=False, soft_wrap=True)
    t = Table("device", "description", "kind", "backend", "memory", title="llama.cpp devices")
    for d in lc["devices"]:
        t.add_row(d["name"], d["description"], d["kind"], d["backend"],
                  f"{d['memory_free'] / 2**30:.1f} / {d['memory_total'] / 2**30:.1f} GiB free")
    console.print(t)
    if r["vulkan_devices"]:
        t = Table("#", "name", "kind", "Vulkan", title="Vulkan devices (from the loader)")
        for d in r["vulkan_devices"]:
            t.add_row(str(d["index"]), d["name"], d["kind"] + (" (software)" if d["software"] else ""), d["api"])
        console.print(t)
    else:
        console.print("Vulkan: no loader or no device", highlight=False)
    o = r["onnxruntime"]
    console.print(f"ONNX Runtime {o['version']}: {', '.join(o['providers'])}", highlight=False)
    t = Table("--device", "GGUF on llama.cpp", "ONNX on ONNX Runtime", title="where each --device runs")
    for req, c in r["device_choice"].items():
        t.add_row(req, c["llama_cpp"] + (f"\n[dim]{c['llama_cpp_notice']}[/]" if c["llama_cpp_notice"] else ""),
                  " > ".join(p.removesuffix("ExecutionProvider") for p in c["onnxruntime"])
                  + (f"\n[dim]{c['onnxruntime_notice']}[/]" if c["onnxruntime_notice"] else ""))
    console.print(t)


@app.command()
@user_errors
def doctor(json_out: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """The backends, devices and execution providers on this machine, and where each --device runs.

    Example: edgespec doctor --json
    """
    report = diagnose()
    if json_out:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, out)
