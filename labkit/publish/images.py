"""Static images of plotly figures (PNG, SVG, PDF) through kaleido and Chromium.

A browser start costs seconds; a figure costs a fraction of one.  So every
image of an export comes from ONE long-lived kaleido browser (StaticRenderer),
driven from its own thread and event loop so that it works the same from a
terminal and from inside a Jupyter kernel (which already runs a loop).

Executed notebooks keep only plotly's JSON, which nbconvert cannot draw:
embed_images() adds an image/png beside each plotly output, so an nbconvert
HTML or PDF of the notebook shows its plots.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import threading
from pathlib import Path

from ..errors import LabError

PLOTLY_MIME = "application/vnd.plotly.v1+json"
IMAGE_FORMATS = ("png", "svg", "pdf")
DEFAULT_SIZE = (900, 550)  # width, height in CSS pixels when a figure sets none
PNG_SCALE = 2              # crisp on slides and high-DPI screens
RENDER_TIMEOUT_S = 90      # one image; the browser start gets the same
CHROMIUM_FIX = ("install Chromium (Debian/Ubuntu: sudo apt-get install chromium), "
                "or point BROWSER_PATH at a Chrome or Chromium executable")


def find_chromium() -> str | None:
    """The Chrome/Chromium kaleido will use, or None.

    BROWSER_PATH wins when set (kaleido's own rule), then the usual names on
    PATH, then /usr/bin/chromium."""
    if "BROWSER_PATH" in os.environ:
        chosen = os.environ["BROWSER_PATH"]
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        if found := shutil.which(name):
            return found
    fallback = "/usr/bin/chromium"
    return fallback if os.access(fallback, os.X_OK) else None


def figure_size(spec: dict) -> tuple[int, int]:
    """The figure's own width and height, or DEFAULT_SIZE."""
    layout = spec.get("layout") or {}
    return int(layout.get("width") or DEFAULT_SIZE[0]), int(layout.get("height") or DEFAULT_SIZE[1])


class StaticRenderer:
    """One Chromium, kept open, that turns plotly figure dicts into image bytes.

        with StaticRenderer() as renderer:
            png = renderer.image(fig.to_dict(), "png")

    Raises LabError on entry when no Chromium is found or it does not start."""

    def __init__(self, browser: str | None = None):
        self.browser = browser or find_chromium()
        self.rendered = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kaleido = None

    def __enter__(self) -> StaticRenderer:
        if not self.browser:
            raise LabError("no Chrome or Chromium found: static images (PNG, SVG, PDF) need one", CHROMIUM_FIX)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kaleido", daemon=True)
        self._thread.start()
        try:
            self._kaleido = self._call(self._open())
        except Exception as error:
            self._stop_loop()
            raise LabError(f"Chromium at {self.browser} did not start for kaleido: {error}", CHROMIUM_FIX) from error
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._kaleido is not None:
                self._call(self._kaleido.close())
        finally:
            self._kaleido = None
            self._stop_loop()

    def image(self, spec: dict, fmt: str) -> bytes:
        """`spec` (a plotly figure dict) as PNG, SVG or PDF bytes."""
        if fmt not in IMAGE_FORMATS:
            raise LabError(f"unknown image format {fmt!r}", f"use one of {', '.join(IMAGE_FORMATS)}")
        width, height = figure_size(spec)
        opts = {"format": fmt, "width": width, "height": height, "scale": PNG_SCALE if fmt == "png" else 1}
        try:
            data = self._call(self._kaleido.calc_fig(spec, opts=opts))
        except Exception as error:
            title = ((spec.get("layout") or {}).get("title") or {})
            raise LabError(f"kaleido could not render the figure {title!r} as {fmt}: {error!r}",
                           f"check that {self.browser} runs (`{self.browser} --headless --version`); "
                           "a figure the notebook shows should also render here") from error
        self.rendered += 1
        return data

    async def _open(self):
        import kaleido

        # mathjax=False: the default fetches MathJax from a CDN; the lab never needs
        # the network.  plotly.js comes from the installed plotly package.
        browser = kaleido.Kaleido(n=1, mathjax=False, path=self.browser, timeout=RENDER_TIMEOUT_S)
        await browser.open()
        return browser

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(RENDER_TIMEOUT_S)

    def _stop_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
            self._loop = None


def plotly_outputs(nb) -> list:
    """Every output of `nb` (an nbformat notebook) that holds a plotly figure, in order."""
    return [output for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", [])
            if output.get("output_type") in ("display_data", "execute_result")
            and PLOTLY_MIME in output.get("data", {})]


def attach_png(output, png: bytes, spec: dict) -> None:
    """Put `png` beside the plotly JSON of `output`, shown at the figure's own width."""
    output.data["image/png"] = base64.b64encode(png).decode("ascii")
    output.setdefault("metadata", {})["image/png"] = {"width": figure_size(spec)[0]}


def embed_images(notebook_path: Path, renderer: StaticRenderer, into: Path | None = None) -> int:
    """Add an image/png to every plotly output of an executed notebook; write it to
    `into` (default: in place).  Returns how many figures got an image."""
    import nbformat

    nb = nbformat.read(notebook_path, as_version=4)
    outputs = plotly_outputs(nb)
    for output in outputs:
        spec = output.data[PLOTLY_MIME]
        attach_png(output, renderer.image(spec, "png"), spec)
    nbformat.write(nb, into or notebook_path)
    return len(outputs)
