"""Raw sources of the recorded machines: what /proc/cpuinfo, sysctl, system_profiler, sysfs, psutil and
NVML answer on each. `record_fixtures.py` feeds them through the real probe to write the JSON fixtures,
and test_recorded.py checks that the committed JSON still equals what the probe makes of them.

CPU flag lines are those of the real CPUs (Linux kernel 6.x spellings); NVML numbers are what the
driver reports (e.g. 24564 MiB for a 24 GB RTX 4090, 81559 MiB for an H100 80GB HBM3).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.hardware.sources import PlatformFacts, Sources
from tests.hardware.fakes import (
    GIB,
    FakeGpu,
    FakeNvml,
    FakeStats,
    cpuinfo_x86,
    make_sources,
    smbios_memory_device,
    smbios_tree,
)

RAW_DIR = Path(__file__).parent / "raw"

_X86_BASE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
    "syscall nx rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid aperfmperf pni pclmulqdq monitor ssse3"
)
SANDY_BRIDGE = (
    f"{_X86_BASE} dts acpi ss tm pbe arch_perfmon pebs bts xtopology dtes64 ds_cpl vmx est tm2 cx16 xtpr pdcm "
    "pcid sse4_1 sse4_2 x2apic popcnt tsc_deadline_timer aes xsave avx lahf_lm epb pti ssbd ibrs ibpb stibp "
    "tpr_shadow flexpriority ept vpid xsaveopt dtherm ida arat pln pts md_clear flush_l1d"
)
COFFEE_LAKE = (
    f"{_X86_BASE} dts acpi ss tm pbe arch_perfmon pebs bts xtopology dtes64 ds_cpl vmx est tm2 fma cx16 xtpr "
    "pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm "
    "3dnowprefetch cpuid_fault epb invpcid_single pti ssbd ibrs ibpb stibp tpr_shadow flexpriority ept vpid "
    "ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm mpx rdseed adx smap clflushopt "
    "intel_pt xsaveopt xsavec xgetbv1 xsaves dtherm ida arat pln pts hwp hwp_notify hwp_act_window hwp_epp "
    "md_clear flush_l1d arch_capabilities"
)
CASCADE_LAKE_X = (
    f"{COFFEE_LAKE.replace(' intel_pt', '')} avx512f avx512dq avx512cd avx512bw avx512vl intel_pt avx512_vnni"
)
ZEN3 = (
    f"{_X86_BASE} mmxext fxsr_opt pdpe1gb extd_apicid rapl fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx "
    "f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit "
    "wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba "
    "ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a rdseed adx smap clflushopt "
    "clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero "
    "irperf xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid "
    "decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes "
    "vpclmulqdq rdpid overflow_recov succor smca fsrm"
)
ZEN4 = (
    f"{ZEN3} avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni "
    "avx512_vnni avx512_bitalg avx512_vpopcntdq la57 flush_l1d"
)
SAPPHIRE_RAPIDS = (
    f"{COFFEE_LAKE.replace(' hle', '').replace(' rtm', '').replace(' mpx', '')} avx512f avx512dq avx512ifma "
    "avx512cd sha_ni avx512bw avx512vl avx_vnni avx512_bf16 wbnoinvd avx512vbmi umip pku ospke waitpkg "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid "
    "bus_lock_detect cldemote movdiri movdir64b enqcmd fsrm serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 "
    "avx512_fp16 amx_tile amx_int8"
)

UBUNTU_2204 = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
UBUNTU_2404 = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'


DDR3, DDR4, DDR5 = 0x18, 0x1A, 0x22


def _dimms(
    slots: list[tuple[str, str]], *, size_mb: int, speed: int, configured: int, kind: int
) -> dict[str, str | bytes]:
    """SMBIOS records for populated slots given as (device locator, bank locator)."""
    return smbios_tree(
        [
            smbios_memory_device(
                size_mb=size_mb,
                speed_mts=speed,
                configured_mts=configured,
                memory_type=kind,
                device_locator=device,
                bank_locator=bank,
            )
            for device, bank in slots
        ]
    )


def _linux(release: str = "6.8.0-45-generic") -> PlatformFacts:
    return PlatformFacts(system="Linux", machine="x86_64", release=release, processor="x86_64")


def _mac(version: str, release: str) -> PlatformFacts:
    return PlatformFacts(system="Darwin", machine="arm64", release=release, mac_version=version, processor="arm")


@dataclass(frozen=True)
class RawMachine:
    """A recorded machine's raw answers and its label."""

    label: str
    build: Callable[[Path], Sources]


def _read(name: str) -> str:
    return (RAW_DIR / name).read_text(encoding="utf-8")


def _h100_server(root: Path) -> Sources:
    buses = [f"00000000:{bus}:00.0" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    gpus = [
        FakeGpu("NVIDIA H100 80GB HBM3", 81559, 562, (9, 0), bus, 5120, 2619, (5, 16), ["switch"] * 18) for bus in buses
    ]
    return make_sources(
        root,
        platform=_linux("5.15.0-119-generic"),
        stats=FakeStats(2015 * GIB, 1890 * GIB, 112, 224),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "Intel(R) Xeon(R) Platinum 8480+", SAPPHIRE_RAPIDS, sockets=2, cores=56, threads=2
            ),
            "/etc/os-release": UBUNTU_2204,
            # 2 sockets x 8 DDR5 channels x 2 DIMMs; two DIMMs per channel run at 4400 MT/s.
            **_dimms(
                [
                    (f"CPU{cpu}_DIMM_{channel}{slot}", f"P{cpu} CHANNEL {channel}")
                    for cpu in (0, 1)
                    for channel in "ABCDEFGH"
                    for slot in (1, 2)
                ],
                size_mb=65536,
                speed=4800,
                configured=4400,
                kind=DDR5,
            ),
        },
        nvml=FakeNvml(gpus, driver="550.90.07", cuda=12040),
        disk_free=24_500 * GIB,
        models_dir="/data/hf/hub",
    )


def _rtx4090_desktop(root: Path) -> Sources:
    return make_sources(
        root,
        platform=_linux(),
        stats=FakeStats(64 * GIB - 1_610_612_736, 51 * GIB, 16, 32),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "AMD Ryzen 9 7950X 16-Core Processor", ZEN4, sockets=1, cores=16, threads=2, vendor="AuthenticAMD"
            ),
            "/etc/os-release": UBUNTU_2204,
            **_dimms(
                [("DIMM_A2", "P0 CHANNEL A"), ("DIMM_B2", "P0 CHANNEL B")],
                size_mb=32768,
                speed=5600,
                configured=5600,
                kind=DDR5,
            ),
        },
        nvml=FakeNvml(
            [FakeGpu("NVIDIA GeForce RTX 4090", 24564, 1139, (8, 9), "00000000:01:00.0", 384, 10501, (4, 16))],
            driver="550.54.15",
            cuda=12040,
        ),
        disk_free=1_310 * GIB,
    )


def _two_3090_nvlink(root: Path) -> Sources:
    bus0, bus1 = "00000000:17:00.0", "00000000:65:00.0"
    gpus = [
        FakeGpu("NVIDIA GeForce RTX 3090", 24576, 412, (8, 6), bus0, 384, 9751, (3, 16), [bus1] * 4),
        FakeGpu("NVIDIA GeForce RTX 3090", 24576, 5, (8, 6), bus1, 384, 9751, (3, 16), [bus0] * 4),
    ]
    return make_sources(
        root,
        platform=_linux("6.5.0-41-generic"),
        stats=FakeStats(128 * GIB - 1_073_741_824, 119 * GIB, 10, 20),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz", CASCADE_LAKE_X, sockets=1, cores=10, threads=2
            ),
            "/etc/os-release": UBUNTU_2204,
            # Quad-channel X299 board, 8 DIMMs (2 per channel).
            **_dimms(
                [(f"DIMM_{channel}{slot}", "NODE 1") for channel in "ABCD" for slot in (1, 2)],
                size_mb=16384,
                speed=2933,
                configured=2933,
                kind=DDR4,
            ),
        },
        nvml=FakeNvml(gpus, driver="535.183.01", cuda=12020),
        disk_free=2_650 * GIB,
    )


def _four_4090(root: Path) -> Sources:
    buses = ["00000000:01:00.0", "00000000:41:00.0", "00000000:81:00.0", "00000000:C1:00.0"]
    gpus = [
        FakeGpu("NVIDIA GeForce RTX 4090", 24564, used, (8, 9), bus, 384, 10501, (4, 16))
        for bus, used in zip(buses, (436, 4, 4, 4), strict=True)
    ]
    return make_sources(
        root,
        platform=_linux("6.8.0-49-generic"),
        stats=FakeStats(256 * GIB - 2_147_483_648, 241 * GIB, 32, 64),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "AMD EPYC 7543 32-Core Processor", ZEN3, sockets=1, cores=32, threads=2, vendor="AuthenticAMD"
            ),
            "/etc/os-release": UBUNTU_2404,
            **_dimms(
                [(f"DIMM{channel}1", f"P0 CHANNEL {channel}") for channel in "ABCDEFGH"],
                size_mb=32767,
                speed=3200,
                configured=3200,
                kind=DDR4,
            ),
        },
        nvml=FakeNvml(gpus, driver="560.35.03", cuda=12060),
        disk_free=3_400 * GIB,
    )


def _rtx2080ti(root: Path) -> Sources:
    return make_sources(
        root,
        platform=_linux("6.5.0-41-generic"),
        stats=FakeStats(32 * GIB - 805_306_368, 26 * GIB, 6, 12),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz", COFFEE_LAKE, sockets=1, cores=6, threads=2
            ),
            "/etc/os-release": UBUNTU_2204,
            **_dimms(
                [("ChannelA-DIMM1", "BANK 1"), ("ChannelB-DIMM1", "BANK 3")],
                size_mb=16384,
                speed=3200,
                configured=3200,
                kind=DDR4,
            ),
        },
        nvml=FakeNvml(
            [FakeGpu("NVIDIA GeForce RTX 2080 Ti", 11264, 688, (7, 5), "00000000:01:00.0", 352, 7000, (3, 16))],
            driver="535.171.04",
            cuda=12020,
        ),
        disk_free=410 * GIB,
    )


def _avx2_laptop(root: Path) -> Sources:
    # A Ryzen 7 5800U laptop: its Vega iGPU shows up in sysfs with a 512 MiB carve-out.
    return make_sources(
        root,
        platform=_linux("6.8.0-45-generic"),
        stats=FakeStats(16 * GIB - 1_073_741_824, 9 * GIB, 8, 16),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "AMD Ryzen 7 5800U with Radeon Graphics", ZEN3, sockets=1, cores=8, threads=2, vendor="AuthenticAMD"
            ),
            "/etc/os-release": UBUNTU_2404,
            "/sys/class/drm/card0/device/vendor": "0x1002\n",
            "/sys/class/drm/card0/device/device": "0x1638\n",
            "/sys/class/drm/card0/device/mem_info_vram_total": f"{512 * 1024**2}\n",
            "/sys/class/drm/card0/device/mem_info_vram_used": f"{120 * 1024**2}\n",
            "/sys/class/drm/card0-eDP-1/status": "connected\n",
            **_dimms(
                [("DIMM 0", "P0 CHANNEL A"), ("DIMM 0", "P0 CHANNEL B")],
                size_mb=8192,
                speed=3200,
                configured=3200,
                kind=DDR4,
            ),
        },
        disk_free=180 * GIB,
    )


def _old_cpu(root: Path) -> Sources:
    return make_sources(
        root,
        platform=_linux("6.1.0-25-amd64"),
        stats=FakeStats(8 * GIB - 268_435_456, 6 * GIB, 4, 4),
        files={
            "/proc/cpuinfo": cpuinfo_x86(
                "Intel(R) Core(TM) i5-2500K CPU @ 3.30GHz", SANDY_BRIDGE, sockets=1, cores=4, threads=1
            ),
            "/etc/os-release": DEBIAN_12,
            **_dimms(
                [("ChannelA-DIMM0", "BANK 0"), ("ChannelB-DIMM0", "BANK 2")],
                size_mb=4096,
                speed=1333,
                configured=1333,
                kind=DDR3,
            ),
        },
        disk_free=95 * GIB,
    )


def _mac_sources(
    root: Path, sysctl_file: str, gpu_cores: int, chip: str, stats: FakeStats, macos: tuple[str, str]
) -> Sources:
    profiler = {
        "SPDisplaysDataType": [
            {
                "_name": chip,
                "sppci_bus": "spdisplays_builtin",
                "sppci_cores": str(gpu_cores),
                "sppci_device_type": "spdisplays_gpu",
                "sppci_model": chip,
                "spdisplays_mtlgpufamilysupport": "spdisplays_metal3",
                "spdisplays_vendor": "sppci_vendor_Apple",
            }
        ]
    }
    return make_sources(
        root,
        platform=_mac(*macos),
        stats=stats,
        commands={"sysctl": _read(sysctl_file), "system_profiler": json.dumps(profiler)},
        disk_free=(310 if stats.total < 64 * GIB else 3_100) * GIB,
        models_dir="/Users/me/.cache/huggingface/hub",
    )


def _macbook_air_m2(root: Path) -> Sources:
    stats = FakeStats(16 * GIB, 6 * GIB, 8, 8)
    return _mac_sources(root, "m2-macbook-air.sysctl", 10, "Apple M2", stats, ("14.6.1", "23.6.0"))


def _mac_studio_m3_ultra(root: Path) -> Sources:
    # M3 Ultra Mac Studios ship with macOS 15 (96/256/512 GB; 192 GB is the name the team asked for).
    stats = FakeStats(192 * GIB, 171 * GIB, 32, 32)
    return _mac_sources(root, "m3-ultra-mac-studio.sysctl", 80, "Apple M3 Ultra", stats, ("15.3.2", "24.3.0"))


RAW_MACHINES: dict[str, RawMachine] = {
    "macbook-air-m2-16gb": RawMachine("MacBook Air (M2, 16 GB)", _macbook_air_m2),
    "mac-studio-m3-ultra-192gb": RawMachine("Mac Studio (M3 Ultra, 192 GB)", _mac_studio_m3_ultra),
    "rtx4090-desktop": RawMachine("Desktop: Ryzen 9 7950X + RTX 4090", _rtx4090_desktop),
    "2x-rtx3090-nvlink": RawMachine("Workstation: i9-10900X + 2x RTX 3090 (NVLink bridge)", _two_3090_nvlink),
    "4x-rtx4090": RawMachine("Server: EPYC 7543 + 4x RTX 4090 (PCIe)", _four_4090),
    "cpu-avx2-laptop-16gb": RawMachine("Laptop: Ryzen 7 5800U, 16 GB, no discrete GPU", _avx2_laptop),
    "old-cpu-no-avx2": RawMachine("Old desktop: Core i5-2500K (AVX, no AVX2), 8 GB", _old_cpu),
    "8x-h100-server": RawMachine("HGX H100 server: 2x Xeon 8480+ + 8x H100 SXM (NVSwitch)", _h100_server),
    "rtx2080ti": RawMachine("Desktop: Core i7-8700K + RTX 2080 Ti (Turing, CC 7.5)", _rtx2080ti),
}
