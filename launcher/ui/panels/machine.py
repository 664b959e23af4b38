"""The "This machine" page: CPU and its features, RAM, GPUs or the Apple chip, and what was not detected."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from launcher.core.units import format_bytes, format_rate
from launcher.hardware.machine import GpuInfo, Machine
from launcher.ui import theme
from launcher.ui.panels.gpu_pack import GpuPackCard
from launcher.ui.widgets.card import Card, muted

# Features that change which kernels an engine can use; shown first and in bold.
KEY_FEATURES = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_tile",
    "neon",
    "asimddp",
    "dotprod",
    "i8mm",
    "sve",
    "bf16",
)
OS_NAMES = {"linux": "Linux", "darwin": "macOS", "windows": "Windows"}


def _rows(card: Card, rows: list[tuple[str, str]]) -> None:
    grid = QGridLayout()
    grid.setHorizontalSpacing(16)
    grid.setVerticalSpacing(4)
    for row, (name, value) in enumerate(rows):
        key = muted(name, wrap=False)
        text = QLabel(value)
        text.setWordWrap(True)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        grid.addWidget(key, row, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(text, row, 1)
    grid.setColumnStretch(1, 1)
    card.body.addLayout(grid)


def feature_summary(features: frozenset[str]) -> str:
    """Key features first, then how many others the CPU reports."""
    key = [f for f in KEY_FEATURES if f in features]
    others = len(features) - len(key)
    text = ", ".join(key) if key else "none of the SIMD features engines use"
    return text + (f" (+{others} more)" if others > 0 else "")


def gpu_rows(gpu: GpuInfo) -> list[tuple[str, str]]:
    """The lines shown for one GPU."""
    rows = [
        ("Memory", f"{format_bytes(gpu.memory_total)} total, {format_bytes(gpu.memory_free)} free"),
        (
            "Bandwidth",
            format_rate(gpu.memory_bandwidth) if gpu.memory_bandwidth else "unknown (not in our table)",
        ),
    ]
    if gpu.compute_capability:
        rows.append(("Compute capability", "{}.{}".format(*gpu.compute_capability)))
    if gpu.fp16_tflops:
        rows.append(("FP16", f"{gpu.fp16_tflops:.0f} TFLOPS"))
    if gpu.link:
        rows.append(("Link", gpu.link))
    return rows


class MachinePanel(QWidget):
    """Shows one `Machine`; `set_machine` replaces it, `set_probing`/`set_error` show progress."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.machine: Machine | None = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        outer.addWidget(scroll)
        self._content = QWidget()
        scroll.setWidget(self._content)
        self._layout = QVBoxLayout(self._content)
        self._layout.setContentsMargins(20, 16, 20, 16)
        self._layout.setSpacing(12)
        self.title = QLabel("This machine")
        self.title.setObjectName("PageTitle")
        self.subtitle = muted("Detecting hardware…")
        self._layout.addWidget(self.title)
        self._layout.addWidget(self.subtitle)
        self._grid = QGridLayout()
        self._grid.setSpacing(12)
        self._layout.addLayout(self._grid)
        # This computer's GPU engine (filled by the window only for this machine, not a recorded one).
        self.gpu_pack = GpuPackCard()
        self.gpu_pack.setVisible(False)
        self._layout.addWidget(self.gpu_pack)
        self._layout.addStretch(1)
        self.cards: dict[str, Card] = {}

    def show_gpu_pack(self, machine: Machine) -> None:
        """Show the GPU engine card for this computer (`machine` is what was detected here)."""
        self.gpu_pack.setVisible(True)
        self.gpu_pack.set_machine(machine)

    def set_probing(self) -> None:
        """Show that a probe is running."""
        self.subtitle.setText("Detecting hardware…")

    def set_error(self, message: str) -> None:
        """Show why the probe failed."""
        self.subtitle.setText(f"Hardware detection failed: {message}")

    def set_machine(self, machine: Machine) -> None:
        """Render `machine`."""
        self.machine = machine
        while self._grid.count():
            item = self._grid.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        self.cards = {}
        os_name = OS_NAMES.get(machine.os, machine.os)
        label = f"{machine.name} · " if machine.name else ""
        self.subtitle.setText(f"{label}{os_name} {machine.os_version}".strip())

        cpu = machine.cpu
        cpu_card = Card("CPU")
        _rows(
            cpu_card,
            [
                ("Model", cpu.brand or "unknown"),
                ("Architecture", cpu.arch),
                ("Cores", f"{cpu.physical_cores} physical, {cpu.logical_cores} logical"),
                ("Features", feature_summary(cpu.features)),
                ("RAM bandwidth", format_rate(cpu.memory_bandwidth) if cpu.memory_bandwidth else "unknown"),
            ],
        )
        memory_card = Card("Memory and disk")
        _rows(
            memory_card,
            [
                (
                    "RAM",
                    f"{format_bytes(machine.memory.total)} total, {format_bytes(machine.memory.available)} available",
                ),
                (
                    "Disk free",
                    format_bytes(machine.disk_free) + (f" in {machine.models_dir}" if machine.models_dir else ""),
                ),
            ],
        )
        self._add("cpu", cpu_card, 0, 0)
        self._add("memory", memory_card, 0, 1)

        row = 1
        if machine.apple is not None:
            chip = machine.apple
            apple_card = Card(chip.chip)
            _rows(
                apple_card,
                [
                    ("Unified memory", format_bytes(chip.unified_memory)),
                    ("GPU may use", f"{format_bytes(chip.gpu_wired_limit)} (wired limit)"),
                    ("Bandwidth", format_rate(chip.memory_bandwidth) if chip.memory_bandwidth else "unknown"),
                    ("GPU cores", str(chip.gpu_cores) if chip.gpu_cores else "unknown"),
                ],
            )
            self._add("apple", apple_card, row, 0, span=2)
            row += 1
        driver = getattr(machine, "nvidia_driver_version", None)
        cuda = getattr(machine, "cuda_driver_version", None)
        for index, gpu in enumerate(machine.gpus):
            gpu_card = Card(f"GPU {gpu.index}: {gpu.name}")
            rows = gpu_rows(gpu)
            if gpu.vendor == "nvidia" and driver:
                rows.append(("Driver", f"{driver}" + (f" (CUDA {cuda})" if cuda else "")))
            _rows(gpu_card, rows)
            span = 2 if len(machine.gpus) == 1 else 1
            self._add(f"gpu{gpu.index}", gpu_card, row + index // 2, index % 2, span=span)
        if not machine.gpus and machine.apple is None:
            none_card = Card("GPU")
            none_card.body.addWidget(muted("No usable GPU found: models run on the CPU from system RAM."))
            self._add("gpu", none_card, row, 0, span=2)
        row += max(1, (len(machine.gpus) + 1) // 2)

        unseen_card = Card("Not detected")
        if machine.unseen:
            for note in machine.unseen:
                item = QLabel(f"• {note}")
                item.setWordWrap(True)
                unseen_card.body.addWidget(item)
        else:
            unseen_card.body.addWidget(muted("Everything the advisor uses was detected."))
        unseen_card.title_label.setStyleSheet(f"color: {theme.WARN};" if machine.unseen else "")
        self._add("unseen", unseen_card, row, 0, span=2)

    def _add(self, key: str, card: Card, row: int, column: int, span: int = 1) -> None:
        self.cards[key] = card
        self._grid.addWidget(card, row, column, 1, span)
