"""The server controls: engine, context, parallel sequences, port, API key, network access, whether
other library models load on request and when idle ones are unloaded; start/stop; status (loading,
ready, error with the reason and a restart) and the endpoint URL with a copy button.

The panel is a view of a `ServerProcess`: it builds a `ServeConfig` from the form and subscribes to
the process's signals; it never blocks.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from launcher.core.config import AUTO_ENGINE, ServeConfig
from launcher.engine_specs import specs as engine_specs
from launcher.ui import theme
from launcher.ui.server_process import ServerEndpoint, ServerOutcome, ServerProcess
from launcher.ui.widgets.card import Card, CopyField, muted

AUTOMATIC = ("Automatic (advisor)", AUTO_ENGINE)
STATE_TEXT = {
    "stopped": ("Stopped", theme.MUTED),
    "starting": ("Loading the model…", theme.WARN),
    "ready": ("Ready", theme.GOOD),
    "stopping": ("Stopping…", theme.WARN),
}


def new_api_key() -> str:
    """A random key for the server ("sk-local-…", so agents that check the prefix accept it)."""
    return "sk-local-" + secrets.token_urlsafe(18)


def ttl_minutes(ttl_seconds: int | None) -> int:
    """`ServeConfig.ttl` as the form's whole minutes (0: never; a saved 90 s shows as 2 min)."""
    return math.ceil(ttl_seconds / 60) if ttl_seconds else 0


class ServerPanel(Card):
    """Form + start/stop + status + endpoint, bound to one ServerProcess."""

    config_changed = Signal(object)  # ServeConfig, when the user edits the form

    def __init__(self, server: ServerProcess, parent: QWidget | None = None) -> None:
        super().__init__("Server", parent)
        self.server = server
        # Fills what the form leaves open with the advisor's decision for the model (set by the window).
        self.decide: Callable[[ServeConfig], ServeConfig] | None = None
        self._model_spec = ""
        self._model_label = QLabel("Starter model (Gemma 3 270M)")
        self._model_label.setWordWrap(True)

        self.engine = QComboBox()
        for label, value in [AUTOMATIC, *((spec.label, spec.name) for spec in engine_specs())]:
            self.engine.addItem(label, value)
        self.context = QSpinBox()
        self.context.setRange(0, 1_048_576)
        self.context.setSingleStep(1024)
        self.context.setSpecialValueText("Automatic")
        self.parallel = QSpinBox()
        self.parallel.setRange(1, 64)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("Any free port")
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("none (only this machine can connect)")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        generate = QPushButton("Generate")
        generate.clicked.connect(lambda: self.api_key.setText(new_api_key()))
        key_row = QHBoxLayout()
        key_row.addWidget(self.api_key, 1)
        key_row.addWidget(generate)
        self.allow_network = QCheckBox("Allow other devices on my network")
        self.allow_network.setToolTip("Binds 0.0.0.0 instead of 127.0.0.1. Requires an API key.")
        self.allow_network.toggled.connect(self._network_toggled)
        self.library = QCheckBox("Load other library models on request")
        self.library.setToolTip(
            "A request that names another model of your library loads it beside this one, as memory allows;"
            " idle models make room for it. Off: this model answers every name (launcher serve --no-library)."
        )
        self.idle_unload = QSpinBox()
        self.idle_unload.setRange(0, 24 * 60)
        self.idle_unload.setSuffix(" idle minutes")
        self.idle_unload.setSpecialValueText("Never")
        self.idle_unload.setToolTip(
            "A model no request used for this long is unloaded, its memory given back, and loaded again by"
            " the next request that names it (launcher serve --ttl)."
        )

        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        key_label = QLabel("API &key")
        key_label.setBuddy(self.api_key)
        form.addRow("Model", self._model_label)
        form.addRow("&Engine", self.engine)
        form.addRow("&Context", self.context)
        form.addRow("&Parallel requests", self.parallel)
        form.addRow("P&ort", self.port)
        form.addRow(key_label, key_row)
        form.addRow("", self.allow_network)
        form.addRow("", self.library)
        unload_label = QLabel("&Unload after")
        unload_label.setBuddy(self.idle_unload)
        form.addRow(unload_label, self.idle_unload)
        form_box = QWidget()
        form_box.setLayout(form)
        form_box.setMaximumWidth(self.fontMetrics().horizontalAdvance("M") * 40)
        columns = QHBoxLayout()
        columns.setSpacing(24)
        columns.addWidget(form_box, 3)
        side = QVBoxLayout()
        columns.addLayout(side, 2)
        self.body.addLayout(columns)

        self.start_button = QPushButton("Start server")
        self.start_button.setObjectName("Primary")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.server.stop)
        self.restart_button = QPushButton("Restart")
        self.restart_button.clicked.connect(self.server.restart)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.restart_button)
        buttons.addStretch(1)

        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setAccessibleName("Server status")
        self.detail = muted()
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.endpoint = CopyField("")
        self.endpoint.setAccessibleName("Endpoint URL")
        endpoint_caption = muted("Endpoint (OpenAI and Anthropic compatible)", wrap=False)
        side.addWidget(self.status)
        side.addWidget(self.detail)
        side.addSpacing(6)
        side.addWidget(endpoint_caption)
        side.addWidget(self.endpoint)
        side.addSpacing(6)
        side.addLayout(buttons)
        side.addStretch(1)

        for widget in self._form_widgets():
            signal = (
                getattr(widget, "currentIndexChanged", None)
                or getattr(widget, "valueChanged", None)
                or getattr(widget, "textChanged", None)
                or widget.toggled
            )
            signal.connect(self._emit_config)

        server.state_changed.connect(self._state_changed)
        server.ready.connect(self._ready)
        server.finished.connect(self._finished)
        self.load_config(ServeConfig())
        self._state_changed(server.state)

    def _form_widgets(self) -> tuple[QWidget, ...]:
        return (
            self.engine,
            self.context,
            self.parallel,
            self.port,
            self.api_key,
            self.allow_network,
            self.library,
            self.idle_unload,
        )

    # -- form <-> ServeConfig ----------------------------------------------------------------
    def set_model(self, spec: str, label: str) -> None:
        """The model the next start will serve (a path, catalog id or library name)."""
        self._model_spec = spec
        self._model_label.setText(label)
        self._emit_config()

    def load_config(self, config: ServeConfig) -> None:
        """Fill the form from saved defaults."""
        self.engine.setCurrentIndex(max(0, self.engine.findData(config.engine)))
        self.context.setValue(config.context or 0)
        self.parallel.setValue(config.parallel)
        self.port.setValue(config.port)
        self.api_key.setText(config.api_key or "")
        self.allow_network.setChecked(not config.is_loopback)
        self.library.setChecked(config.library)
        self.idle_unload.setValue(ttl_minutes(config.ttl))

    def config(self) -> ServeConfig:
        """The form as a ServeConfig (network access forces a key)."""
        key = self.api_key.text().strip() or None
        return ServeConfig(
            model=self._model_spec,
            engine=self.engine.currentData(),
            context=self.context.value() or None,
            parallel=self.parallel.value(),
            port=self.port.value(),
            api_key=key,
            host="0.0.0.0" if self.allow_network.isChecked() else "127.0.0.1",
            library=self.library.isChecked(),
            ttl=self.idle_unload.value() * 60 or None,
        )

    def _network_toggled(self, on: bool) -> None:
        if on and not self.api_key.text().strip():
            self.api_key.setText(new_api_key())  # never expose an open server to the network

    def _emit_config(self, *_: object) -> None:
        self.config_changed.emit(self.config())

    # -- actions and process events ----------------------------------------------------------
    def start(self) -> None:
        """Start the server with the form's config, and the advisor's decision for what it leaves open."""
        if self.allow_network.isChecked() and not self.api_key.text().strip():
            self.api_key.setText(new_api_key())
        config = self.config()
        self.server.start(self.decide(config) if self.decide is not None else config)

    def _state_changed(self, state: str) -> None:
        text, colour = STATE_TEXT.get(state, (state, theme.MUTED))
        self.status.setText(f"<span style='color:{colour}; font-size:13pt'>●</span> <b>{text}</b>")
        running = state != "stopped"
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(state in ("starting", "ready"))
        self.restart_button.setEnabled(state == "ready" or (not running and self.server.config is not None))
        for widget in self._form_widgets():
            widget.setEnabled(not running)
        if state == "starting":
            self.detail.setText("The server process is loading the model; its log is on the Logs page.")
            self.endpoint.set_text("")
        if state == "stopped" and self.server.endpoint is None:
            self.endpoint.set_text("")

    def _ready(self, endpoint: ServerEndpoint) -> None:
        self.endpoint.set_text(endpoint.base_url)
        key = " · API key required" if endpoint.api_key_required else ""
        self.detail.setText(
            f"{endpoint.model} on {endpoint.engine} ({endpoint.engine_reason})"
            f" · context {endpoint.context_length:,}"
            f" · {endpoint.parallel} parallel{key}"
        )

    def _finished(self, outcome: ServerOutcome) -> None:
        if outcome.is_failure:
            self.status.setText(f"<span style='color:{theme.BAD}; font-size:13pt'>●</span> <b>Error</b>")
            self.detail.setText(str(outcome))
        else:
            self.detail.setText(str(outcome))
