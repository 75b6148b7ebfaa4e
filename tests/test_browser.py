"""A student's path through the lab, in a real browser: open notebook 01 in
JupyterLab, run all cells, press the control panel's Run button, see a plot.

JupyterLab runs from the venv on a free loopback port with its own token and
temporary runtime/settings folders; Chromium is Debian's /usr/bin/chromium
driven by playwright (no browser is downloaded)."""

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from labkit import paths

CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = paths.NOTEBOOKS / "01_proc_service.ipynb"
ARTIFACTS = paths.BUILD / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} is absent (on Ubuntu Chromium is a snap, unusable headless)"),
]


def _free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quick_copy(notebook, folder):
    """A copy of the notebook with parameters injected after its parameters
    cell, as papermill does: the quick profile, and results kept in `folder`.
    The repository's notebook and data/results/ stay untouched."""
    nb = nbformat.read(notebook, as_version=4)
    where = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    injected = f'profile = "quick"\nresults = {str(folder / "results.jsonl")!r}'
    nb.cells.insert(where + 1, nbformat.v4.new_code_cell(injected, metadata={"tags": ["injected-parameters"]}))
    copy = folder / notebook.name
    nbformat.write(nb, copy)
    return copy


def _kernel_is_registered():
    jupyter = Path(sys.executable).parent / "jupyter"
    listing = subprocess.run([jupyter, "kernelspec", "list"], capture_output=True, text=True)
    return re.search(r"^\s*labkit\s", listing.stdout, re.M) is not None


@pytest.fixture
def jupyter_lab(tmp_path):
    """(base URL, token, folder) of a JupyterLab serving a fresh folder; stopped at the end."""
    if not _kernel_is_registered():
        pytest.fail("the Jupyter kernel 'labkit' is not registered: run `make setup`", pytrace=False)
    work = tmp_path / "work"
    work.mkdir()
    port, token = _free_loopback_port(), secrets.token_hex(16)
    env = {**os.environ,
           # Keep the student's own Jupyter settings and running servers out of the test.
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    command = [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser",
               "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    _quiet_settings(tmp_path / "settings")
    log = open(tmp_path / "jupyter.log", "w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, token, server, tmp_path / "jupyter.log")
        yield base, token, work
    finally:
        _stop(server, base, token)
        log.close()


def _quiet_settings(settings_dir):
    """No news or update pop-ups over the notebook (and no calls beyond loopback);
    every cell kept in the page, so the test can see all of their prompts."""
    for plugin, settings in [("apputils-extension/notification", '{"fetchNews": "false", "checkForUpdates": false}'),
                             ("notebook-extension/tracker", '{"windowingMode": "none"}')]:
        path = settings_dir / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(settings)


def _wait_until_serving(base, token, server, log_path, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log_path.read_text()}", pytrace=False)
        try:
            request = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(request, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer within {timeout} s:\n{log_path.read_text()}", pytrace=False)


def _stop(server, base, token):
    """Ask JupyterLab to shut down (it stops its kernels), then make sure of it."""
    try:
        request = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(request, timeout=5).close()
        server.wait(timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        pass
    # Whatever is left of its process group (a stuck kernel) goes too.
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()


def _wait_until_every_cell_ran(page, timeout=120):
    """Wait until Run All has finished: the kernel is idle and no cell is running
    ("[*]") for a few seconds in a row.  Fail, quoting the error, if it stopped
    early at a failing cell."""
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-Cell-inputWrapper .jp-InputPrompt")
    status = page.locator("#jp-main-statusbar")
    deadline, quiet_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        texts = prompts.all_inner_texts()
        busy = any("*" in text for text in texts) or "| Idle" not in status.inner_text()
        started = any(re.search(r"\[\d+\]", text) for text in texts)
        if busy or not started:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 3:
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"Run All did not finish within {timeout} s", pytrace=False)
    not_run = [i for i, text in enumerate(texts) if not re.search(r"\[\d+\]", text)]
    if not_run:
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        last_error = errors.last.inner_text()[-3000:] if errors.count() else "(no error output shown)"
        pytest.fail(f"Run All stopped: code cells {not_run} did not run.\n{last_error}", pytrace=False)


def test_run_all_then_run_button_draws_a_plotly_chart(jupyter_lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, work = jupyter_lab
    notebook = _quick_copy(NOTEBOOK, work)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / f"browser-{notebook.stem}.png"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{base}/lab/tree/{notebook.name}?token={token}")
            # The notebook is open and the labkit kernel has started (Run All before
            # that would ask which kernel to use).
            expect(page.locator("#jp-main-statusbar")).to_contain_text(
                "Python (labkit) | Idle", timeout=60_000)

            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
            _wait_until_every_cell_ran(page)

            # The control panel, after the notebook's own run of the sweep.
            # (ipywidgets' description is the button's text; its accessible name
            # also carries the icon's glyph, so match the text.)
            run_button = page.locator("button.jupyter-button", has_text=re.compile(r"^\s*Run\s*$"))
            panel = page.locator(".jp-OutputArea-output", has=run_button)
            run_button.scroll_into_view_if_needed()
            expect(panel.get_by_text("done:")).to_be_visible()
            expect(panel.locator(".js-plotly-plot .legendtext", has_text="iterative")).to_have_count(1)

            # A student's change: leave out the iterative server, press Run, and
            # the panel's chart is drawn again without it.
            panel.get_by_label("iterative").uncheck()
            run_button.click()
            chart = panel.locator(".js-plotly-plot svg.main-svg").first
            expect(panel.locator(".js-plotly-plot .legendtext", has_text="iterative")
                   ).to_have_count(0, timeout=60_000)
            expect(chart).to_be_visible()
            expect(panel.locator(".js-plotly-plot .legendtext", has_text="select")).to_have_count(1)
            expect(panel.get_by_text("done:")).to_be_visible()
            chart.scroll_into_view_if_needed()
        finally:
            page.screenshot(path=screenshot, full_page=True)
            browser.close()
