"""NVIDIA GPUs through NVML (the `pynvml` module from nvidia-ml-py, or a test fake with the same surface).

Every query that older cards, drivers or containers refuse (NVMLError_NotSupported,
NoPermission) degrades to "unknown" plus a note in `unseen`; only a failure to talk to the
driver at all means "no NVIDIA GPUs", and that is recorded with the reason too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.hardware.machine import GpuInfo
from launcher.hardware.sources import NvmlLoader
from launcher.hardware.tables import match_gpu

# NVML return codes (nvml.h); read from the module when it has them.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_NVLINK_MAX_LINKS = 18
_NVLINK_DEVICE_TYPE_SWITCH = 2
_CLOCK_MEM = 2


@dataclass
class NvidiaReport:
    """The NVIDIA GPUs found plus driver facts and what could not be seen."""

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    unseen: list[str] = field(default_factory=list)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bus_key(bus_id: Any) -> str:
    """'00000000:65:00.0' and '0000:65:00.0' both -> '65:00.0' (NVML mixes the two widths)."""
    return ":".join(_text(bus_id).strip("\x00").lower().split(":")[-2:])


class _Nvml:
    """Wraps the module so each query answers a value or None and remembers why not."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.error_type: type[BaseException] = getattr(module, "NVMLError", Exception)

    def code(self, err: BaseException) -> int | None:
        value = getattr(err, "value", None)
        return value if isinstance(value, int) else None

    def call(self, function: str, *args: Any) -> Any:
        """module.function(*args), or None when NVML refuses (not supported, no permission, no symbol)."""
        target = getattr(self.module, function, None)
        if target is None:
            return None
        try:
            return target(*args)
        except self.error_type:
            return None

    def const(self, name: str, default: int) -> int:
        value = getattr(self.module, name, default)
        return value if isinstance(value, int) else default


def _init_failure(nvml: _Nvml, err: BaseException) -> str:
    code = nvml.code(err)
    if code == nvml.const("NVML_ERROR_LIBRARY_NOT_FOUND", _LIBRARY_NOT_FOUND):
        return "NVIDIA: NVML library not found (no NVIDIA driver)"
    if code == nvml.const("NVML_ERROR_DRIVER_NOT_LOADED", _DRIVER_NOT_LOADED):
        return "NVIDIA: the NVIDIA driver is installed but not loaded (reboot or load the kernel module)"
    if code == nvml.const("NVML_ERROR_NO_PERMISSION", _NO_PERMISSION):
        return "NVIDIA: no permission to query the NVIDIA driver (NVML: Insufficient Permissions)"
    return f"NVIDIA: NVML failed to start ({err})"


def probe_nvidia(load: NvmlLoader) -> NvidiaReport:
    """Every NVIDIA GPU NVML can see, in NVML index order."""
    report = NvidiaReport()
    try:
        module = load()
    except ImportError:
        report.unseen.append("NVIDIA: nvidia-ml-py (pynvml) is not installed, NVIDIA GPUs not checked")
        return report
    nvml = _Nvml(module)
    try:
        module.nvmlInit()
    except nvml.error_type as err:
        report.unseen.append(_init_failure(nvml, err))
        return report
    except OSError as err:  # a broken libnvidia-ml can fail below pynvml's error mapping
        report.unseen.append(f"NVIDIA: NVML library could not be loaded ({err})")
        return report
    try:
        _read_devices(nvml, report)
    finally:
        nvml.call("nvmlShutdown")
    return report


def _read_devices(nvml: _Nvml, report: NvidiaReport) -> None:
    report.driver_version = _optional_text(nvml.call("nvmlSystemGetDriverVersion"))
    cuda = nvml.call("nvmlSystemGetCudaDriverVersion")
    if isinstance(cuda, int) and cuda > 0:
        report.cuda_driver_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    count = nvml.call("nvmlDeviceGetCount")
    if count is None:
        report.unseen.append("NVIDIA: NVML could not count the GPUs")
        return
    handles: list[tuple[int, Any]] = []
    for index in range(int(count)):
        handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            report.unseen.append(f"NVIDIA GPU {index}: not accessible (permission denied or GPU lost)")
            continue
        handles.append((index, handle))
    bus_to_index = {}
    for index, handle in handles:
        pci = nvml.call("nvmlDeviceGetPciInfo", handle)
        if pci is not None:
            bus_to_index[_bus_key(pci.busId)] = index
    links = {index: _nvlinks(nvml, handle, bus_to_index) for index, handle in handles}
    switched = {index for index, link in links.items() if link.via_switch}
    for index, handle in handles:
        gpu = _read_device(nvml, index, handle, links[index], switched, report.unseen)
        if gpu is not None:
            report.gpus.append(gpu)


def _optional_text(value: Any) -> str | None:
    return _text(value) if value is not None else None


@dataclass
class _Links:
    active: int = 0
    peers: set[int] = field(default_factory=set)
    via_switch: bool = False


def _nvlinks(nvml: _Nvml, handle: Any, bus_to_index: dict[str, int]) -> _Links:
    links = _Links()
    enabled = nvml.const("NVML_FEATURE_ENABLED", 1)
    switch_type = nvml.const("NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_DEVICE_TYPE_SWITCH)
    for link in range(nvml.const("NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS)):
        if nvml.call("nvmlDeviceGetNvLinkState", handle, link) != enabled:
            continue  # NotSupported on cards without NVLink, or an unused link
        links.active += 1
        if nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link) == switch_type:
            links.via_switch = True
            continue
        remote = nvml.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if remote is not None and _bus_key(remote.busId) in bus_to_index:
            links.peers.add(bus_to_index[_bus_key(remote.busId)])
    return links


def _read_device(
    nvml: _Nvml, index: int, handle: Any, links: _Links, switched: set[int], unseen: list[str]
) -> GpuInfo | None:
    name = _text(nvml.call("nvmlDeviceGetName", handle) or f"NVIDIA GPU {index}")
    memory = nvml.call("nvmlDeviceGetMemoryInfo", handle)
    if memory is None:
        unseen.append(f"NVIDIA GPU {index} ({name}): memory size not readable, GPU ignored")
        return None
    spec = match_gpu(name, int(memory.total), vendor="nvidia")
    capability = nvml.call("nvmlDeviceGetCudaComputeCapability", handle)
    compute_capability = (int(capability[0]), int(capability[1])) if capability else None
    if compute_capability is None and spec is not None:
        compute_capability = spec.compute_capability
    bandwidth = spec.bandwidth if spec else _bandwidth_from_clocks(nvml, handle)
    if spec is None:
        how = "computed from NVML bus width and memory clock" if bandwidth else "unknown"
        unseen.append(f"NVIDIA GPU {index} ({name}): not in gpus.csv; bandwidth {how}, FP16 TFLOPS unknown")
    link: str | None
    if links.via_switch:
        peers = tuple(sorted(switched - {index}))
        link = f"NVLink x{links.active} (NVSwitch)"
    elif links.active:
        peers = tuple(sorted(links.peers - {index}))
        link = f"NVLink x{links.active}"
    else:
        peers = ()
        link = _pcie_link(nvml, handle)
    return GpuInfo(
        index=index,
        vendor="nvidia",
        name=name,
        memory_total=int(memory.total),
        memory_free=int(memory.free),
        compute_capability=compute_capability,
        memory_bandwidth=bandwidth,
        fp16_tflops=spec.fp16_tflops if spec else None,
        link=link,
        nvlink_peers=peers,
    )


def _bandwidth_from_clocks(nvml: _Nvml, handle: Any) -> float | None:
    """Peak bytes/s = memory clock x 2 (double data rate, as NVML reports it) x bus width / 8."""
    bus_bits = nvml.call("nvmlDeviceGetMemoryBusWidth", handle)
    clock_mhz = nvml.call("nvmlDeviceGetMaxClockInfo", handle, nvml.const("NVML_CLOCK_MEM", _CLOCK_MEM))
    if not bus_bits or not clock_mhz:
        return None
    return float(clock_mhz) * 1e6 * 2 * float(bus_bits) / 8


def _pcie_link(nvml: _Nvml, handle: Any) -> str | None:
    # "Max" is what the GPU and this slot can negotiate; the current value drops at idle to save power.
    generation = nvml.call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
    width = nvml.call("nvmlDeviceGetMaxPcieLinkWidth", handle)
    if not generation or not width:
        return None
    return f"PCIe {generation}.0 x{width}"
