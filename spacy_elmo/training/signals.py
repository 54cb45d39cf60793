"""SIGINT / SIGTERM during training: stop at the next step boundary, with a checkpoint."""

import signal
from typing import Any, Dict


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT / SIGTERM after writing checkpoints/last.pt."""


class StopRequest:
    """SIGINT / SIGTERM ask the loop to stop at the next step boundary (and checkpoint
    there); a second signal stops at once. Off the main thread signals stay as they are."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        try:
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        except ValueError:  # not the main thread
            self._previous = {}
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        for sig in self.SIGNALS:
            signal.signal(sig, signal.default_int_handler)
