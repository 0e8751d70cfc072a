"""What the command is doing while it works: one line on stderr, the step and its time.

A cross-validated search or a trained calibrator can take minutes with no
output; the line says which step runs (``fitting AutoCalibrator``) and for how
long, refreshed twice a second. It is shown only when stderr is a terminal
(never in a log or a pipe) and not with ``--quiet``; it is cleared when the
command ends, so that only the command's own lines stay.
"""

from __future__ import annotations

import sys
import threading

from tqdm import tqdm

__all__ = ["Progress", "say"]

# How often the elapsed time is redrawn while a step runs, in seconds.
_REFRESH_SECONDS = 0.5


def say(line: str) -> None:
    """Print ``line`` on stderr above the progress line, if one is shown."""
    # tqdm.write clears the bar, prints, and draws the bar again; without a bar it prints.
    tqdm.write(line, file=sys.stderr)


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (not a file, a pipe, or absent)."""
    stream = sys.stderr
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


class Progress:
    """The command's current step on stderr, with the time it has run.

    Parameters
    ----------
    enabled : bool
        Show the line; when False every method does nothing.

    Examples
    --------
    >>> with Progress(enabled=False) as progress:
    ...     progress.step("fitting TemperatureScaling")
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar = None
        self._stop = threading.Event()
        self._ticker = None

    def step(self, what: str) -> None:
        """Start the step ``what``: the line shows it, its clock restarts."""
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = tqdm(
                desc=what, file=sys.stderr, bar_format="reliacal: {desc} [{elapsed}]", leave=False
            )
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
            return
        self._bar.set_description_str(what, refresh=False)
        self._bar.reset()  # the clock starts again, and the line is redrawn

    def _tick(self) -> None:
        # tqdm redraws on updates only; a step is one long call, so redraw its clock here.
        while not self._stop.wait(_REFRESH_SECONDS):
            self._bar.refresh()

    def close(self) -> None:
        """Clear the line and stop its clock."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exception) -> None:
        self.close()
