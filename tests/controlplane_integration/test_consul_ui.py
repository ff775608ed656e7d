"""The Consul UI of a running cluster, in headless Chromium (Debian's package)
driven over the DevTools protocol by Playwright: the service's instances page
shows every zmqueue host with passing health, the KV pages show the queue
tree (``zmqueue/queues/``, ``zmqueue/leaders/``, ...).

The Consul 1.8 UI is an Ember app that keeps long-polling the agent, so
``chromium --dump-dom`` races the render and ``--virtual-time-budget`` never
ends; here every check waits (bounded) for the rendered element instead.

``ZMQUEUE_SCREENSHOTS=docs/img/consul`` also writes the screenshots there;
``python ops/screenshots.py`` makes the ones in the operator guide (with
tidy node names ``c1-h1``..).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import pytest

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.controlplane_integration.conftest import all_passing, kv_client
from zmqueue.localcluster import ConsulAgent

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

ROOT = Path(__file__).resolve().parents[2]
INSTALL_CHROMIUM = "bash ops/install-test-deps.sh"
INSTALL_PLAYWRIGHT = "pip install -e '.[test]'"
SCREENSHOTS_ENV = "ZMQUEUE_SCREENSHOTS"
# Playwright only talks DevTools to the system browser: never `playwright install`
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 15_000  # any one element: the UI renders in well under a second


class BrowserMissing(RuntimeError):
    pass


def find_chromium() -> str:
    """Debian's chromium (the launcher script or the binary behind it)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.access("/usr/lib/chromium/chromium", os.X_OK):
        return "/usr/lib/chromium/chromium"
    raise BrowserMissing(f"chromium is not installed: run `{INSTALL_CHROMIUM}` "
                         "(apt-get install -y chromium)")


def require_browser() -> None:
    """Fail (never skip) with the install command when chromium or Playwright is missing."""
    problem = None
    try:
        find_chromium()
        import playwright.sync_api  # noqa: F401
    except BrowserMissing as e:
        problem = str(e)
    except ImportError:
        problem = f"the playwright package is missing: run `{INSTALL_PLAYWRIGHT}`"
    if problem:
        pytest.fail(problem, pytrace=False)


def screenshots_dir() -> Path | None:
    """Where ``$ZMQUEUE_SCREENSHOTS`` asks for PNGs (relative to the repo root)."""
    value = os.environ.get(SCREENSHOTS_ENV)
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else ROOT / path


class ConsulUI:
    """One headless Chromium page on the Consul UI at ``addr``; every wait is
    bounded, a failed wait saves ``failure-<n>.png`` in ``debug_dir`` and
    raises AssertionError with the page's text. Use as a context manager: the
    browser is closed on exit whatever happened."""

    def __init__(self, addr: str, debug_dir: Path, shots_dir: Path | None = None,
                 dc: str = "dc1") -> None:
        self.base = f"http://{addr}/ui/{dc}"
        self.debug_dir = debug_dir
        self.shots_dir = shots_dir
        self.shots: list[Path] = []
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self._page: Page | None = None
        self._failures = 0

    def __enter__(self) -> ConsulUI:
        executable = find_chromium()
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as e:
            raise BrowserMissing(f"the playwright package is missing: run `{INSTALL_PLAYWRIGHT}`") from e
        try:
            self._pw = sync_playwright().start()
            self._browser = self._pw.chromium.launch(executable_path=executable, args=BROWSER_ARGS,
                                                     timeout=30_000)
            self._page = self._browser.new_page(viewport={"width": VIEWPORT["width"],
                                                          "height": VIEWPORT["height"]})
            self._page.set_default_timeout(WAIT_MS)
            self._page.set_default_navigation_timeout(WAIT_MS)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self._browser is not None:
                self._browser.close()
        finally:
            self._browser = self._page = None
            if self._pw is not None:
                self._pw.stop()
                self._pw = None

    @property
    def page(self) -> Page:
        assert self._page is not None, "use ConsulUI as a context manager"
        return self._page

    def open(self, route: str) -> None:
        """Navigate to ``/ui/<dc>/<route>``. Never waits for network idle: the
        UI's blocking queries keep a request open all the time."""
        self.page.goto(f"{self.base}/{route}", wait_until="domcontentloaded")

    def wait(self, selector: str, what: str, has_text: str | None = None) -> None:
        """Wait until an element matching ``selector`` (and containing
        ``has_text``) is visible; fail with the page's text and a screenshot."""
        from playwright.sync_api import Error as PlaywrightError

        loc = self.page.locator(selector, has_text=has_text).first
        try:
            loc.wait_for(state="visible", timeout=WAIT_MS)
        except PlaywrightError as e:
            self._failures += 1
            png = self.debug_dir / f"failure-{self._failures}.png"
            try:
                self.page.screenshot(path=str(png), timeout=5_000)
                text = self.page.inner_text("body", timeout=2_000)
            except PlaywrightError:
                text = "(page unreadable)"
            raise AssertionError(f"Consul UI at {self.page.url}: no {what} after {WAIT_MS} ms "
                                 f"(screenshot {png}); page text:\n{text[:2000]}") from e

    def text(self, selector: str) -> str:
        return self.page.locator(selector).first.inner_text()

    def settle(self) -> None:
        """Let the app finish its transitions (the loader overlay fades out)."""
        self.page.locator(".view-loader").first.wait_for(state="hidden", timeout=WAIT_MS)
        self.page.wait_for_timeout(300)

    def shot(self, name: str) -> Path:
        """Screenshot of the viewport: into ``shots_dir`` when set, else the debug dir."""
        self.settle()
        out_dir = self.shots_dir or self.debug_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / name
        self.page.screenshot(path=str(path), timeout=WAIT_MS)
        self.shots.append(path)
        return path

    # -- the checks of the operator guide --------------------------------------------

    def check_services(self) -> None:
        self.open("services")
        self.wait('a[href$="/services/zmqueue"], a[href$="/services/zmqueue/instances"]',
                  "zmqueue service on the services page", has_text="zmqueue")

    def check_instances(self, nodes: list[str], service: str = "zmqueue") -> None:
        """Every host's instance is listed with its service and node checks passing."""
        self.open(f"services/{service}/instances")
        for node in nodes:
            row = f'li:has(a[href$="/{service}-{node}"])'
            self.wait(row, f"instance {service}-{node}")
            for kind in ("service", "node"):
                self.wait(f"{row} dl.passing", f"passing {kind} checks on {service}-{node}",
                          has_text=f"All {kind} checks passing")

    def check_instance_checks(self, node: str, agent_node: str, service: str = "zmqueue") -> None:
        """The instance page lists the host's own checks (heartbeat, /health), passing."""
        self.open(f"services/{service}/instances/{agent_node}/{service}-{node}/health-checks")
        for check in (f"service:{service}-{node}", f"http:{service}-{node}"):
            self.wait("li.healthcheck-output.passing", f"passing check {check}", has_text=check)

    def check_kv_folder(self, prefix: str, names: list[str]) -> None:
        """The KV browser at ``prefix`` (ending in /) lists the folders ``names``."""
        self.open(f"kv/{prefix}")
        for name in names:
            self.wait(f'td.folder a[href$="/kv/{prefix}{name}/"]', f"KV folder {prefix}{name}/")

    def check_kv_value(self, key: str, contains: str) -> None:
        """The KV editor of ``key`` shows a value containing ``contains``."""
        self.open(f"kv/{key}/edit")
        self.wait(".CodeMirror, textarea", f"the editor of {key}", has_text=contains)


def wait_kv(addr: str, prefix: str, timeout_s: float = 20.0) -> list[str]:
    """The keys under ``prefix``, once there are some (bounded wait)."""
    kv = kv_client(addr).kv

    def keys() -> list[str]:
        _, found = kv.get(prefix, keys=True)
        return list(found or [])

    return list(wait_for(keys, timeout_s, f"keys under {prefix}", interval_s=0.1))


def agent_node_name(addr: str) -> str:
    """The Consul node the hosts registered on (the dev agent's node name)."""
    return str(kv_client(addr).agent.self()["Config"]["NodeName"])


def check_cluster_in_ui(addr: str, nodes: list[str], queue: str, debug_dir: Path,
                        shots_dir: Path | None = None) -> list[Path]:
    """Every assertion of the browser test, and the guide's screenshots. The
    hosts are already passing and ``queue`` exists (with a leader)."""
    with ConsulUI(addr, debug_dir, shots_dir) as ui:
        ui.check_services()
        ui.shot("services-list.png")
        ui.check_instances(nodes)
        ui.shot("services.png")
        ui.check_instance_checks(nodes[0], agent_node_name(addr))
        ui.shot("instance-checks.png")
        ui.check_kv_folder("zmqueue/", ["queues", "leaders", "managers"])
        ui.shot("kv-root.png")
        ui.check_kv_folder("zmqueue-positions/", [queue])
        ui.check_kv_folder("zmqueue/queues/", [queue])
        ui.shot("kv-queues.png")
        ui.check_kv_value(f"zmqueue/queues/{queue}/config", f'"name":"{queue}"')
        ui.shot("kv-config.png")
        return ui.shots


@pytest.mark.timeout(60)
def test_the_consul_ui_shows_the_hosts_with_their_health_and_the_queue_tree(
        hosts: HostFactory, consul_agent: ConsulAgent, tmp_path: Path) -> None:
    t0 = time.monotonic()
    require_browser()  # before starting anything
    started = [hosts.start(f"h{i}") for i in (1, 2, 3)]
    nodes = [h.node for h in started]
    for node in nodes:
        wait_for(lambda: all_passing(consul_agent, node), 20, f"{node} passing")  # noqa: B023
    client = zmqueue.connect(consul_agent.http_addr, request_timeout=10)
    try:
        client.create_queue("orders", replication_factor=3)
    finally:
        client.close()
    addr = consul_agent.http_addr
    wait_kv(addr, "zmqueue/leaders/orders/")
    wait_kv(addr, "zmqueue-positions/orders/")
    _, cfg = kv_client(addr).kv.get("zmqueue/queues/orders/config")
    assert cfg is not None and json.loads(cfg["Value"])["replication_factor"] == 3

    shots = check_cluster_in_ui(addr, nodes, "orders", tmp_path, screenshots_dir())
    for png in shots:
        size = png.stat().st_size
        assert 10_000 < size < 300_000, f"{png}: {size} bytes (blank page, or too big for the docs)"
    assert time.monotonic() - t0 < 60
