"""The main window: a sidebar of pages, the server process, the metrics poller, and the glue between them.

Pages are views; the window owns the long-lived objects (ServerProcess, MetricsPoller, settings)
and wires their signals to the pages. `shutdown()` is the one place that stops everything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from launcher.core import settings as settings_store
from launcher.core.config import ServeConfig
from launcher.core.errors import LauncherError
from launcher.core.settings import Settings, WindowGeometry
from launcher.hardware.machine import Machine
from launcher.ui import theme, workers
from launcher.ui.panels.agents import AgentsPanel
from launcher.ui.panels.chat import ChatPanel
from launcher.ui.panels.gauges import GaugesPanel
from launcher.ui.panels.loaded_models import LoadedModelsPanel
from launcher.ui.panels.logs import LogsPanel
from launcher.ui.panels.machine import MachinePanel
from launcher.ui.panels.models import ModelsPanel
from launcher.ui.panels.server import ServerPanel
from launcher.ui.panels.settings import SettingsPanel
from launcher.ui.server_process import ServerEndpoint, ServerOutcome, ServerProcess
from launcher.ui.updates import UpdateController, UpdateNote, status_text

if TYPE_CHECKING:  # heavy (HTTP client, advisor, catalog, MCP SDK): imported when first needed
    from launcher.chat.mcp_config import McpServer
    from launcher.chat.mcp_host import McpHost
    from launcher.ui.metrics import LiveSample
    from launcher.ui.metrics_poller import MetricsPoller
    from launcher.ui.model_rows import ModelRow

log = logging.getLogger(__name__)


def _default_probe() -> Machine:
    from launcher.hardware.probe import probe_machine

    return probe_machine()


class MainWindow(QMainWindow):
    """The app window. `machine` skips the hardware probe (screenshots, tests with recorded machines).

    `check_updates`: look for a new release once the window shows, then daily (`launcher.ui.updates`;
    off for screenshots, startup timing and most tests). `serve_on_start`: start the server with the
    saved settings and the last model as soon as the model list is ready (`launcher gui --serve`, which
    the app passes to its new version after an update when a server was running).
    """

    machine_changed = Signal(object)  # Machine
    exposed = Signal()  # first time the window is shown on screen (startup timing)
    hidden_to_tray = Signal()  # closed while the tray keeps the server running
    closed = Signal()  # shut down: the app should quit

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        machine: Machine | None = None,
        this_machine: bool | None = None,
        probe: Callable[[], Machine] = _default_probe,
        save_settings: bool = True,
        home: Path | None = None,
        check_updates: bool = False,
        serve_on_start: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings or Settings()
        self._save_settings = save_settings
        self.machine: Machine | None = None
        # A recorded machine is advice about another computer: engine install state does not apply.
        self.this_machine = machine is None if this_machine is None else this_machine
        self.served_row: ModelRow | None = None
        self.poller: MetricsPoller | None = None
        self._exposed = False
        self._shut_down = False
        self._serve_on_start = serve_on_start
        self.quit_on_close = True  # the tray turns this off while it can keep the server running
        self.setWindowTitle("Launcher")
        self.setWindowIcon(theme.app_icon())

        self.server = ServerProcess(self)
        self.server.log_line.connect(self._log_line)
        self.server.ready.connect(self._server_ready)
        self.server.finished.connect(self._server_finished)
        self.server.state_changed.connect(self._server_state)

        self.machine_page = MachinePanel()
        self.models_page = ModelsPanel()
        self.models_page.serve_requested.connect(self.serve_row)
        self.models_page.rows_changed.connect(self._rows_loaded)
        self.server_panel = ServerPanel(self.server)
        self.server_panel.decide = self._decide
        self.server_panel.load_config(self.settings.serve)
        self.gauges = GaugesPanel()
        self.gauges.calibrate_requested.connect(self._calibrate)
        self.loaded_models = LoadedModelsPanel()
        self.endpoint: ServerEndpoint | None = None
        self.logs_page = LogsPanel()
        self.agents_page = AgentsPanel(home=home, settings=self.settings)
        self.chat_page = ChatPanel()
        self.chat_page.serve_starter_requested.connect(self.serve_chat_starter)
        self.chat_page.show_models_requested.connect(lambda: self.show_page("models"))
        self.chat_page.show_settings_requested.connect(self._show_mcp_settings)
        self.mcp_host: McpHost | None = None
        self.settings_page = SettingsPanel(self.settings, persist=save_settings)
        self.settings_page.saved.connect(lambda _settings: self.models_page.refresh())
        self.update_note = UpdateNote()
        self.updates = UpdateController(
            self.settings,
            self.server,
            self.update_note,
            window=self,
            current_page=self.current_page,
            prepare_restart=self.shutdown,  # saves the settings the new version starts with
            quit_app=self.close,
        )
        self.updates.status_changed.connect(self.settings_page.set_update_status)
        # It reads the last check's record: off the UI thread, like everything of the updater.
        workers.run_in_background(status_text, on_done=self._first_update_status)
        self.settings_page.check_updates_requested.connect(self.updates.check_now)
        if check_updates:
            self.exposed.connect(self.updates.start)

        self.pages = QStackedWidget()
        self.nav = QListWidget()
        self.nav.setObjectName("Nav")
        self.nav.setAccessibleName("Pages")
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self._page_index: dict[str, int] = {}
        self.add_page("models", "Models", self.models_page)
        self.add_page("server", "Server", self._server_page())
        self.add_page("agents", "Agents", self.agents_page)
        self.add_page("chat", "Chat", self.chat_page)
        self.add_page("machine", "This machine", self.machine_page)
        self.add_page("logs", "Server log", self.logs_page)
        self.add_page("settings", "Settings", self.settings_page)

        sidebar = QWidget()
        sidebar.setObjectName("Sidebar")
        side = QVBoxLayout(sidebar)
        side.setContentsMargins(0, 14, 0, 10)
        brand = QLabel("  Launcher")
        brand.setObjectName("PageTitle")
        side.addWidget(brand)
        side.addSpacing(8)
        side.addWidget(self.nav, 1)
        self.machine_summary = QLabel("Detecting hardware…")
        self.machine_summary.setObjectName("Muted")
        self.machine_summary.setWordWrap(True)
        self.machine_summary.setContentsMargins(12, 0, 8, 0)
        side.addWidget(self.machine_summary)
        sidebar.setFixedWidth(self.fontMetrics().horizontalAdvance("M") * 15)

        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        note_box = QHBoxLayout()  # the update note, lined up with the pages' own margins
        note_box.setContentsMargins(20, 12, 20, 0)
        note_box.addWidget(self.update_note)
        column.addLayout(note_box)
        column.addWidget(self.pages, 1)
        central = QWidget()
        row = QHBoxLayout(central)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(sidebar)
        row.addWidget(content, 1)
        self.setCentralWidget(central)
        self.status_label = QLabel("Server stopped")
        self.statusBar().addWidget(self.status_label, 1)
        self.nav.setCurrentRow(0)
        self._page_shortcuts: list[QShortcut] = []
        for number in range(1, 10):
            shortcut = QShortcut(QKeySequence(f"Ctrl+{number}"), self)
            shortcut.activated.connect(lambda n=number: self.nav.setCurrentRow(n - 1))
            self._page_shortcuts.append(shortcut)
        self._restore_geometry(self.settings.window)

        if machine is not None:
            self.set_machine(machine)
        else:
            self.machine_page.set_probing()
            workers.run_in_background(probe, on_done=self.set_machine, on_failed=self._probe_failed)
        # The MCP servers of mcp.json start with the app (off the UI thread: the SDK is a big import).
        workers.run_in_background(_load_mcp_servers, on_done=self._mcp_loaded, on_failed=self.chat_page.set_mcp_error)

    # -- pages -----------------------------------------------------------------------------
    def add_page(self, key: str, title: str, widget: QWidget) -> None:
        """Append a page to the sidebar."""
        self._page_index[key] = self.pages.addWidget(widget)
        item = QListWidgetItem(title)
        item.setSizeHint(item.sizeHint().expandedTo(self.fontMetrics().boundingRect("Ag").size() * 2))
        self.nav.addItem(item)

    def show_page(self, key: str) -> None:
        """Switch to a page by key ("server", "machine", ...)."""
        self.nav.setCurrentRow(self._page_index[key])

    def _show_mcp_settings(self) -> None:
        self.show_page("settings")
        self.settings_page.scroll_to_mcp()

    def _first_update_status(self, text: str) -> None:
        if not self.settings_page.update_status.text():  # a check that answered first says more
            self.settings_page.set_update_status(text)

    def current_page(self) -> str | None:
        """The key of the page shown now."""
        index = self.pages.currentIndex()
        return next((key for key, i in self._page_index.items() if i == index), None)

    def shortcut_for_page(self, number: int) -> QShortcut:
        """The Ctrl+<number> shortcut that opens the number-th page."""
        return self._page_shortcuts[number - 1]

    def page_keys(self) -> list[str]:
        """Page keys in sidebar order."""
        return sorted(self._page_index, key=self._page_index.__getitem__)

    def page(self, key: str) -> QWidget:
        """The page widget for a key."""
        return self.pages.widget(self._page_index[key])

    def _server_page(self) -> QWidget:
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(12)
        title = QLabel("Local server")
        title.setObjectName("PageTitle")
        layout.addWidget(title)
        layout.addWidget(self.server_panel)
        layout.addWidget(self.loaded_models)
        layout.addWidget(self.gauges)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(content)
        return scroll

    # -- machine ---------------------------------------------------------------------------
    def set_machine(self, machine: Machine) -> None:
        """Use this machine for every recommendation and show it."""
        self.machine = machine
        self.machine_page.set_machine(machine)
        if self.this_machine:
            self.machine_page.show_gpu_pack(machine)
        self.machine_summary.setText(machine_summary(machine))
        self.models_page.set_machine(machine, this_machine=self.this_machine)
        self.machine_changed.emit(machine)

    def serve_row(self, row: ModelRow, *, start: bool = True, show: bool = True, remember: bool = True) -> None:
        """Make `row` the served model and (re)start the server with it. `show`: switch to the Server
        page; `remember`: the next start preselects it."""
        if row.serve_spec is None:
            return
        self.served_row = row
        self.server_panel.set_model(row.serve_spec, row.title)
        if remember:
            self.settings.last_model = row.key
        if show:
            self.show_page("server")
        if not start:
            return
        if self.server.state == "stopped":
            self.server_panel.start()
        else:
            self.server.finished.connect(self._start_after_stop)
            self.server.stop()

    def serve_chat_starter(self, path: Path) -> None:
        """Serve the tiny demo chat model (the Chat page's offer) the normal way, staying on the Chat page.
        Not remembered as the last model: it is a demo, and the Models page keeps the user's choice."""
        from launcher.catalog.starter import CHAT_STARTER_NAME
        from launcher.ui.model_rows import ModelRow

        row = ModelRow(
            key=f"local:{path}",
            title=f"{CHAT_STARTER_NAME} (tiny demo model)",
            subtitle="shipped with the app",
            kind="local",
            serve_spec=str(path),
        )
        self.serve_row(row, show=False, remember=False)

    # -- MCP servers -----------------------------------------------------------------------
    def _mcp_loaded(self, loaded: tuple[dict[str, McpServer], str | None]) -> None:
        """mcp.json was read: the Settings section shows its servers, and the enabled ones start.
        The section restarts this same host whenever the user changes the servers."""
        if self._shut_down:
            return
        servers, problem = loaded
        from launcher.chat.mcp_host import McpHost
        from launcher.ui.panels.mcp_servers import McpServersSection

        section = McpServersSection(servers, load_error=problem)
        section.changed.connect(lambda _servers: self.chat_page.refresh_tools())
        self.settings_page.set_mcp_section(section)
        host = McpHost(servers)
        self.mcp_host = host
        section.attach(host)
        self.chat_page.set_mcp_host(host)
        self.chat_page.set_mcp_error(problem)
        if any(server.enabled for server in servers.values()):
            host.start()  # returns at once: the servers connect on the host's own thread

    def _rows_loaded(self, rows: list[ModelRow]) -> None:
        """Preselect the last served model (or the starter) so Start works without visiting Models."""
        if self.served_row is not None or self.server.state != "stopped":
            return
        wanted = self.settings.last_model
        row = next((r for r in rows if r.key == wanted and r.serve_spec is not None), None)
        row = row or next((r for r in rows if r.catalog is not None and r.catalog.starter), None)
        if row is not None and row.serve_spec is not None:
            self.served_row = row
            self.server_panel.set_model(row.serve_spec, row.title)
        if self._serve_on_start:
            self._serve_on_start = False
            self._serve_saved(row, wanted)

    def _serve_saved(self, row: ModelRow | None, wanted: str | None) -> None:
        """`--serve`: start the server as it ran before, if its model is still here. The saved form is
        the one it ran with: the form is locked while a server runs, and saved on quit."""
        if row is None or row.serve_spec is None or (wanted is not None and row.key != wanted):
            name = (wanted or "").partition(":")[2] or wanted  # "local:NAME", "catalog:ID"
            missing = f"{name} is not in the library any more" if name else "there is no model to serve"
            self.status_label.setText(f"The server was not started: {missing}.")
            return
        self.server_panel.start()

    def _decide(self, config: ServeConfig) -> ServeConfig:
        """The served row's plan for what the form leaves open, so the server runs what the list showed."""
        if self.served_row is None or self.machine is None:
            return config
        from launcher.hardware.probe import probe_machine_uncached
        from launcher.ui.model_rows import decided_config

        # Free VRAM and RAM as they are now, not at app start: the GPU layers are decided here.
        machine = probe_machine_uncached() if self.this_machine else self.machine
        return decided_config(self.served_row, machine, config)

    def _start_after_stop(self, _outcome: object) -> None:
        self.server.finished.disconnect(self._start_after_stop)
        self.server_panel.start()

    def _probe_failed(self, message: str) -> None:
        self.machine_page.set_error(message)
        self.machine_summary.setText("Hardware detection failed")

    # -- server ----------------------------------------------------------------------------
    def _log_line(self, line: str) -> None:
        self.logs_page.append(line)

    def _server_state(self, state: str) -> None:
        self.chat_page.set_server_state(state)
        texts = {
            "starting": "Loading the model…",
            "stopping": "Stopping the server…",
            "stopped": "Server stopped",
        }
        if state in texts:
            self.status_label.setText(texts[state])

    def _server_ready(self, endpoint: ServerEndpoint) -> None:
        self.status_label.setText(f"Serving {endpoint.model} at {endpoint.base_url}")
        self.gauges.reset()
        self.endpoint = endpoint
        self.gauges.set_speculative_mode(self.server.config.speculative if self.server.config else None)
        from launcher.ui.metrics_poller import MetricsPoller

        self._predict_for_server()
        self._stop_poller()
        self.chat_page.set_endpoint(endpoint)
        self.agents_page.set_endpoint(endpoint)
        self.loaded_models.set_endpoint(endpoint)
        self.poller = MetricsPoller(endpoint.url, endpoint.pid, api_key=endpoint.api_key, parent=self)
        self.poller.sample.connect(self._sample)
        self.poller.unreachable.connect(self.gauges.set_unreachable)
        self.poller.models.connect(self.loaded_models.show_listing)
        self.poller.models_unreachable.connect(self.loaded_models.show_unreachable)
        self.poller.start()

    def _predict_for_server(self) -> None:
        """The advisor's prediction for what the server runs, as this machine's runs correct it."""
        from launcher.ui.model_rows import prediction_for_server

        endpoint = self.endpoint
        ready = self.machine is not None and endpoint is not None
        prediction = prediction_for_server(self.machine, endpoint) if ready else None  # type: ignore[arg-type]
        self.gauges.set_prediction(prediction, endpoint.model if endpoint is not None else None)

    def _calibrate(self) -> None:
        """Measure the running server with the fixed calibration workload (a few seconds, off the UI
        thread), store the run, and show the corrected prediction."""
        endpoint, machine = self.endpoint, self.machine
        if endpoint is None or machine is None:
            return
        from launcher.bench.calibrate import calibrate_blocking
        from launcher.bench.calibrate_report import summary_line

        self.gauges.set_calibration_status("Calibrating: a few short requests to this server…", busy=True)

        def done(outcome: object) -> None:
            self.gauges.set_calibration_status(summary_line(outcome))  # type: ignore[arg-type]
            self._predict_for_server()

        def failed(message: str) -> None:
            self.gauges.set_calibration_status(f"Calibration failed: {message}")

        workers.run_in_background(
            lambda: calibrate_blocking(endpoint.base_url, machine, api_key=endpoint.api_key),
            on_done=done,
            on_failed=failed,
        )

    def _sample(self, sample: LiveSample) -> None:
        self.gauges.update_sample(sample)
        self.loaded_models.show_rates(sample.snapshot.decode_tps_by_model)

    def _server_finished(self, outcome: ServerOutcome) -> None:
        self._stop_poller()
        self.endpoint = None
        self.chat_page.set_endpoint(None)
        self.agents_page.set_endpoint(None)
        self.loaded_models.set_endpoint(None)
        self.status_label.setText(str(outcome).splitlines()[0])

    def _stop_poller(self) -> None:
        poller, self.poller = self.poller, None
        if poller is not None:
            poller.stop()
            poller.deleteLater()

    # -- lifecycle -------------------------------------------------------------------------
    def showEvent(self, event: object) -> None:
        """Emit `exposed` the first time the window is shown."""
        super().showEvent(event)
        if not self._exposed:
            self._exposed = True
            # After the queued expose/paint events of this show have been handled.
            QTimer.singleShot(0, self.exposed.emit)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Hide to the tray while a tray keeps the server, else shut everything down."""
        self._remember_geometry()
        if not self.quit_on_close and self.server.state != "stopped":
            event.ignore()
            self.hide()
            self.hidden_to_tray.emit()
            return
        # Out of sight first: stopping MCP servers and the model server may block for seconds (a server
        # that ignores SIGTERM waits for SIGKILL), and a window that stays up frozen looks hung.
        self.hide()
        self.shutdown()
        event.accept()
        self.closed.emit()

    def shutdown(self) -> None:
        """Stop the poller and the server (waiting for it), wait for workers, save settings."""
        if self._shut_down:
            return
        self._shut_down = True
        self._stop_poller()
        self.models_page.shutdown()
        # Stop the chat turn first and close the MCP servers before waiting for it: the turn's tool call
        # then answers at once instead of running to its end. Closing is for good: stdio servers must
        # not outlive the app, and a restart Settings queued starts nothing.
        self.chat_page.stop()
        if self.mcp_host is not None:
            self.mcp_host.close()
            self.mcp_host = None
        self.chat_page.shutdown()  # its wait for the stopped turn is bounded
        self.machine_page.gpu_pack.shutdown()
        self.updates.shutdown()
        self.server.stop_and_wait()
        workers.pool().waitForDone(5000)
        self._persist()

    def _persist(self) -> None:
        if not self._save_settings:
            return
        self._remember_geometry()
        serve = self.server_panel.config()
        self.settings.serve = serve.model_copy(update={"model": ""})
        self.settings.allow_network = not serve.is_loopback
        try:
            settings_store.save(self.settings)
        except (OSError, LauncherError) as err:
            log.warning("could not save settings: %s", err)

    def _remember_geometry(self) -> None:
        geometry = self.normalGeometry()
        self.settings.window = WindowGeometry(
            x=geometry.x(),
            y=geometry.y(),
            width=geometry.width(),
            height=geometry.height(),
            maximized=self.isMaximized(),
        )

    def _restore_geometry(self, window: WindowGeometry) -> None:
        self.resize(window.width, window.height)
        self.move(window.x, window.y)
        if window.maximized:
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)


def _load_mcp_servers() -> tuple[dict[str, McpServer], str | None]:
    """mcp.json's servers and the problem reading it, if any (background job). The MCP SDK, which the
    Settings section and the host need, is a big import: it happens here too, not on the UI thread."""
    import launcher.ui.panels.mcp_servers  # noqa: F401
    from launcher.chat import mcp_config

    try:
        return mcp_config.load(), None
    except LauncherError as err:
        return {}, str(err)


def machine_summary(machine: Machine) -> str:
    """One short line for the sidebar ("RTX 4090 24 GiB · 64 GiB RAM")."""
    from launcher.core.units import format_bytes

    ram = f"{format_bytes(machine.memory.total)} RAM"
    if machine.apple is not None:
        return f"{machine.apple.chip} · {format_bytes(machine.apple.unified_memory)} unified"
    if machine.gpus:
        gpu = machine.gpus[0]
        more = f" +{len(machine.gpus) - 1}" if len(machine.gpus) > 1 else ""
        return f"{gpu.name}{more} · {format_bytes(gpu.memory_total)}\n{ram}"
    return f"{machine.cpu.brand or machine.cpu.arch}\n{ram} · CPU only"
