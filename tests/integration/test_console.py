"""The console of ``highwater server`` in a real browser: Debian's Chromium, headless.

A real server (uvicorn, the app ``highwater server`` runs) over a jobs topic of the test's own
on the embedded broker, holding two changefeeds' job statuses: one running with a source
partition lagging, one failed. Selenium drives Chromium through Debian's ChromeDriver. What a
person sees: nothing but the token form until a token the server takes is given (a wrong one
is refused, saying so, and shows no changefeed); then every changefeed with its state, its
lagging badge and the warning naming the partition, and the failed one's error; a status
changed in the topic shows without reloading the page. Screenshots go to the test's folder,
or to ``$HIGHWATER_SCREENSHOTS`` (the docs' are made so: docs/console/, in the console's page).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from confluent_kafka import Producer
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.firefox.service import Service as FirefoxService
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from pipeline.cli import main as highwater
from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from pipeline.control.server import create_app
from pipeline.core.operators.status import JobStatus
from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic
from tests.integration.test_chaos import config_for
from tests.integration.test_metrics import scrape
from tests.support.process import ROOT
from tests.support.process import start_server as highwater_server

pytestmark = pytest.mark.integration
TOKEN = "console-token"  # noqa: S105 - a test token
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # scripts/ensure-system.sh
FIREFOX, GECKODRIVER = "/usr/bin/firefox-esr", ROOT / ".tools" / "bin" / "geckodriver"
LAGGING = (
    "source partition src/1 is lagging: resolved 1.0000000000, 4m12s behind now "
    "(lagging_threshold 3m0s); it holds the high-water back"
)


class Running:
    """``app`` served by uvicorn on ``port`` in a thread: stopped and started again at will."""

    def __init__(self, app: Any, port: int) -> None:
        self.app, self.port = app, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self._server.started, "the server did not start"

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)


@dataclass
class Served:
    """A server running: its URL, the jobs topic it reads, its context and app."""

    url: str
    jobs: CompactedTopic
    context: OperatorContext
    app: Any  # its FastAPI app: the lag history's sampler is app.state.history
    running: Running


@pytest.fixture
def server(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[Served]:
    """A real server on a free port (it runs no changefeed: ``--no-run``'s API and console)."""
    context = OperatorContext(
        {"bootstrap.servers": kafka_bootstrap},
        safepoint_topic=unique_name("safepoints"),
        jobs_topic=unique_name("jobs"),
        cluster=f"c{uuid.uuid4().hex[:12]}",
    )
    jobs = CompactedTopic(context.client, context.jobs_topic)
    jobs.ensure()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(context, TOKEN)
    running = Running(app, port)
    running.start()
    try:
        yield Served(f"http://127.0.0.1:{port}", jobs, context, app, running)
    finally:
        running.stop()
        jobs.close()


@pytest.fixture
def browser(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[webdriver.Remote]:
    """Headless Chromium (or Firefox ESR, where a test asks), kept off this closed network."""
    kind = getattr(request, "param", "chromium")
    driver = chromium(tmp_path) if kind == "chromium" else firefox(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


def chromium(tmp_path: Path) -> webdriver.Remote:
    """Debian's Chromium through its ChromeDriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1400,900",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


def firefox(tmp_path: Path) -> webdriver.Remote:
    """Debian's Firefox ESR through geckodriver (scripts/ensure-system.sh builds it)."""
    options = webdriver.FirefoxOptions()
    options.binary_location = FIREFOX
    options.add_argument("-headless")
    for name, value in (  # nothing fetched from the internet at start
        ("app.update.enabled", False),
        ("browser.shell.checkDefaultBrowser", False),
        ("datareporting.policy.dataSubmissionEnabled", False),
        ("toolkit.telemetry.enabled", False),
        ("network.captive-portal-service.enabled", False),
    ):
        options.set_preference(name, value)
    service = FirefoxService(executable_path=str(GECKODRIVER), log_output=str(tmp_path / "gd.log"))
    driver = webdriver.Firefox(options=options, service=service)
    driver.set_window_size(1400, 900)
    return driver


# the console's own tests in both browsers the issue names (the others in Chromium alone)
both_browsers = pytest.mark.parametrize("browser", ["chromium", "firefox"], indirect=True)


_SHOWN = """
return Array.from(document.querySelectorAll('#changefeeds tr')).map((row) => [
  row.dataset.changefeed,
  Object.fromEntries(Array.from(row.querySelectorAll('td')).map(
    (td) => [td.classList[0], td.innerText.trim()])),
]);
"""


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where the tests' screenshots go: ``$HIGHWATER_SCREENSHOTS``, else the test's folder."""
    folder = Path(os.environ.get("HIGHWATER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shoot(browser: webdriver.Remote, folder: Path, stem: str) -> None:
    """A screenshot: ``<stem>.png`` from Chromium, ``<stem>-firefox.png`` from Firefox."""
    browser.save_screenshot(
        str(folder / (stem + ("-firefox" if browser.name == "firefox" else "") + ".png"))
    )


def rows(driver: webdriver.Remote) -> dict[str, dict[str, str]]:
    """The list as shown (read in one script: the page redraws it every few seconds)."""
    return dict(driver.execute_script(_SHOWN))


@both_browsers
def test_the_console_shows_every_changefeed_only_with_the_token(
    server: Served, browser: webdriver.Remote, screenshots: Path
) -> None:
    url, jobs = server.url, server.jobs
    now = time.time_ns()
    jobs.put(
        "orders",
        JobStatus(
            "orders",
            "running",
            high_water=Hlc(now - 252 * 10**9),
            warnings=[LAGGING],
            delivery="exactly_once",
        ).encode(),
    )
    jobs.put("audit", JobStatus("audit", "failed", error="the source topic is gone").encode())
    wait = WebDriverWait(browser, 30)

    # 1. the page: the token form, nothing else
    browser.get(url + "/")
    wait.until(seen.visibility_of_element_located((By.ID, "token")))
    assert not browser.find_element(By.ID, "list").is_displayed()
    assert rows(browser) == {}

    # 2. a wrong token: refused, saying so, and no changefeed shown
    browser.find_element(By.ID, "token").send_keys("nope")
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    refused = wait.until(seen.visibility_of_element_located((By.ID, "refused")))
    assert "refused this token" in refused.text
    assert rows(browser) == {}
    assert not browser.find_element(By.ID, "list").is_displayed()

    # 3. the token: every changefeed, its state, badge, warning and error
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(lambda d: len(rows(d)) == 2)
    assert not browser.find_element(By.ID, "login").is_displayed()  # asked once
    assert not browser.find_element(By.ID, "refused").is_displayed()
    shown = rows(browser)
    assert shown["orders"]["state"] == "running"
    assert shown["orders"]["delivery"] == "exactly_once"
    assert shown["orders"]["lag"].startswith("4m1")  # 4m12s and the seconds since
    assert shown["orders"]["warnings"].splitlines() == ["lagging (1)", LAGGING]
    assert shown["audit"]["state"] == "failed"
    assert shown["audit"]["error"] == "the source topic is gone"
    assert shown["audit"]["warnings"] == ""
    shoot(browser, screenshots, "list")

    # 4. a status changed in the topic shows without a reload
    jobs.put("orders", JobStatus("orders", "paused", high_water=Hlc(now)).encode())
    wait.until(lambda d: rows(d)["orders"]["state"] == "paused")
    assert rows(browser)["orders"]["warnings"] == ""

    # 5. the server's token changed under the open page: asked again, saying why, list gone
    server.running.stop()
    server.running.app = create_app(server.context, "a-new-token")
    server.running.start()
    refused = wait.until(seen.visibility_of_element_located((By.ID, "refused")))
    assert "refused this token" in refused.text
    assert not browser.find_element(By.ID, "list").is_displayed()
    assert rows(browser) == {}
    browser.find_element(By.ID, "token").send_keys("a-new-token")
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(lambda d: len(rows(d)) == 2)

    # 6. "Change token": the form again, nothing shown until a token is given
    browser.find_element(By.ID, "forget").click()
    wait.until(seen.visibility_of_element_located((By.ID, "token")))
    assert rows(browser) == {}
    assert not browser.find_element(By.ID, "refused").is_displayed()  # asked, not refused


def log_in(browser: webdriver.Remote, url: str) -> WebDriverWait[webdriver.Remote]:
    browser.get(url + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(seen.visibility_of_element_located((By.ID, "token"))).send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(seen.visibility_of_element_located((By.ID, "list")))
    return wait


def press(browser: webdriver.Remote, changefeed: str, label: str) -> None:
    """Click a row's button (found again if the list was redrawn meanwhile)."""
    for _ in range(10):
        try:
            row = browser.find_element(By.CSS_SELECTOR, f'tr[data-changefeed="{changefeed}"]')
            found = [b for b in row.find_elements(By.TAG_NAME, "button") if b.text == label]
            assert found, f"no {label!r} button for {changefeed}"
            found[0].click()
            return
        except StaleElementReferenceException:
            time.sleep(0.2)
    raise AssertionError(f"{changefeed}'s row kept changing")


def said(browser: webdriver.Remote, start: str) -> str:
    """The page's message, once it starts with ``start``."""
    box = (By.ID, "said")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(*box).text.startswith(start))
    text: str = browser.find_element(*box).text
    return text


def config(served: Served, changefeed_id: str, **extra: Any) -> str:
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": served.context.client["bootstrap.servers"]},
        "sources": [{"topic": "src", "table": "orders"}],
        "jobs": {"topic": served.context.jobs_topic},
        **extra,
    }
    return json.dumps(raw, indent=2)  # YAML is a superset of JSON


def test_a_changefeed_is_created_paused_resumed_and_removed_from_the_page(
    server: Served, browser: webdriver.Remote
) -> None:
    """Each through the API's routes and rules: what the CLI reports changes with it.

    A config that does not validate is refused with its key paths; one that exists is
    refused with the API's own message; a paused one's config updated from its page (a shape
    change refused by name); removing asks first (dismissed: nothing happens).
    """
    wait = log_in(browser, server.url)
    feeds = Changefeeds(server.context)
    browser.find_element(By.CSS_SELECTOR, "#create summary").click()
    box = browser.find_element(By.ID, "config")

    box.send_keys("changefeed_id: [cf1\nsources: {")  # YAML that does not parse
    browser.find_element(By.CSS_SELECTOR, "#new button").click()
    assert "not valid YAML" in said(browser, "Create refused: ")
    box.clear()
    box.send_keys('{"changefeed_id": "cf1", "sources": []}')
    browser.find_element(By.CSS_SELECTOR, "#new button").click()
    refused = said(browser, "Create refused: ")
    assert "kafka" in refused, refused  # each problem by its key
    assert "sources" in refused, refused
    assert browser.find_element(By.ID, "said").get_attribute("class") == "problem"

    box.clear()
    box.send_keys(config(server, "cf1"))
    browser.find_element(By.CSS_SELECTOR, "#new button").click()
    assert said(browser, "Create: ") == "Create: cf1 is running now."
    wait.until(lambda d: rows(d).get("cf1", {}).get("desired") == "running")
    assert rows(browser)["cf1"]["state"] == "pending"  # this server runs nothing
    assert feeds.get("cf1").desired == "running"

    assert not box.is_displayed()  # made: the form closes, the list shows it
    browser.find_element(By.CSS_SELECTOR, "#create summary").click()
    box.send_keys(config(server, "cf1"))  # again: the API's refusal, as it words it
    browser.find_element(By.CSS_SELECTOR, "#new button").click()
    assert "exists" in said(browser, "Create refused: ")

    press(browser, "cf1", "Pause")
    wait.until(lambda d: rows(d)["cf1"]["desired"] == "paused")
    assert feeds.get("cf1").desired == "paused"

    # paused: its config updated from its page; a change its output cannot follow refused
    browser.find_element(By.LINK_TEXT, "cf1").click()
    wait.until(seen.visibility_of_element_located((By.ID, "update")))
    browser.find_element(By.CSS_SELECTOR, "#update summary").click()
    changed = browser.find_element(By.ID, "changed-config")
    changed.send_keys(config(server, "cf1", encoder={"envelope": "bare"}))
    browser.find_element(By.CSS_SELECTOR, "#changed button").click()
    assert "encoder.envelope: shapes every message" in said(browser, "Update refused: ")
    two = [{"topic": "src", "table": "orders"}, {"topic": "src2", "table": "customers"}]
    changed.clear()
    changed.send_keys(config(server, "cf1", sources=two))
    browser.find_element(By.CSS_SELECTOR, "#changed button").click()
    assert said(browser, "Update: ") == "Update: cf1 is paused now."
    spec = feeds.get("cf1").spec
    assert spec is not None
    assert spec.config == config(server, "cf1", sources=two)  # what its resume runs with
    browser.find_element(By.LINK_TEXT, "← every changefeed").click()
    wait.until(seen.visibility_of_element_located((By.ID, "list")))

    press(browser, "cf1", "Resume")
    wait.until(lambda d: rows(d)["cf1"]["desired"] == "running")
    assert feeds.get("cf1").desired == "running"

    press(browser, "cf1", "Remove")
    wait.until(seen.alert_is_present()).dismiss()  # asked first: dismissed, nothing happens
    time.sleep(1)
    assert feeds.get("cf1").desired == "running"
    press(browser, "cf1", "Remove")
    alert = wait.until(seen.alert_is_present())
    assert "Remove cf1 for good?" in alert.text
    alert.accept()
    wait.until(lambda d: rows(d)["cf1"]["desired"] == "removed")
    assert feeds.get("cf1").desired == "removed"


_PARTITIONS = """
return Object.fromEntries(Array.from(document.querySelectorAll('#partitions tr')).map(
  (row) => [row.dataset.partition, ['td.offset', 'td.note'].map(
    (c) => row.querySelector(c).innerText.trim())]));
"""
# Debezium's: the transaction a partition's markers wait for (transaction_feed.py)
WAITS = "transaction 571 (3 of 4 events read) of 'pg.transaction', waiting 12 s"


@both_browsers
def test_a_changefeeds_page_shows_its_lag_chart_partitions_scan_and_schemas(
    server: Served, browser: webdriver.Remote, screenshots: Path
) -> None:
    """A changefeed's page, from the list's link, and back.

    The partition holding the high-water back marked and named lagging, the others not; the
    server's lag samples drawn; the scan's progress; the output schemas; the dead letters
    counted and, asked for, the latest shown.
    """
    now = time.time_ns()
    held = Hlc(now - 300 * 10**9, 2)
    dead = f"console-dlq-{uuid.uuid4().hex[:8]}"
    lagging = (
        f"source partition src/1 is lagging: resolved {held}, 5m0s behind now "
        "(lagging_threshold 3m0s); it holds the high-water back"
    )
    status = JobStatus(
        "orders",
        "scanning",
        high_water=held,
        scan={"chunks_done": 3, "chunks_total": 12},
        warnings=[lagging],
        delivery="exactly_once",
        schemas={
            "orders": {
                "version": "id 7 of subject orders-value",
                "columns": ["id", "amount", "vip"],
                "changed_at": str(held),
                "added": ["vip"],
            }
        },
        partitions=[
            {"topic": "src", "partition": 0, "resolved": str(Hlc(now - 5 * 10**9)), "offset": 90},
            {"topic": "src", "partition": 1, "resolved": str(held), "waits_for": WAITS},
            {"topic": "src", "partition": 2, "resolved": str(Hlc(now - 2 * 10**9)), "offset": 7},
        ],
        output={
            "topics": {"o": "orders"},
            "format": "json",
            "envelope": "wrapped",
            "updated": True,
            "dead_letters": dead,
        },
    )
    server.jobs.put("orders", status.encode())
    ensure_topics(server.context.client, {dead: 1})
    producer = Producer(server.context.client)
    for n in range(2):
        headers = [("highwater.error", b"not JSON"), ("highwater.source", f"src/0@{n}".encode())]
        producer.produce(dead, key=b'["eu",1]', value=b"{oops", headers=headers)
    assert producer.flush(30) == 0
    for _ in range(3):
        server.app.state.history.sample()  # the server's own samples (it takes one each 10 s)
        time.sleep(0.05)
    wait = log_in(browser, server.url)
    wait.until(lambda d: "orders" in rows(d))
    browser.find_element(By.LINK_TEXT, "orders").click()
    wait.until(seen.visibility_of_element_located((By.ID, "detail")))
    assert not browser.find_element(By.ID, "list").is_displayed()
    assert browser.find_element(By.ID, "detail-id").text == "orders"

    wait.until(lambda d: len(d.execute_script(_PARTITIONS)) == 3)
    assert browser.execute_script(_PARTITIONS) == {
        "src/0": ["90", ""],
        "src/1": ["from its start", f"holds the high-water back; waits for {WAITS}; lagging"],
        "src/2": ["7", ""],
    }
    line = browser.find_element(By.CSS_SELECTOR, "#chart polyline").get_attribute("points")
    assert len((line or "").split()) >= 3  # a point a sample
    assert "samples; lag now 5m" in browser.find_element(By.ID, "chart-said").text
    progress = browser.find_element(By.ID, "scan-progress")
    assert (progress.get_attribute("value"), progress.get_attribute("max")) == ("3", "12")
    assert browser.find_element(By.ID, "scan-said").text == "3 of 12 chunks"
    schema = browser.find_element(By.CSS_SELECTOR, "#schemas tr").text
    assert "id 7 of subject orders-value" in schema
    assert "added vip" in schema
    assert lagging in browser.find_element(By.ID, "detail-warnings").text
    assert browser.find_element(By.ID, "dlq-said").text == f"2 by offsets in {dead}"
    browser.find_element(By.ID, "dlq-show").click()
    wait.until(seen.visibility_of_element_located((By.ID, "dlq-table")))
    shown = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#dlq tr")]
    assert len(shown) == 2
    assert shown[0].startswith(f"{dead}/0@1 ")  # newest first
    assert "not JSON src/0@1" in shown[0]
    shoot(browser, screenshots, "changefeed")

    # Back to the list while the page's own refresh is still waiting for its answer (held
    # here 2 s, as a slow server would): the late answer must not draw the page over the list.
    browser.execute_script(_HOLD_THE_PAGES_ANSWERS)
    wait.until(lambda d: d.execute_script("return window.held.asked") > 0)
    browser.find_element(By.LINK_TEXT, "← every changefeed").click()
    wait.until(seen.visibility_of_element_located((By.ID, "list")))
    wait.until(lambda d: d.execute_script("return window.held.answered") >= 2)  # page and lag
    wait.until(lambda d: d.execute_script(_TWO_FRAMES_LATER))
    assert not browser.find_element(By.ID, "detail").is_displayed()
    assert browser.find_element(By.ID, "list").is_displayed()


# The changefeed page's requests answered 2 s late, counted (window.held); the list's not.
_HOLD_THE_PAGES_ANSWERS = """
const fetched = window.fetch;
window.held = {asked: 0, answered: 0};
window.fetch = (url, init) => {
  if (!url.includes('/changefeeds/')) return fetched(url, init);
  window.held.asked += 1;
  return new Promise((later) => setTimeout(later, 2000))
    .then(() => fetched(url, init))
    .then((answer) => answer.clone().text().then(() => answer))  // the body in, too
    .then((answer) => { window.held.answered += 1; return answer; });
};
"""
# True two animation frames after its first call: the page's scripts have run on the answers.
_TWO_FRAMES_LATER = """
if (window.held.drawn === undefined) {
  window.held.drawn = false;
  requestAnimationFrame(() => requestAnimationFrame(() => { window.held.drawn = true; }));
}
return window.held.drawn;
"""


def test_an_unknown_changefeed_and_a_server_restart_are_said_never_a_blank_page(
    server: Served, browser: webdriver.Remote
) -> None:
    """What goes wrong is said, and the page goes on.

    A URL naming no changefeed says so and shows the list; a server that stops answering
    under the open page is said, and the page reconnects by itself once it is back.
    """
    server.jobs.put("orders", JobStatus("orders", "running").encode())
    wait = log_in(browser, server.url)
    wait.until(lambda d: "orders" in rows(d))

    browser.get(server.url + "/#changefeed=nope")
    assert "(the list of every changefeed is below)" in said(browser, "no changefeed 'nope'")
    wait.until(seen.visibility_of_element_located((By.ID, "list")))
    assert "orders" in rows(browser)
    assert not browser.find_element(By.ID, "detail").is_displayed()

    connection = (By.ID, "connection")
    server.running.stop()
    wait.until(seen.text_to_be_present_in_element(connection, "does not answer; trying again"))
    assert "orders" in rows(browser)  # the last list seen stays
    server.running.start()
    wait.until(seen.text_to_be_present_in_element(connection, "Updated"))
    assert "orders" in rows(browser)


def start_server(
    bootstrap: str, jobs_topic: str, port: int, state: Path
) -> subprocess.Popen[bytes]:
    """``highwater server`` as operators start it: it runs the changefeeds created through it.

    It samples every 2 s (``--sample-every``; 10 s by default) so rows/s shows sooner.
    """
    arguments = [
        *("--port", str(port), "--token", TOKEN, "--sample-every", "2"),
        *("--bootstrap-servers", bootstrap, "--jobs-topic", jobs_topic),
    ]
    return highwater_server(arguments, state, state / "server.log")


def cli_state(
    capsys: pytest.CaptureFixture[str], changefeed_id: str, *where: str, field: str = "state"
) -> str:
    """The state (or another ``field``) ``highwater changefeed query`` reports."""
    capsys.readouterr()
    assert highwater(["changefeed", "query", changefeed_id, *where]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if line)
    return lines[field].split(" (")[0].strip()


def test_a_real_changefeed_held_back_shows_stuck_and_lagging_and_is_steered_from_the_page(  # noqa: PLR0917 - fixtures
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    browser: webdriver.Remote,
    screenshots: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``highwater server`` running a real changefeed (spark-submit) that is held back on purpose.

    Created from the page (its YAML pasted). Upstream, partition 1 of the source gets rows but
    never a marker while the others get both: the high-water stands at the cursor while
    records come, so past ``stuck_threshold`` (8 s) the list shows the **stuck** badge and the
    warning naming ``<source>/1`` as the one holding it back, and **lagging (1)** naming it; its
    page marks that partition and shows each one's next offset. The run says it as Prometheus
    users see it (``highwater_stuck`` 1, ``highwater_lagging_partitions`` 1, scraped from the
    run's endpoint) and logs it once. Upstream mended (markers on every partition again) clears
    both, in the page and the metrics. Pause and resume from the page change the state
    ``highwater changefeed query`` reports. The list also shows its sources, output topic and
    rows/s as the server samples it. (This holds what test_metrics' lagging test held: the
    metric, the log line once, the warning naming the partition and its clearing.)
    """
    short = uuid.uuid4().hex[:6]  # short names: the screenshots are the docs'
    source, changefeed_id = f"shop{short}.orders", f"orders{short}"
    jobs_topic, client = unique_name("jobs"), {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(client, {source: 3})
    spec = GeneratorSpec(
        topic=source, rows=10**6, partitions=3, rate=60, resolved_every=20, stall_partition=1
    )
    feed = Upstream(spec, client)
    state = tmp_path / "state"
    state.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = start_server(kafka_bootstrap, jobs_topic, port, state)
    where = ["--bootstrap-servers", kafka_bootstrap, "--jobs-topic", jobs_topic]
    raw = {
        **config_for(kafka_bootstrap, changefeed_id, source),
        "jobs": {"topic": jobs_topic},
        "lagging_threshold": "8s",
        "stuck_threshold": "8s",
    }
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/console/console.css", timeout=5).close()  # noqa: S310
                break
            except OSError:
                time.sleep(0.5)
        wait = log_in(browser, url)
        browser.find_element(By.CSS_SELECTOR, "#create summary").click()
        browser.find_element(By.ID, "config").send_keys(json.dumps(raw, indent=2))
        browser.find_element(By.CSS_SELECTOR, "#new button").click()
        assert said(browser, "Create: ") == f"Create: {changefeed_id} is running now."

        def shown() -> dict[str, str]:
            row: dict[str, str] = rows(browser).get(changefeed_id, {})
            assert row.get("state") != "failed", row  # said at once, not after a timeout
            return row

        slow = WebDriverWait(browser, 240, poll_frequency=1)
        slow.until(lambda _: shown().get("state") == "running")
        held = f"{source}/1"
        slow.until(lambda _: shown().get("warnings", "").startswith("stuck lagging (1)\n"))
        row = shown()
        lines = row["warnings"].splitlines()
        assert lines[1].startswith("stuck: the high-water 0.0000000000 has not moved for ")
        assert lines[1].endswith(f"(stuck_threshold 8s); held back by source partition {held}")
        assert [w for w in lines if " is lagging" in w] == [lines[-1]]
        assert lines[-1].startswith(f"source partition {held} is lagging: ")
        assert lines[-1].endswith("(lagging_threshold 8s); it holds the high-water back")
        assert (row["sources"], row["outputs"]) == (source, f"{changefeed_id}.t")
        slow.until(lambda _: shown().get("rate", "0") not in {"", "0"})  # rows/s, sampled
        shoot(browser, screenshots, "list-live")

        status = Changefeeds(OperatorContext(client, jobs_topic=jobs_topic)).get(changefeed_id)
        assert status.status is not None
        assert status.status.metrics_url is not None
        metrics = scrape(status.status.metrics_url)
        assert metrics[("highwater_stuck", ())] == 1
        assert metrics[("highwater_lagging_partitions", ())] == 1
        logged = "".join(p.read_text(errors="replace") for p in state.rglob("*.log"))
        assert logged.count("stuck: the high-water 0.0000000000") == 1, logged[-3000:]
        assert logged.count(f"source partition {held} is lagging") == 1

        browser.find_element(By.LINK_TEXT, changefeed_id).click()
        wait.until(lambda d: len(d.execute_script(_PARTITIONS)) == 3)
        partitions = browser.execute_script(_PARTITIONS)
        assert partitions[held][1] == "holds the high-water back; lagging"
        assert all(int(partitions[f"{source}/{p}"][0]) > 0 for p in range(3))  # next offsets
        shoot(browser, screenshots, "changefeed-live")
        browser.find_element(By.LINK_TEXT, "← every changefeed").click()

        feed.stop()  # upstream mended: every partition gets markers again, and both clear
        feed = Upstream(replace(spec, stall_partition=None, first_order_id=10**7), client)
        slow.until(lambda _: not _lag_said(shown().get("warnings", "stuck")))
        metrics = scrape(status.status.metrics_url)
        assert (
            metrics[("highwater_stuck", ())],
            metrics[("highwater_lagging_partitions", ())],
        ) == (0, 0)

        press(browser, changefeed_id, "Pause")
        slow.until(lambda _: cli_state(capsys, changefeed_id, *where) == "paused")
        wait.until(lambda _: shown().get("state") == "paused")
        press(browser, changefeed_id, "Resume")  # asked for; its new run's start is the
        # lifecycle test's (test_lifecycle.py), ~25 s of spark-submit not waited for here
        slow.until(lambda _: cli_state(capsys, changefeed_id, *where, field="desired") == "running")
    finally:
        feed.stop()
        server.send_signal(signal.SIGTERM)  # its run finishes its batch and stops
        server.wait(180)


def _lag_said(warnings: str) -> bool:
    """Whether a row's warnings say stuck or lagging (its badges or a line)."""
    lines = warnings.splitlines()
    return any(line.startswith(("stuck", "lagging")) or " is lagging: " in line for line in lines)


class Upstream:
    """The generator writing ``spec`` at its rate on a thread of its own, until stopped."""

    def __init__(self, spec: GeneratorSpec, client: dict[str, str]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(spec, client), daemon=True)
        self._thread.start()

    def _run(self, spec: GeneratorSpec, client: dict[str, str]) -> None:
        with contextlib.suppress(InterruptedError):
            write(spec, client, sleep=self._pace)

    def _pace(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise InterruptedError  # stopped: the generator ends here

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
