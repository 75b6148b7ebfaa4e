"""A student's path through the lab, in a real browser: open each notebook in
JupyterLab as it ran, judge what is on the page (no NaN in a table, no table or
printed line cut at the page's edge, no traceback), then run its cells up to its
first control panel, type a bad value into the panel and see it explained where it
was typed, press Run, see a plot.  Screenshots of each notebook's main table, its
figures once seen wrong, and its panel are kept in build/test-artifacts/.

The notebook a student would see after Run All is the one papermill executed for
test_notebooks (quickrun: one run per notebook per test run, shared): JupyterLab
renders its saved outputs with the same renderers as live ones, so the page is
judged without running every cell a second time.  The panel is live: the executed
notebook closed, a copy of the cells up to it (a student's copy: no hidden check) is
opened from JupyterLab's file browser in the same page and run in the browser's kernel,
as a student's Run All would run them.

JupyterLab runs from the venv on a free loopback port with its own token and
temporary runtime/settings folders; Chromium is Debian's /usr/bin/chromium
driven by playwright (no browser is downloaded)."""

import concurrent.futures
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from labkit import paths
from labkit.bench import free_port

from quickrun import OWN_HOME, PLOTLY, run_quick

CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOKS = sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
ARTIFACTS = paths.BUILD / "test-artifacts"
VIEWPORT = {"width": 1400, "height": 1800}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]


def _up_to_the_first_panel(notebook, folder):
    """A copy of the notebook's cells up to its first control panel, as a student has them
    but for the checks (no hidden check: those never reach a student's notebook; no visible
    one: test_release runs every check, and in 07 each check runs its battery case again),
    with parameters injected after its parameters cell, as papermill does: the quick
    profile, and results kept in `folder`; None for a notebook without a panel.  The
    repository's notebook and data/results/ stay untouched."""
    from labkit.instructor.basics.tags import HIDDEN_TAG

    nb = nbformat.read(notebook, as_version=4)
    panel = next((i for i, cell in enumerate(nb.cells)
                  if cell.cell_type == "code" and "ControlPanel(" in cell.source), None)
    if panel is None:
        return None
    nb.cells = [cell for cell in nb.cells[:panel + 1] if HIDDEN_TAG not in cell.metadata.get("tags", [])
                and not cell.source.lstrip().startswith("@ex.check(")]
    where = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    injected = f'profile = "quick"\nresults = {str(folder / "results.jsonl")!r}'
    nb.cells.insert(where + 1, nbformat.v4.new_code_cell(injected, metadata={"tags": ["injected-parameters"]}))
    if notebook.name in OWN_HOME:  # its C goes into a home of its own (as a shared install's user), set first
        home = f'import os\nos.environ["LABKIT_HOME"] = {str(folder / (notebook.stem + "-home"))!r}'
        nb.cells.insert(0, nbformat.v4.new_code_cell(home, metadata={"tags": ["injected-parameters"]}))
    copy = folder / f"{notebook.stem}-panel.ipynb"
    nbformat.write(nb, copy)
    return copy


def _trust(notebook, env):
    """`jupyter trust notebook` for the server run with `env`, done here (as that command
    does it, with the same signature database and secret), not in a Python of its own."""
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary(data_dir=env["JUPYTER_DATA_DIR"])
    try:
        notary.sign(nbformat.read(notebook, as_version=nbformat.NO_CONVERT))
    finally:
        notary.store.close()


def _kernel_is_registered():
    jupyter = Path(sys.executable).parent / "jupyter"
    listing = subprocess.run([jupyter, "kernelspec", "list"], capture_output=True, text=True)
    return re.search(r"^\s*labkit\s", listing.stdout, re.M) is not None


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory):
    """(base URL, token, folder, environment) of a JupyterLab serving a fresh folder, one for
    this module's tests (each opens its own notebooks in their own workspaces); stopped at
    the end."""
    tmp_path = tmp_path_factory.mktemp("jupyterlab")
    if not _kernel_is_registered():
        pytest.fail("the Jupyter kernel 'labkit' is not registered: run `make setup`", pytrace=False)
    work = tmp_path / "work"
    work.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ,
           # Keep the student's own Jupyter settings and running servers out of the test.
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"),  # its notebook signatures (jupyter trust)
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
        yield base, token, work, env
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


def _shut_down_kernels(base, token):
    """Stop every kernel this test's pages started (JupyterLab keeps a kernel when its tab
    goes), and wait for them: the next test starts with none."""
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels", headers=headers), timeout=10) as got:
        kernels = json.load(got)

    def shut_down(kernel):
        request = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}", method="DELETE", headers=headers)
        urllib.request.urlopen(request, timeout=30).close()

    # together: each waits for its kernel to go
    with concurrent.futures.ThreadPoolExecutor(max(1, len(kernels))) as pool:
        list(pool.map(shut_down, kernels))


def _start_kernel_for(base, token, notebook):
    """Start `notebook`'s labkit kernel in JupyterLab's server, as JupyterLab does when it
    opens the notebook (a session for its path); the page that opens it then finds it
    running and connects to it.  The server answers once the kernel's process is started:
    it gets ready while the browser starts."""
    body = json.dumps({"path": notebook.name, "name": notebook.name, "type": "notebook",
                       "kernel": {"name": "labkit"}}).encode()
    request = urllib.request.Request(f"{base}/api/sessions", data=body, method="POST",
                                     headers={"Authorization": f"token {token}",
                                              "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).close()


# The code cells' prompts ("[*]:", "[3]:", "[ ]:") and the status bar, in one look at the page.
_PROMPTS_AND_STATUS = """() => [
  [...document.querySelectorAll(".jp-Notebook .jp-CodeCell .jp-Cell-inputWrapper .jp-InputPrompt")]
    .map((prompt) => prompt.innerText),
  document.querySelector("#jp-main-statusbar")?.innerText ?? "",
]"""


def _wait_until_every_cell_ran(page, timeout=120, since=None):
    """Wait until Run All (clicked at `since`, a time.monotonic()) has finished: the kernel
    is idle and no cell is running ("[*]") for a second in a row (Run All marks every
    cell it will run "[*]" at once).  Fail, quoting the error, if it stopped early at a
    failing cell."""
    deadline, quiet_since = (since or time.monotonic()) + timeout, None
    while time.monotonic() < deadline:
        texts, status = page.evaluate(_PROMPTS_AND_STATUS)
        busy = any("*" in text for text in texts) or "| Idle" not in status
        started = any(re.search(r"\[\d+\]", text) for text in texts)
        if busy or not started:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 1:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"Run All did not finish within {timeout} s", pytrace=False)
    not_run = [i for i, text in enumerate(texts) if not re.search(r"\[\d+\]", text)]
    if not_run:
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        last_error = errors.last.inner_text()[-3000:] if errors.count() else "(no error output shown)"
        pytest.fail(f"Run All stopped: code cells {not_run} did not run.\n{last_error}", pytrace=False)


# What a student must not see on a page, checked in the page itself: a table cell
# that reads NaN, a table or printed line running past the output's right edge or
# broken mid-word (JupyterLab sets printed output with word-break: break-all), a
# traceback, or markdown's backticks shown literally in an HTML message.
_WHAT_IS_WRONG_ON_THE_PAGE = """() => {
  const problems = [];
  const short = (text) => text.replace(/\\s+/g, " ").trim().slice(0, 100);
  for (const out of document.querySelectorAll(".jp-Notebook .jp-OutputArea-output")) {
    const right = out.getBoundingClientRect().right + 1;
    if (out.getAttribute("data-mime-type") === "application/vnd.jupyter.stderr"
        && /Traceback|Error:/.test(out.textContent)) {
      problems.push("an error: " + short(out.textContent));
    }
    for (const table of out.querySelectorAll("table")) {
      for (const cell of table.querySelectorAll("td, th")) {
        if (/^(nan|NaN|None|<NA>|NaT)$/.test(cell.textContent.trim())) {
          problems.push("a table cell reads " + cell.textContent.trim() + ": " + short(table.textContent));
          break;
        }
      }
      if (table.getBoundingClientRect().right > right) {
        problems.push("a table runs past the page's edge: " + short(table.textContent));
      }
    }
    for (const pre of out.querySelectorAll("pre")) {
      // A <pre> set to wrap at words (white-space: pre-wrap; word-break: normal) is fine.
      if (getComputedStyle(pre).wordBreak !== "break-all") continue;
      // Laid out unbroken, does any line run wider than the output?
      const [breaking, wrapping] = [pre.style.wordBreak, pre.style.whiteSpace];
      pre.style.wordBreak = "normal";
      pre.style.whiteSpace = "pre";
      const wide = pre.scrollWidth > pre.clientWidth + 1;
      [pre.style.wordBreak, pre.style.whiteSpace] = [breaking, wrapping];
      if (wide) {
        const longest = pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "");
        problems.push(`a printed line is broken mid-word (${longest.length} characters): ` + short(longest));
      }
    }
    for (const html of out.querySelectorAll(".jp-RenderedHTMLCommon")) {
      const copy = html.cloneNode(true);
      copy.querySelectorAll("code, pre, script, style").forEach((node) => node.remove());
      if (copy.textContent.includes("`")) problems.push("a message shows backticks: " + short(copy.textContent));
    }
  }
  return problems;
}"""


def _nothing_wrong_on_the_page(page, when: str) -> None:
    problems = page.evaluate(_WHAT_IS_WRONG_ON_THE_PAGE)
    assert not problems, f"{when}:\n  " + "\n  ".join(dict.fromkeys(problems))


# axe-core (axe-playwright-python's copy of axe.min.js) over what the lab renders: WCAG 2.1's
# A and AA rules; a finding of these impacts fails the test, the rest are kept in the summary.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FAILS = ("serious", "critical")


def _axe(page, context: str, artifact: Path) -> None:
    """Run axe-core on the elements `context` selects; write every finding, by rule, to
    `artifact` (a JSON summary kept with the screenshots) and fail on a serious or critical
    one, named by rule and element.  JupyterLab's own chrome is outside `context`: its
    findings are JupyterLab's (jupyterlab#9399), not the lab's."""
    from axe_playwright_python.base import AXE_SCRIPT

    # axe leaves out contrast on a page whose body has no height (JupyterLab's): give it one
    page.add_style_tag(content="html, body { height: 100%; }")
    page.evaluate(AXE_SCRIPT)
    found = page.evaluate("([context, tags]) => axe.run(context, {runOnly: {type: 'tag', values: tags},"
                          " resultTypes: ['violations']})", [context, AXE_TAGS])
    summary = {"axe": found["testEngine"]["version"], "context": context, "rules_run": AXE_TAGS,
               "findings": [{"rule": v["id"], "impact": v["impact"], "help": v["help"],
                             "elements": [" ".join(map(str, n["target"])) for n in v["nodes"]]}
                            for v in found["violations"]]}
    artifact.write_text(json.dumps(summary, indent=1) + "\n")
    failing = [f"{f['rule']} ({f['impact']}: {f['help']}) at {', '.join(f['elements'][:5])}"
               for f in summary["findings"] if f["impact"] in AXE_FAILS]
    assert not failing, f"axe-core {summary['axe']} on {context}:\n  " + "\n  ".join(failing)


def _go(page, base, token, notebook, workspace):
    """Start opening `notebook` in its own JupyterLab workspace (no tab of another test's
    page comes back with it); _opened waits for it.  Returns once the page is requested,
    so that another page can load meanwhile."""
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{notebook.name}?reset&token={token}", wait_until="commit")


def _opened(page):
    """The notebook _go asked for is open and its labkit kernel has started (Run All
    before that would ask which kernel to use)."""
    from playwright.sync_api import expect

    page.wait_for_load_state()
    expect(page.locator("#jp-main-statusbar")).to_contain_text("Python (labkit) | Idle", timeout=60_000)


def _opened_as_it_ran(page, figures):
    """Wait until the executed notebook (_go asked for it) is open and its saved outputs are
    drawn: every cell's prompt shows its execution count and each of its `figures` plotly
    outputs is a plot (the renderer draws a figure once it is scrolled into view)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import expect

    _opened(page)
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-Cell-inputWrapper .jp-InputPrompt")
    expect(prompts.first).to_contain_text(re.compile(r"\[\d+\]"))
    outputs = page.locator(".jp-Notebook .jp-OutputArea-output.jp-RenderedPlotly")
    if figures:
        try:
            outputs.nth(figures - 1).wait_for(state="attached", timeout=30_000)
        except PlaywrightTimeoutError:
            pass  # the count below says how many came
    assert outputs.count() >= figures, f"{outputs.count()} of the notebook's {figures} figures are on the page"
    for index in range(outputs.count()):
        output = outputs.nth(index)
        output.scroll_into_view_if_needed()
        expect(output.locator("svg.main-svg").first).to_be_visible(timeout=30_000)


def _every_figure_has_its_text(page) -> None:
    """Each plotly figure on the page is followed, in its cell's outputs, by its text and
    data table (labkit.plots.alt_text's disclosure): a screen reader reads that, not the SVG."""
    missing = page.evaluate("""() => {
        const missing = [];
        document.querySelectorAll('.jp-OutputArea-output.jp-RenderedPlotly').forEach((figure, i) => {
            const area = figure.closest('.jp-OutputArea');
            const later = [...area.querySelectorAll('details.labkit-figure-text')]
                .filter(d => figure.compareDocumentPosition(d) & Node.DOCUMENT_POSITION_FOLLOWING);
            if (!later.length) missing.push(i + ': ' + (figure.querySelector('.gtitle')?.textContent || 'untitled'));
        });
        return missing;
    }""")
    assert not missing, "figures without their text and table after them: " + "; ".join(missing)


def _start_run_all(page):
    """Run All in the notebook _go asked for, once it is open with its kernel; returns when
    the cells are sent (the time.monotonic() of it), not when they have run."""
    _opened(page)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    return time.monotonic()


def _close_and_open_from_the_file_browser(page, notebook):
    """Close the notebook on screen (File > Close Tab, its changes discarded: JupyterLab marks
    an executed notebook changed once it opens it) and open `notebook` by a double click on its
    name in JupyterLab's file browser; _start_run_all then waits for it to open."""
    from playwright.sync_api import expect

    changed = page.locator("#jp-main-dock-panel .lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count()
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Close Tab")).click()
    if changed:
        page.locator(".jp-Dialog").get_by_role("button", name="Discard").click()
    expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
    page.locator(".jp-DirListing-item", has=page.get_by_text(notebook.name, exact=True)).dblclick()
    expect(page.locator(".jp-NotebookPanel")).to_have_count(1)


def _field(panel, name):
    """The row of the panel's field `name`: its label, input and message line."""
    return panel.locator(f".widget-vbox:has(> .widget-hbox .widget-label:text-is('{name}'))")


def _bad_values_are_explained_where_typed(panel):
    """A CPU that does not exist, and a client count of 0 typed into its list:
    each gets a red message under its own field, which goes when it is put right."""
    from playwright.sync_api import expect

    row = _field(panel, "server_cpus")
    cpus, message = row.locator("input").first, row.locator("span[style*='b00020']")
    was = cpus.input_value()
    cpus.fill("99")
    expect(message).to_be_visible()
    expect(message).to_contain_text("CPU 99")
    cpus.fill(was)
    expect(message).to_have_count(0)

    row = _field(panel, "clients")
    clients, message = row.locator("input").first, row.locator("span[style*='b00020']")
    was = clients.input_value()
    clients.fill(was + ", 0")
    expect(message).to_be_visible()
    expect(message).to_contain_text(re.compile(r"\b0 is below 1"))
    clients.fill(was)
    expect(message).to_have_count(0)


def _the_keyboard_walks_the_panel_to_run(page, panel, run_button) -> None:
    """From the panel's first field, Tab alone reaches every control in reading order (each
    focus later in the page than the one before, none outside the panel) and then Run, whose
    focus ring is the panel's 3 px one (labkit.panel.FOCUS_STYLE: focus came by keyboard).
    The page records each focus itself; the test reads the record once, at the end."""
    stops = page.evaluate("""(panel) => {
        const all = [...panel.querySelectorAll('*')];
        const run = all.find(e => e.tagName === 'BUTTON' && e.textContent.trim() === 'Run');
        const focusable = all.filter(e => e.matches('input, select, button, textarea, summary, [tabindex]')
                                          && e.tabIndex >= 0 && !e.disabled && e.getClientRects().length);
        window.labkitFocus = [];
        document.addEventListener('focusin', (event) => {
            const e = event.target;
            window.labkitFocus.push({inside: panel.contains(e), index: all.indexOf(e), run: e === run,
                                     ring: getComputedStyle(e).outlineWidth, what: e.outerHTML.slice(0, 120)});
        });
        return focusable.indexOf(run);
    }""", panel.element_handle())
    assert stops > 0, "Run is not among the panel's focusable controls"
    panel.locator("input, select, button, textarea").first.focus()
    for _ in range(stops):
        page.keyboard.press("Tab")
    walked = page.evaluate("window.labkitFocus")
    outside = [step["what"] for step in walked if not step["inside"]]
    assert not outside, f"Tab left the panel before Run, for {outside[0]}"
    order = [step["index"] for step in walked]
    assert order == sorted(order) and len(set(order)) == len(order), "Tab went back up the panel: not reading order"
    assert walked[-1]["run"], f"{stops} presses of Tab from the first field did not end on Run but on " \
                              f"{walked[-1]['what']}"
    assert walked[-1]["ring"] == "3px", f"Run's focus ring is {walked[-1]['ring']}, not the panel's 3 px"


# Run All in the quick profile, as papermill runs it; 05 builds namespaces and links.
_RUN_ALL_SECONDS = {"05_different_hosts": 420}
# The cell whose output is each notebook's main table, kept as a screenshot.
_MAIN_TABLE = {
    "00_setup": 'table["shown"] = ',
    "01_proc_service": 'plots.style_counters(plots.counters_table(df, side="server"))',
    "02_multiplexing": "observations = seeds.observations_table(",
    "03_uploads": 'seeds.styled(seeds.times_table(df, seeds.table("002"))',
    "04_write_strategies": 'with_nagle = df[df["nodelay"] == "off"]',
    "05_different_hosts": "for model in upload_params[\"models\"]:",
    "06_what_breaks_first": "knees = what_breaks.knees(load_df)",
    "07_your_server": "report = battery.run(my_server)",
}
# Figures a student once saw wrong (issue "numbers and charts that tell the truth"), kept as
# screenshots beside the tables: the cell's code, the file's name.
_FIGURES = {
    "03_uploads": [('figure = plots.metric_vs(df[df["clients"] == df["clients"].min()], "goodput_gbit_s"',
                    "against-the-size")],
    "04_write_strategies": [('writes.plot(df, "send_gbit_s")', "send-bars"),
                            ('writes.plot(df, "client_write_syscalls_per_repetition")', "syscalls")],
    "05_different_hosts": [('experiments.get("uploads").plot(upload_df, "transfer_s")', "uploads-by-placement")],
    "06_what_breaks_first": [("say(plots.saturation_warning(load_df)", "latency-vs-offered"),
                             ("what_breaks.connect_times(queue_df)", "connect-times"),
                             ('experiments.get("herd").plot(herd_df, "server_cs_per_request")', "herd"),
                             ('fig = ground_truth.figure(truth, "mean")', "known-answer"),
                             ("sure_table = pd.DataFrame(", "how-sure")],
}


def _screenshot_of_output(page, code, path):
    """A screenshot of the output of the code cell that contains `code`."""
    from playwright.sync_api import expect

    cell = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text=code))
    expect(cell).to_have_count(1)
    output = cell.locator(".jp-OutputArea").first
    output.scroll_into_view_if_needed()
    output.screenshot(path=path)


# The notebooks whose first panel measures live, in a kernel JupyterLab started (its servers
# and load generator started from there); the others' panels resume from the quick run's rows,
# so their first Run draws without measuring again (test_notebooks tests that measuring).
MEASURED_LIVE = {"01_proc_service"}


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the tests of this module on this worker, each page in a
    browser context of its own (no cookie or storage shared): starting Chromium took about 4
    CPU-s here, a JupyterLab page in it 1.5."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is absent: `make setup` installs it on Debian (Ubuntu has it only as a "
                    "snap, unusable headless); or run make test PYTEST_ARGS='-m \"not browser\"'", pytrace=False)
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        _warm_up(browser)
        yield browser
        browser.close()
    finally:
        playwright.stop()


def _warm_up(browser) -> None:
    """Have Chromium start its helper processes now, in the fixture, not during the first
    test: its GPU process and its network and storage services start with the first page
    drawn, and conftest.no_leftover_processes would take them for the test's leftovers.
    A page drawn once, then its context closed; then wait until Chromium's processes stop
    coming and going."""
    import psutil

    page = browser.new_page()
    page.set_content("<p>warm-up</p>")
    page.screenshot()
    page.close()

    def chromium_processes() -> set[int]:
        found = set()
        for child in psutil.Process().children(recursive=True):
            try:  # a helper may end between the listing and the reading of its name
                if "chromium" in child.name():
                    found.add(child.pid)
            except psutil.NoSuchProcess:
                pass
        return found

    seen, since, deadline = chromium_processes(), time.monotonic(), time.monotonic() + 15
    while time.monotonic() - since < 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = chromium_processes()
        if now != seen:
            seen, since = now, time.monotonic()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_student_runs_the_notebook_in_a_browser(jupyter_lab, chromium, notebook):
    from playwright.sync_api import expect

    base, token, work, env = jupyter_lab
    ran = run_quick(notebook.name)  # the executed notebook test_notebooks reads, made once
    executed = work / notebook.name
    shutil.copy(ran.executed_path, executed)
    # Trusted, as the outputs of a notebook the student ran themselves are: JupyterLab draws an
    # untrusted notebook's plotly outputs as text.
    _trust(executed, env)
    figures = sum(1 for cell in ran.nb.cells for out in cell.get("outputs", []) if PLOTLY in out.get("data", {}))
    panel_copy = _up_to_the_first_panel(notebook, work)
    if panel_copy and notebook.stem not in MEASURED_LIVE and (ran.folder / "results.jsonl").exists():
        with open(work / "results.jsonl", "a") as results, open(ran.folder / "results.jsonl") as measured:
            results.write(measured.read())  # the panel's first Run resumes from the quick run's rows
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # One page, in a browser context of its own (Browser.new_page makes one; closing the page
    # closes it): the notebook as it ran is judged first, then closed, and the copy up to its
    # first control panel opened in the same JupyterLab from its file browser, as a student
    # opens a notebook (a page of its own for each cost Chromium 6 CPU-s to boot JupyterLab).  A
    # laptop's width; tall enough that a whole panel fits in one screenshot.
    page = chromium.new_page(viewport=VIEWPORT)
    try:
        if panel_copy:  # its kernel starts while the notebook as it ran is judged
            _start_kernel_for(base, token, panel_copy)
        _go(page, base, token, executed, "as-it-ran")
        _opened_as_it_ran(page, figures)
        _nothing_wrong_on_the_page(page, f"{notebook.name} after Run All")
        _axe(page, ".jp-OutputArea-output", ARTIFACTS / f"{notebook.stem}-axe.json")
        _every_figure_has_its_text(page)
        _screenshot_of_output(page, _MAIN_TABLE[notebook.stem], ARTIFACTS / f"{notebook.stem}-table.png")
        for code, name in _FIGURES.get(notebook.stem, []):
            _screenshot_of_output(page, code, ARTIFACTS / f"{notebook.stem}-{name}.png")
        page.screenshot(path=ARTIFACTS / f"{notebook.stem}-page.png")
        if panel_copy is None:
            assert notebook.stem == "00_setup", f"{notebook.name} shows no control panel"
            return

        _close_and_open_from_the_file_browser(page, panel_copy)
        clicked = _start_run_all(page)
        _wait_until_every_cell_ran(page, _RUN_ALL_SECONDS.get(notebook.stem, 300), since=clicked)
        run_button = page.locator("button.jupyter-button", has_text=re.compile(r"^\s*Run\s*$"))
        expect(run_button).to_have_count(1)
        panel = run_button.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), "
                                   "' jp-OutputArea-output ')][1]")
        run_button.scroll_into_view_if_needed()
        expect(panel.get_by_text(re.compile("^done: "))).to_be_visible()

        _bad_values_are_explained_where_typed(panel)
        # A student's change: leave out the first model, press Run, and the
        # chart is drawn again without it.
        boxes = _field(panel, "models").locator(".widget-checkbox")
        checked = [boxes.nth(i) for i in range(boxes.count()) if boxes.nth(i).locator("input").is_checked()]
        left_out = kept = None
        if len(checked) > 1:
            left_out = checked[0].inner_text().strip()
            kept = [box.inner_text().strip() for box in checked[1:]]
            checked[0].locator("input").uncheck()
        _the_keyboard_walks_the_panel_to_run(page, panel, run_button)
        page.keyboard.press("Enter")  # Run, by keyboard: the focus is on it
        expect(panel.get_by_text(re.compile("^done: "))).to_be_visible(timeout=120_000)
        expect(panel.locator(".js-plotly-plot svg.main-svg").first).to_be_visible()
        if left_out and len(kept) > 1:  # models told apart by the legend
            legend = panel.locator(".js-plotly-plot .legendtext")
            expect(legend.first).to_be_visible()
            expect(legend.filter(has_text=re.compile(f"^{re.escape(left_out)}(,|$)"))).to_have_count(0)
        elif left_out:  # one model left: the title names it, and no legend
            title = panel.locator(".js-plotly-plot .gtitle").first
            expect(title).to_contain_text(kept[0])
            expect(title).not_to_contain_text(left_out)
        expect(panel.locator("table:not(details.labkit-figure-text table)")).to_have_count(1)  # the counters table
        # the figure as text and a table, after it, a disclosure the keyboard opens
        text = panel.locator("details.labkit-figure-text")
        expect(text).to_have_count(1)
        text.locator("summary").focus()
        page.keyboard.press("Enter")
        expect(text.locator("table caption")).to_be_visible()
        expect(text.locator("th[scope=col]").first).to_be_visible()
        _nothing_wrong_on_the_page(page, f"{notebook.name} after its panel's Run")
        # axe on the panel alone: the outputs above it are the executed notebook's, read above
        panel.evaluate("element => element.setAttribute('data-labkit-panel', '')")
        _axe(page, "[data-labkit-panel]", ARTIFACTS / f"{notebook.stem}-panel-axe.json")
        panel.screenshot(path=ARTIFACTS / f"{notebook.stem}-panel.png")
    finally:
        page.screenshot(path=ARTIFACTS / f"{notebook.stem}-last.png")  # what was on screen last
        page.close()  # and its context; Chromium serves the module's next test
        _shut_down_kernels(base, token)


def test_a_feedback_page_passes_axe(chromium, tmp_path):
    """The page `labkit grade` writes for a student, with a row of every status, read by
    axe-core as the student's browser shows it (a file on disk, no JupyterLab around it)."""
    from labkit.instructor.grading import grader, hand

    def row(check, status, points, most, message, hidden=False):
        return {"check": check, "status": status, "points": points, "max_points": most,
                "message": message, "hidden": hidden}

    # made-up checks, one of each status (no real check's name: a hidden one must never reach
    # the edition, where this file goes)
    rows = [row("a_passed_check", grader.PASSED, 2, 2, "ok"),
            row("a_failed_check", grader.FAILED, 0, 3, "client 1: sent 20 bytes, got 0 back"),
            row("a_hidden_check", grader.FAILED, 0, 1, "not run: the visible check failed", hidden=True),
            row("an_erring_check", grader.ERROR, 0, 2, "Traceback (most recent call last):\n  ...\nKeyError: 'x'"),
            row("a_stopped_check", grader.TIMEOUT, 0, 1, "the run was stopped at its time limit"),
            row("a_written_answer", grader.BY_HAND, 0, 2, "to be marked by hand"),
            row("a_marked_answer", hand.MARKED, 2, 2, "well argued")]
    task = grader.Task("alice", "01_proc_service", None)
    page_path = grader.write_feedback(tmp_path, "alice", [grader.Outcome(task, rows, None, "ran to its end")])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = chromium.new_page(viewport=VIEWPORT)
    try:
        page.goto(page_path.as_uri())
        _axe(page, "html", ARTIFACTS / "feedback-page-axe.json")
        page.screenshot(path=ARTIFACTS / "feedback-page.png", full_page=True)
    finally:
        page.close()


def test_axe_check_scope(chromium, tmp_path):
    """The check the notebooks pass can fail: an unlabelled field and an image without text
    inside an output are named by rule and element; the same outside the outputs (JupyterLab's
    own chrome) is not the lab's, and left out."""
    page = chromium.new_page(viewport=VIEWPORT)
    try:
        page.set_content("<!doctype html><html lang='en'><title>probe</title><body>"
                         "<div class='jp-OutputArea-output'><input type='text'><img src='x.png'></div>"
                         "<div class='jp-Toolbar'><input type='text'></div></body></html>")
        with pytest.raises(AssertionError) as failed:
            _axe(page, ".jp-OutputArea-output", tmp_path / "probe-axe.json")
        said = str(failed.value)
        assert "label (critical" in said and "image-alt (critical" in said
        assert ".jp-OutputArea-output > input" in said and ".jp-Toolbar" not in said
        found = json.loads((tmp_path / "probe-axe.json").read_text())
        assert {f["rule"] for f in found["findings"]} == {"label", "image-alt"}
        page.set_content("<!doctype html><html lang='en'><title>probe</title><body>"
                         "<div class='jp-OutputArea-output'><label>n <input type='text'></label>"
                         "<img src='x.png' alt='a chart'></div></body></html>")
        _axe(page, ".jp-OutputArea-output", tmp_path / "fixed-axe.json")
    finally:
        page.close()
