"""The dashboard page in a real headless Chromium, driven by Selenium through its `data-testid`
hooks, against `BotApp` serving the dashboard on its HTTP server (as `switchboard run` does, on
127.0.0.1 and a free port) with the scripted fake agent (one server and one browser for the module, each test signed in as its own person so their
conversations never meet).

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them when missing). Without
them these tests FAIL, saying how to install them: a missing browser must not pass as skips.
Each test keeps a screenshot of each step under its tmp_path; a failing test's folder is printed."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from bot.access import AccessPolicy
from bot.app import BotApp
from bot.store import open_store
from surfaces.base import Choice, ConversationKey, OutgoingFile
from surfaces.dashboard.adapter import DashboardSurface
from surfaces.dashboard.auth import COOKIE, digest_of
from tests.conftest import FakeAgent, script
from tests.engine_helpers import engine_settings
from tests.test_issue24_dashboard import FORM

INSTALL = "apt-get install -y --no-install-recommends chromium chromium-driver"
USERS = ["refused", "stream", "tabs", "approve", "refuse", "xss", "reload", "keys", "phone", "csrf"]
USERS += ["worker"]  # whose turn the operations view's test stops
USERS += ["presser"]  # who presses Stop slowly while the reply streams fast
USERS += ["links"]  # who is shown link buttons
USERS += ["asked"]  # whom the agent asks a question
USERS += ["files"]  # who is sent a file
ADMIN = "operator"
TOKENS = {user: f"{user}-secret-token" for user in [*USERS, ADMIN]}
ACCESS: dict[str, Any] = {
    "enabled": True,
    "tokens": {user: digest_of(token) for user, token in TOKENS.items()},
    "allowed_users": USERS,
    "admins": [ADMIN],
}
WAIT = 15.0  # the longest any one condition is waited for


# ---- the server and the browser ----------------------------------------------------------------
class Served:
    def __init__(self, url: str, agent: FakeAgent, surface: DashboardSurface) -> None:
        self.url = url
        self.agent = agent
        self.surface = surface  # what the bot speaks to, called on the server's loop (`portal`)
        self.portal: BlockingPortal | None = None
        self.host, port = url.removeprefix("http://").rstrip("/").split(":")
        self.port = int(port)


@asynccontextmanager
async def _serving(folder: Path) -> AsyncIterator[Served]:
    """`BotApp` serving the dashboard on the HTTP server of `switchboard run` (a free port)."""
    state = folder / "agent-state"
    state.mkdir()
    agent = FakeAgent(log_path=folder / "agent-log.jsonl", state_dir=state)
    settings = engine_settings(folder, agent, dashboard=ACCESS, http={"port": 0})
    surface = DashboardSurface(settings.dashboard, min_edit_interval=0.01)
    store = open_store(settings.state)
    app = BotApp(settings, store, AccessPolicy.from_settings(settings))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await app.serve([surface], stop, http=True, task_status=task_status)

            await tg.start(serve)
            try:
                assert app.http is not None and app.http.port
                yield Served(f"http://127.0.0.1:{app.http.port}", agent, surface)
            finally:
                stop.set()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The dashboard with the bot and the fake agent, on an event loop of its own thread."""
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith(("SWITCHBOARD_", "FAKE_AGENT"))]:
            env.delenv(name)
        folder = tmp_path_factory.mktemp("dashboard-browser")
        with start_blocking_portal("asyncio") as portal:
            with portal.wrap_async_context_manager(_serving(folder)) as server:
                server.portal = portal
                yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(
            name for name, path in [("chromium", chromium), ("chromedriver", driver)] if not path
        )
        pytest.fail(f"{missing} not found: the browser tests need them; install with: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    chrome.set_page_load_timeout(WAIT)
    try:
        yield chrome
    finally:
        chrome.quit()


# ---- the page, as a person uses it -------------------------------------------------------------
def hook(name: str) -> str:
    return f'[data-testid="{name}"]'


SHOWN_MESSAGES = f".pane:not([hidden]) {hook('message')}"


class Page:
    """One person's view of the page; `shot(step)` keeps a screenshot of each step."""

    def __init__(self, driver: WebDriver, served: Served, screens: Path) -> None:
        self.driver = driver
        self.served = served
        self.screens = screens
        self.steps = 0

    def shot(self, step: str) -> None:
        self.screens.mkdir(exist_ok=True)
        self.steps += 1
        self.driver.save_screenshot(str(self.screens / f"{self.steps:02d}-{step}.png"))

    def until(self, condition: Callable[[WebDriver], Any], what: str) -> Any:
        try:
            return WebDriverWait(self.driver, WAIT, poll_frequency=0.05).until(condition)
        except TimeoutException:
            raise AssertionError(f"timed out after {WAIT:g} s waiting for {what}") from None

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def one(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def js(self, code: str) -> Any:
        return self.driver.execute_script(code)

    def open(self) -> None:
        self.driver.delete_all_cookies()
        self.driver.get(self.served.url + "/")
        self.until(lambda d: self.one(hook("token")).is_displayed(), "the sign-in form")

    def sign_in(self, user: str) -> None:
        self.open()
        self.one(hook("token")).send_keys(TOKENS[user])
        self.one(hook("sign-in")).click()
        self.until(lambda d: self.one(hook("composer")).is_displayed(), "the chat")
        self.until(lambda d: self.all(hook("tab")), "the first tab")

    def send(self, text: str) -> None:
        composer = self.one(hook("composer"))
        composer.clear()
        composer.send_keys(text)
        self.one(hook("send")).click()

    def messages(self, role: str = "") -> list[WebElement]:
        shown = self.all(SHOWN_MESSAGES)
        return [m for m in shown if not role or m.get_attribute("data-role") == role]

    def texts(self, role: str = "") -> list[str]:
        return [m.text for m in self.messages(role)]

    def agent_says(self, words: str) -> WebElement:
        """The first shown agent message containing `words`, once there is one."""
        return self.until(
            lambda d: next((m for m in self.messages("agent") if words in m.text), None),
            f"an agent message saying {words!r}",
        )

    def cookie(self) -> str:
        found = self.driver.get_cookie(COOKIE)
        assert found is not None, "no session cookie"
        return str(found["value"])


@pytest.fixture
def page(
    served: Served, browser: WebDriver, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Page]:
    failed_before = request.session.testsfailed
    opened = Page(browser, served, tmp_path / "screens")
    yield opened
    browser.set_window_size(1280, 900)
    if request.session.testsfailed > failed_before:
        try:
            opened.shot("failed")
        finally:
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\nscreenshots of {request.node.name}: {opened.screens}")


# ---- sign-in -----------------------------------------------------------------------------------
def test_a_wrong_token_is_refused_on_the_page_and_the_right_one_signs_in(page: Page) -> None:
    page.open()
    page.shot("signed-out")
    page.one(hook("token")).send_keys("not-the-token")
    page.one(hook("sign-in")).click()
    page.until(
        lambda d: page.one("#sign-in-error").text == "That access token is not valid.",
        "the refusal sentence",
    )
    page.shot("refused")
    assert not page.one(hook("composer")).is_displayed()
    assert page.driver.get_cookie(COOKIE) is None
    token = page.one(hook("token"))
    token.clear()
    token.send_keys(TOKENS["refused"])
    page.one(hook("sign-in")).click()
    page.until(lambda d: page.one(hook("composer")).is_displayed(), "the chat")
    page.until(lambda d: page.all(hook("tab")), "the first tab")
    page.shot("signed-in")
    assert page.one("#sign-in-error").is_displayed() is False
    assert page.js("return document.cookie") == ""  # HttpOnly: no script can read the session


# ---- a conversation ----------------------------------------------------------------------------
def test_a_reply_is_visible_as_it_streams_and_ends_rendered(page: Page) -> None:
    page.sign_in("stream")
    steps = [{"chunk": "Hello"}]
    for word in (" there", " you", " **reader**"):
        steps += [{"sleep": 0.5}, {"chunk": word}]
    page.send(script(*steps))
    first = page.agent_says("Hello").find_element(By.CSS_SELECTOR, ".body")
    seen = [first.text]
    while "reader" not in seen[-1] or "**" in seen[-1]:
        seen.append(page.until(lambda d: first.text if first.text != seen[-1] else None, "more"))
        page.shot(f"streamed-{len(seen)}")
    assert len(seen) >= 3, seen  # several observations of a growing text
    for earlier, later in itertools.pairwise(seen[:-1]):  # the last is rendered
        assert later.startswith(earlier), seen
    assert first.find_element(By.TAG_NAME, "strong").text == "reader"  # rendered at the end


def test_a_new_tab_is_a_new_agent_session(page: Page) -> None:
    page.sign_in("tabs")
    page.send("one")
    page.agent_says("Echo: one")
    sessions_before = len(page.served.agent.frames_in("session/new"))
    page.one(hook("new-tab")).click()
    page.until(lambda d: len(page.all(hook("tab"))) == 2, "a second tab")
    second = page.all(hook("tab"))[1]
    page.until(lambda d: second.get_attribute("aria-selected") == "true", "the new tab selected")
    assert page.messages() == []  # a new conversation starts empty
    page.send("two")
    page.agent_says("Echo: two")
    page.shot("second-tab")
    assert not any("one" in text for text in page.texts())
    page.all(hook("tab"))[0].click()
    page.agent_says("Echo: one")
    assert not any("two" in text for text in page.texts())
    page.shot("first-tab")
    prompts = page.served.agent.frames_in("session/prompt")
    assert len(page.served.agent.frames_in("session/new")) == sessions_before + 1
    ones = {p["params"]["sessionId"] for p in prompts if p["params"]["prompt"][0]["text"] == "one"}
    twos = {p["params"]["sessionId"] for p in prompts if p["params"]["prompt"][0]["text"] == "two"}
    assert ones and twos and not ones & twos


def test_an_approval_is_pressed(page: Page) -> None:
    page.sign_in("approve")
    page.send("SCN_PERMISSION")
    options = page.until(lambda d: page.all(hook("approval-option")), "the approval's buttons")
    page.shot("asked")
    assert any("echo hi" in text for text in page.texts("notice"))
    next(button for button in options if button.text == "Yes").click()
    page.agent_says("permission:allow_once")
    page.until(lambda d: not page.all(hook("approval-option")), "the buttons withdrawn")
    page.shot("answered")


def test_a_questions_choice_is_buttons_pressed_and_a_text_field_the_next_message(
    page: Page,
) -> None:
    page.sign_in("asked")
    page.send(script(FORM))
    page.until(lambda d: any("Question 1 of 2" in t for t in page.texts("notice")), "the card")
    options = page.until(lambda d: page.all(hook("approval-option")), "the question's buttons")
    page.shot("asked")
    assert [button.text for button in options] == ["PostgreSQL", "SQLite", "Decline", "Cancel"]
    next(button for button in options if button.text == "SQLite").click()
    page.until(lambda d: any("Question 2 of 2" in t for t in page.texts("notice")), "card two")
    page.until(
        lambda d: [b.text for b in page.all(hook("approval-option"))] == ["Decline", "Cancel"],
        "the first card's buttons withdrawn",
    )
    page.send("It is one file")
    said = page.agent_says("reply:").text
    page.shot("answered")
    assert '"action":"accept"' in said and '"content":{"db":"lite","why":"It is one file"}' in said


def test_a_file_the_bot_sends_is_a_link_that_downloads_it(page: Page) -> None:
    page.sign_in("files")
    tab = page.one(hook("tab")).get_attribute("data-tab")
    key = ConversationKey("dashboard", "files", str(tab))
    patch = OutgoingFile(
        "a.py.diff", b"--- a/a.py\n+++ b/a.py\n", "text/x-diff", "a.py: +1 \u22121"
    )
    served = page.served
    assert served.portal is not None
    served.portal.call(partial(served.surface.send_file, key, patch))
    link = page.agent_says("a.py.diff").find_element(By.CSS_SELECTOR, "a[download]")
    page.shot("file")
    assert link.get_attribute("download") == "a.py.diff"
    fetched = page.driver.execute_async_script(
        "const done = arguments[1];"
        "fetch(arguments[0]).then(r => r.text()).then(done, e => done(String(e)));",
        link.get_attribute("href"),
    )
    assert fetched == patch.data.decode()


def test_a_link_button_opens_its_page_in_a_new_tab_and_a_bad_one_never_shows(page: Page) -> None:
    page.sign_in("links")
    tab = page.one(hook("tab")).get_attribute("data-tab")
    key = ConversationKey("dashboard", "links", str(tab))
    docs = Choice("", "Open the docs", url="https://example.com/docs?page=1")
    evil = Choice("", "Evil", url="javascript:alert(document.cookie)")
    served = page.served
    assert served.portal is not None
    served.portal.call(partial(served.surface.send, key, "Read this first.", buttons=[docs, evil]))
    (link,) = page.until(lambda d: page.all(hook("link-button")), "the link button")
    page.shot("link")
    assert link.tag_name == "a" and link.text == "Open the docs"
    assert link.get_attribute("href") == "https://example.com/docs?page=1"
    assert link.get_attribute("target") == "_blank"
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert link.value_of_css_property("text-decoration-line") == "none"  # styled as a button
    hrefs = [a.get_attribute("href") or "" for a in page.all("a")]
    assert not any(href.startswith("javascript") for href in hrefs)
    assert "Evil" not in page.agent_says("Read this first.").text


def test_a_refused_turn_shows_one_refusal_card(page: Page) -> None:
    page.sign_in("refuse")
    page.send("SCN_REFUSAL_BARE")
    page.until(lambda d: page.all(f".pane:not([hidden]) {hook('refusal')}"), "the refusal card")
    page.shot("refused")
    assert len(page.all(hook("refusal"))) == 1


def test_agent_script_and_img_onerror_show_as_text_and_never_run(page: Page) -> None:
    page.sign_in("xss")
    evil = (
        "<script>window.pwned = 'script'; alert(1)</script>"
        "<img src=x onerror=\"window.pwned = 'img'; alert(2)\">"
    )
    page.send(script({"chunk": evil}))
    reply = page.agent_says("<script>")
    page.shot("shown")
    assert "<img src=x onerror=" in reply.text
    assert reply.find_elements(By.TAG_NAME, "img") == []
    assert reply.find_elements(By.TAG_NAME, "script") == []
    with pytest.raises(NoAlertPresentException):
        page.driver.switch_to.alert.text  # noqa: B018  # reading it is the check
    assert page.js("return typeof window.pwned") == "undefined"


def test_a_reload_mid_stream_resumes_the_text_and_stop_ends_the_turn(page: Page) -> None:
    page.sign_in("reload")
    cancels_before = len(page.served.agent.frames_in("session/cancel"))
    page.send(
        script({"chunk": "first part"}, {"sleep": 1.5}, {"chunk": " and the rest"}, {"hang": True})
    )
    page.agent_says("first part")
    page.shot("streaming")
    page.driver.refresh()
    page.until(lambda d: page.one(hook("composer")).is_displayed(), "the chat after the reload")
    page.agent_says("first part")
    page.agent_says("first part and the rest")
    page.shot("resumed")
    stop = page.until(lambda d: page.all(hook("stop")), "the Stop button")[0]
    stop.click()
    page.agent_says("The turn was stopped.")
    page.shot("stopped")
    page.until(
        lambda d: len(page.served.agent.frames_in("session/cancel")) == cancels_before + 1,
        "the agent told to cancel",
    )


def test_a_slow_stop_press_lands_while_the_reply_streams_fast(page: Page) -> None:
    """A click is a mouse down and a mouse up on the same element: while the text streams (a
    frame every few milliseconds) the Stop button must stay the same element, or the press is
    lost."""
    page.sign_in("presser")
    cancels_before = len(page.served.agent.frames_in("session/cancel"))
    steps: list[dict[str, Any]] = []
    for number in range(400):  # 8 s of a chunk every 20 ms, then a hang until stopped
        steps += [{"chunk": f" w{number}"}, {"sleep": 0.02}]
    # set, not typed: typing a script this long would take the browser longer than it streams
    page.driver.execute_script(
        "arguments[0].value = arguments[1]",
        page.one(hook("composer")),
        script(*steps, {"hang": True}),
    )
    page.one(hook("send")).click()
    reply = page.agent_says("w1")
    stop = page.until(lambda d: page.all(hook("stop")), "the Stop button")[0]
    frames_before = reply.text
    ActionChains(page.driver).move_to_element(stop).click_and_hold().pause(0.6).perform()
    page.until(lambda d: reply.text != frames_before, "the text streaming on under the press")
    ActionChains(page.driver).release().perform()
    page.agent_says("The turn was stopped.")
    page.shot("stopped")
    page.until(
        lambda d: len(page.served.agent.frames_in("session/cancel")) == cancels_before + 1,
        "the agent told to cancel",
    )


# ---- keyboard and phone ------------------------------------------------------------------------
def test_the_page_works_by_keyboard(page: Page) -> None:
    page.open()
    assert page.js("return document.activeElement.dataset.testid") == "token"
    page.driver.switch_to.active_element.send_keys(TOKENS["keys"], Keys.ENTER)
    page.until(lambda d: page.one(hook("composer")).is_displayed(), "the chat")
    page.until(
        lambda d: page.js("return document.activeElement.dataset.testid") == "composer",
        "the composer focused",
    )
    page.driver.switch_to.active_element.send_keys("typed", Keys.ENTER)
    page.agent_says("Echo: typed")
    assert page.one(hook("composer")).get_attribute("value") == ""
    page.shot("sent-by-enter")
    composer = page.one(hook("composer"))
    composer.send_keys("two lines", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "second")
    assert page.one(hook("composer")).get_attribute("value") == "two lines\nsecond"
    order = []
    for _ in range(3):
        page.driver.switch_to.active_element.send_keys(Keys.TAB)
        order.append(page.js("return document.activeElement.dataset.testid || ''"))
    assert order[0] == "send"  # then on past the composer, not back into the page
    page.one(hook("composer")).click()
    page.driver.switch_to.active_element.send_keys(Keys.SHIFT, Keys.TAB)
    assert page.js("return document.activeElement.id") == "commands"


def test_the_page_fits_a_phone(page: Page) -> None:
    page.driver.set_window_size(390, 844)
    page.sign_in("phone")
    page.send(
        "a-very-long-word-" * 12 + "\n\n```\n" + "code " * 60 + "\n```\n\n"
        "| a | table | with | many | columns | that | is | wide |\n|---|---|---|---|---|---|---|---|\n"
        "| 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 |"
    )
    page.agent_says("Echo: a-very-long-word")
    page.shot("reply")
    fits(page)
    page.one(hook("new-tab")).click()
    page.until(lambda d: len(page.all(hook("tab"))) == 2, "a second tab")
    page.shot("new-tab")
    fits(page)


def fits(page: Page) -> None:
    """Nothing on the page is wider than the window (no sideways scrolling)."""
    width = page.js("return [document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.js(
        "return [...document.querySelectorAll('body *')]"
        ".filter((e) => e.getBoundingClientRect().right > window.innerWidth)"
        ".map((e) => `${e.tagName}#${e.id}.${e.className}`)"
    )
    assert width[0] <= width[1], f"wider than the window {width}: {wide}"


# ---- CSRF and Origin, over plain HTTP ----------------------------------------------------------
def _http(
    served: Served, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> int:
    connection = http.client.HTTPConnection(served.host, served.port, timeout=WAIT)
    try:
        connection.request(method, path, body=body or None, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_csrf_and_origin_checks_refuse_what_the_page_did_not_send(page: Page) -> None:
    page.sign_in("csrf")
    served, origin = page.served, page.served.url
    cookie = f"{COOKIE}={page.cookie()}"
    csrf = page.js("return fetch('/api/session').then((r) => r.json()).then((b) => b.csrf)")
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Cookie": cookie,
    }
    sign_in = json.dumps({"token": TOKENS["csrf"]}).encode()
    as_json = {"Content-Type": "application/json"}
    assert (
        _http(served, "POST", "/api/sign-in", {**as_json, "Origin": "http://evil.example"}, sign_in)
        == 403
    )
    assert (
        _http(served, "GET", f"/ws?csrf={csrf}", {**upgrade, "Origin": "http://evil.example"})
        == 403
    )
    assert _http(served, "GET", f"/ws?csrf={csrf}", upgrade) == 403  # no Origin
    assert _http(served, "GET", "/ws?csrf=wrong", {**upgrade, "Origin": origin}) == 403
    assert _http(served, "GET", f"/ws?csrf={csrf}", {**upgrade, "Origin": origin}) == 101
    sign_out = {"Cookie": cookie, "Origin": origin}
    assert _http(served, "POST", "/api/sign-out", sign_out) == 403  # no CSRF token
    assert (
        _http(
            served,
            "POST",
            "/api/sign-out",
            {**sign_out, "Origin": "http://evil.example", "X-CSRF-Token": csrf},
        )
        == 403
    )
    page.driver.refresh()
    page.until(lambda d: page.one(hook("composer")).is_displayed(), "still signed in")


# ---- the operations view (admins) --------------------------------------------------------------
def test_the_operations_view_lists_the_running_turn_and_stops_it(page: Page) -> None:
    page.sign_in("worker")
    assert not page.one(hook("ops-open")).is_displayed()  # not an admin: no link
    cancels_before = len(page.served.agent.frames_in("session/cancel"))
    page.send(script({"chunk": "long job"}, {"hang": True}))
    page.agent_says("long job")
    page.sign_in(ADMIN)  # the worker's turn goes on on the server
    page.one(hook("ops-open")).click()
    turn = page.until(
        lambda d: next((row for row in page.all(hook("ops-turn")) if "worker" in row.text), None),
        "the worker's running turn listed",
    )
    assert "answering for" in turn.text
    page.until(lambda d: page.all(hook("ops-agent")), "the agent's process listed")
    assert "pid" in page.all(hook("ops-agent"))[0].text
    page.shot("operations")
    turn.find_element(By.CSS_SELECTOR, hook("ops-stop-turn")).click()
    page.until(lambda d: "was stopped" in page.one("#ops-said").text, "the stop confirmed")
    page.until(
        lambda d: not any("worker" in row.text for row in page.all(hook("ops-turn"))),
        "the turn gone from the view",
    )
    page.until(
        lambda d: len(page.served.agent.frames_in("session/cancel")) == cancels_before + 1,
        "the agent told to cancel",
    )
    page.until(
        lambda d: any("stop-turn" in row.text for row in page.all(hook("ops-audit"))),
        "the stop in the audit log",
    )
    page.shot("stopped")
