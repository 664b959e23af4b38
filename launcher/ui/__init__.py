"""The desktop app (PySide6). The only package that imports Qt.

The app never loads a model itself: it starts `launcher serve` as a separate process
(`server_process.ServerProcess`) and watches it over HTTP (`metrics_poller`). Everything slow
(probes, downloads, polling, chat requests) runs in workers that only emit signals.
"""
