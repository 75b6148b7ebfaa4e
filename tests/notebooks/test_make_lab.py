"""`make lab` as a student meets it: JupyterLab's file browser opens at the lab's folder, with
the notebooks and the C a student edits and hands in side by side, each a double-click away.

Run as a user of a shared install (LABKIT_HOME a folder of their own, the notebooks copied
there by `labkit notebooks`, their server made by capstone.start()): the file the capstone
notebook tells them to open, csrc/servers/mine.c, is opened from the file browser in
headless Chromium, by clicks, and its text is the server they have.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from labkit import paths
from labkit.bench import free_port
from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _quiet_settings, _stop, _wait_until_serving


@pytest.mark.timeout(300)
def test_make_lab_shows_the_notebooks(tmp_path):
    """Make lab shows the notebooks and mine c opens from the file browser."""
    from playwright.sync_api import expect, sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is absent: `make setup` installs it on Debian", pytrace=False)
    home = tmp_path / "home"
    env = {**os.environ, "LABKIT_HOME": str(home),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    made = subprocess.run([sys.executable, "-c", "from labkit import capstone, cli; cli.main(['notebooks']); "
                           "print(capstone.start())"], env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    mine = home / "csrc" / "servers" / "mine.c"
    assert mine.is_file() and (home / "notebooks" / "07_your_server.ipynb").is_file(), made.stdout
    _quiet_settings(tmp_path / "settings")

    port, token = free_port(), secrets.token_hex(16)
    arguments = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    log = open(tmp_path / "make-lab.log", "w")
    lab = subprocess.Popen(["make", "--no-print-directory", "lab", f"JUPYTER_ARGS={arguments}"], cwd=paths.ROOT,
                           env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, token, lab, tmp_path / "make-lab.log", timeout=180)
        assert f"JupyterLab's file browser: {home}" in (tmp_path / "make-lab.log").read_text()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/?token={token}")  # where `make lab`'s URL lands
            listing = page.locator(".jp-DirListing-content")
            listing.get_by_text("notebooks", exact=True).dblclick(timeout=60_000)
            expect(listing.get_by_text("07_your_server.ipynb", exact=True)).to_be_visible()
            page.locator(".jp-BreadCrumbs-home").click()  # back up to the lab's folder
            for folder in ("csrc", "servers"):
                listing.get_by_text(folder, exact=True).dblclick()
            listing.get_by_text("mine.c", exact=True).dblclick()
            editor = page.locator(".jp-FileEditor .cm-content")
            expect(editor).to_contain_text("serve(", timeout=30_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=ARTIFACTS / "make-lab-mine-c.png")
            browser.close()
    finally:
        _stop(lab, base, token)
        log.close()
