"""The dashboard surface over real HTTP: its routes mounted on a fresh aiohttp Application served
on 127.0.0.1 (aiohttp's test server), a real WebSocket client, and, end to end, `BotApp` with the
scripted fake agent. No browser: what the page would show is what the frames carry."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from acp import RefusalInfo
from bot.notices import refusal_card_text
from config.settings import DashboardSettings
from surfaces.dashboard.adapter import DashboardSurface
from surfaces.dashboard.auth import digest_of
from surfaces.dashboard.convert import REFUSAL_LEAD, render
from tests.conftest import FakeAgent, script
from tests.engine_helpers import engine_settings, running_app

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "root": "root-secret-token"}
ACCESS: dict[str, Any] = {
    "enabled": True,
    "tokens": {user: digest_of(token) for user, token in TOKENS.items()},
    "allowed_users": ["alice", "bob"],
    "admins": ["root"],
}
Frame = dict[str, Any]


def dashboard(**extra: Any) -> DashboardSurface:
    return DashboardSurface(DashboardSettings(**{**ACCESS, **extra}), min_edit_interval=0.01)


@asynccontextmanager
async def served(surface: DashboardSurface) -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    surface.add_routes(app)
    async with TestServer(app, host="127.0.0.1", port=0) as server:
        async with TestClient(server) as client:
            yield client


def origin(client: TestClient[Any, Any]) -> dict[str, str]:
    return {"Origin": str(client.make_url("/")).rstrip("/")}


async def sign_in(
    client: TestClient[Any, Any], token: str, **headers: str
) -> aiohttp.ClientResponse:
    return await client.post(
        "/api/sign-in", json={"token": token}, headers={**origin(client), **headers}
    )


async def signed_in(client: TestClient[Any, Any], user: str) -> str:
    """Sign `user` in on this client (its cookie jar keeps the session); the CSRF token."""
    answer = await sign_in(client, TOKENS[user])
    assert answer.status == 200
    body = await answer.json()
    assert body["user"] == user
    return str(body["csrf"])


class Page:
    """What one browser page holds: the frames its WebSocket received."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.frames: list[Frame] = []

    async def until(self, predicate: Callable[[Frame], bool], what: str) -> Frame:
        for frame in self.frames:
            if predicate(frame):
                return frame
        with anyio.fail_after(15):
            while True:
                frame = await self.socket.receive_json()
                self.frames.append(frame)
                if predicate(frame):
                    return frame
        raise AssertionError(what)  # pragma: no cover

    def tabs(self) -> list[str]:
        return [f["tab"] for f in self.frames if f["type"] == "tab"]

    def messages(self, tab: str = "") -> list[Frame]:
        return [f for f in self.frames if f["type"] == "message" and (not tab or f["tab"] == tab)]

    async def send(self, tab: str, text: str) -> None:
        await self.socket.send_json({"type": "send", "tab": tab, "text": text})


@asynccontextmanager
async def page(client: TestClient[Any, Any], user: str) -> AsyncIterator[Page]:
    """`user`'s page in a browser of its own (its own cookie: a sign-in on `client`, which ends
    the session `client`'s cookie held, leaves this page open)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        answer = await browser.post(
            client.make_url("/api/sign-in"), json={"token": TOKENS[user]}, headers=origin(client)
        )
        assert answer.status == 200
        csrf = (await answer.json())["csrf"]
        url = client.make_url(f"/ws?csrf={csrf}")
        async with browser.ws_connect(url, headers=origin(client)) as socket:
            opened = Page(socket)
            await opened.until(lambda f: f["type"] == "tab", "the first tab")
            yield opened


def agent_html(frame: Frame) -> bool:
    return frame["type"] == "message" and frame["role"] == "agent"


def final(frame: Frame) -> bool:
    """An agent message in its final, rendered form."""
    return agent_html(frame) and frame["final"]


# ---- sign-in ----------------------------------------------------------------------------------
async def test_wrong_tokens_are_refused_logged_without_the_token_and_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with served(dashboard()) as client:
        for _ in range(5):
            answer = await sign_in(client, "guessed-token-value")
            assert answer.status == 401
            assert (await answer.json())["error"] == "That access token is not valid."
            assert "Set-Cookie" not in answer.headers
        answer = await sign_in(client, "another-guess")  # this address is held now
        assert answer.status == 429
        assert (await answer.json())["error"].startswith("Too many wrong access tokens")
        answer = await sign_in(client, TOKENS["alice"])  # the right token: alice did not fail
        assert answer.status == 200
    assert "guessed-token-value" not in caplog.text and TOKENS["alice"] not in caplog.text
    assert caplog.text.count("dashboard sign-in from 127.0.0.1 refused: wrong token") == 5


async def test_a_token_of_someone_on_no_access_list_signs_nobody_in() -> None:
    surface = dashboard(tokens={**ACCESS["tokens"], "mallory": digest_of("mallory-token")})
    async with served(surface) as client:
        assert (await sign_in(client, "mallory-token")).status == 401
        assert (await client.get("/api/session")).status == 401


async def test_the_right_token_opens_a_session_in_a_strict_http_only_cookie() -> None:
    async with served(dashboard()) as client:
        answer = await sign_in(client, TOKENS["alice"])
        assert answer.status == 200
        cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain http here
        assert TOKENS["alice"] not in cookie
        session = await client.get("/api/session")
        assert (await session.json())["user"] == "alice"
        tls_origin = origin(client)["Origin"].replace("http://", "https://")
        behind_tls = await client.post(
            "/api/sign-in",
            json={"token": TOKENS["bob"]},
            headers={"Origin": tls_origin, "X-Forwarded-Proto": "https"},
        )
        assert "Secure" in behind_tls.headers["Set-Cookie"]


# ---- CSRF and Origin --------------------------------------------------------------------------
async def test_state_changes_without_the_csrf_token_or_from_another_origin_are_refused() -> None:
    async with served(dashboard()) as client:
        foreign = {"Origin": "http://evil.example"}
        answer = await client.post("/api/sign-in", json={"token": TOKENS["alice"]}, headers=foreign)
        assert answer.status == 403
        csrf = await signed_in(client, "alice")
        for url, headers in [
            (f"/ws?csrf={csrf}", foreign),  # cross-site WebSocket hijacking
            (f"/ws?csrf={csrf}", {}),  # no Origin at all
            ("/ws?csrf=wrong", origin(client)),
            ("/ws", origin(client)),
        ]:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(url, headers=headers)
            assert refused.value.status == 403, url
        sign_out = await client.post("/api/sign-out", headers=origin(client))
        assert sign_out.status == 403
        sign_out = await client.post(
            "/api/sign-out", headers={**origin(client), "X-CSRF-Token": csrf}
        )
        assert sign_out.status == 200
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(f"/ws?csrf={csrf}", headers=origin(client))
        assert refused.value.status == 401  # signed out: the session is gone


# ---- the page ---------------------------------------------------------------------------------
async def test_the_page_has_a_strict_csp_no_inline_script_and_every_test_hook() -> None:
    async with served(dashboard()) as client:
        answer = await client.get("/")
        assert answer.status == 200
        csp = answer.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp
        text = await answer.text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text)  # no inline script
        assert not re.search(r"\son[a-z]+=", text)  # no inline handlers
        assert not re.search(r"<style|\sstyle=", text)
        hooks = set(re.findall(r'data-testid="([a-z-]+)"', text))
        expected = {"token", "sign-in", "composer", "send", "new-tab", "tab", "message"}
        assert expected | {"approval-option", "stop"} <= hooks
        for asset in ("/static/app.js", "/static/app.css"):
            served_asset = await client.get(asset)
            assert served_asset.status == 200
            assert served_asset.headers["Content-Security-Policy"] == csp
        assert (await client.get("/static/index.html")).status == 404
        assert (await client.get("/static/..%2Fadapter.py")).status == 404


def test_agent_markup_and_script_arrive_as_escaped_text() -> None:
    shown = render(
        "Hi <script>alert(1)</script> <img src=x onerror=alert(1)>\n\n"
        "[click](javascript:alert(1)) <a href='x' onclick='y'>a</a>\n\n```\n<b>code</b>\n```"
    )
    assert "<script" not in shown and "<img" not in shown and "<a href='x'" not in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown
    assert 'href="javascript:' not in shown
    assert 'data-testid="copy"' in shown and "&lt;b&gt;code&lt;/b&gt;" in shown


def test_the_refusal_card_is_recognised_by_the_lead_line_the_bot_writes() -> None:
    card = refusal_card_text(RefusalInfo(category="CYBER", explanation="No <b>."), "")
    assert card.splitlines()[0] == REFUSAL_LEAD
    shown = render("Some text first.\n\n" + card)
    assert shown.count('data-testid="refusal"') == 1
    assert "<p>Category: CYBER</p>" in shown and "No &lt;b&gt;." in shown
    assert "<p>Some text first.</p>" in shown


# ---- end to end with the bot and the fake agent -------------------------------------------------
@asynccontextmanager
async def chatting(
    tmp_path: Path, fake_agent: FakeAgent
) -> AsyncIterator[tuple[DashboardSurface, TestClient[Any, Any]]]:
    settings = engine_settings(tmp_path, fake_agent, dashboard=ACCESS)
    surface = DashboardSurface(settings.dashboard, min_edit_interval=0.01)
    async with running_app(settings, surface), served(surface) as client:  # type: ignore[arg-type]  # any Surface serves
        yield surface, client


async def test_a_reply_streams_as_it_grows_and_ends_rendered(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    prompt = script(
        {"chunk": "Hello "}, {"sleep": 0.3}, {"chunk": "**world**"}, {"sleep": 0.3}, {"chunk": "!"}
    )
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, prompt)
        user = await alice.until(lambda f: f["type"] == "message", "the person's own message")
        assert user["role"] == "user" and "SCRIPT:" in user["html"]
        last = await alice.until(final, "the final")
        versions = [f["html"] for f in alice.messages(tab) if f["id"] == last["id"]]
        assert len(set(versions)) >= 3  # several frames as the text grew
        assert "Hello" in versions[0] and "world" not in versions[0]
        assert not any(f["final"] for f in alice.messages(tab)[1:-1])  # live until the end
        assert "<p>Hello <strong>world</strong>!</p>" in last["html"]


async def test_a_new_tab_is_a_new_agent_session(tmp_path: Path, fake_agent: FakeAgent) -> None:
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        first = alice.tabs()[0]
        await alice.send(first, "one")
        await alice.until(lambda f: agent_html(f) and "Echo: one" in f["html"], "reply one")
        await alice.socket.send_json({"type": "new_tab"})
        created = await alice.until(lambda f: f["type"] == "tab" and f.get("created"), "new tab")
        assert created["tab"] != first
        await alice.send(created["tab"], "two")
        reply = await alice.until(lambda f: agent_html(f) and "Echo: two" in f["html"], "two")
        assert reply["tab"] == created["tab"]
    assert len(fake_agent.frames_in("session/new")) == 2


async def test_an_approval_is_pressed_over_the_websocket(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, "SCN_PERMISSION")
        choice = await alice.until(lambda f: f.get("kind") == "choice", "the approval")
        assert choice["role"] == "notice" and "Run echo hi" in choice["html"]
        yes = next(b for b in choice["buttons"] if b["label"] == "Yes")
        await alice.socket.send_json({"type": "press", "tab": tab, "token": yes["token"]})
        await alice.until(
            lambda f: agent_html(f) and "permission:allow_once" in f["html"], "the answer"
        )
        closed = [f for f in alice.messages(tab) if f["id"] == choice["id"]][-1]
        assert closed["buttons"] == []  # withdrawn once answered


async def test_a_refused_turn_ends_in_one_refusal_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        await alice.send(alice.tabs()[0], "SCN_REFUSAL_BARE")
        card = await alice.until(final, "the final")
        assert card["html"].count('data-testid="refusal"') == 1
        assert REFUSAL_LEAD in card["html"]


async def test_an_agent_reply_with_script_and_img_onerror_arrives_as_text(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    evil = "<script>alert(1)</script><img src=x onerror=alert(1)>"
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        await alice.send(alice.tabs()[0], script({"chunk": evil}))
        await alice.until(lambda f: final(f) and "alert" in f["html"], "the final")
        for frame in alice.messages():
            assert "<script" not in frame["html"] and "<img" not in frame["html"]
        assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in f["html"] for f in alice.messages())


async def test_a_page_that_reconnects_mid_stream_resumes_the_text_and_can_stop_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    prompt = script({"chunk": "first part of a long answer"}, {"hang": True})
    async with chatting(tmp_path, fake_agent) as (_, client):
        async with page(client, "alice") as before:
            tab = before.tabs()[0]
            await before.send(tab, prompt)
            live = await before.until(
                lambda f: agent_html(f) and "first part" in f["html"], "the stream"
            )
        async with page(client, "alice") as after:  # the page reloaded
            assert after.tabs() == [tab]
            resumed = await after.until(lambda f: f.get("id") == live["id"], "the live message")
            assert "first part of a long answer" in resumed["html"]
            stop = await after.until(
                lambda f: f.get("id") == live["id"] and f.get("buttons"), "the Stop button"
            )
            button = stop["buttons"][0]
            assert button["label"] == "Stop"
            await after.socket.send_json({"type": "press", "tab": tab, "token": button["token"]})
            await after.until(
                lambda f: agent_html(f) and "The turn was stopped." in f["html"], "stopped"
            )
    assert len(fake_agent.frames_in("session/cancel")) == 1


async def test_a_streaming_message_sends_its_buttons_only_when_they_change(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    """The page keeps a message's button elements while a frame carries no "buttons" (a press
    in progress must land on the element it began on), so unchanged buttons are not resent."""
    steps: list[dict[str, Any]] = []
    for number in range(12):
        steps += [{"chunk": f" w{number}"}, {"sleep": 0.05}]
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, script(*steps))
        await alice.until(lambda f: final(f) and "w11" in f["html"], "the final")
        live = [f for f in alice.messages(tab) if agent_html(f)]
        with_buttons = [f.get("buttons") for f in live if "buttons" in f]
        stops = [b for b in with_buttons if b]
        assert stops and all(b[0]["label"] == "Stop" for b in stops)
        assert len(live) > len(with_buttons) + 3, live  # most frames left the buttons alone
        assert with_buttons[-1] == []  # the final takes Stop off
        changes = [a != b for a, b in itertools.pairwise(with_buttons)]
        assert all(changes), with_buttons  # each "buttons" sent is a change


async def test_a_person_sees_only_their_own_conversations_and_admins_see_all(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with chatting(tmp_path, fake_agent) as (_, client):
        bob_client = TestClient(client.server)
        root_client = TestClient(client.server)
        async with bob_client, root_client, page(client, "alice") as alice:
            alice_tab = alice.tabs()[0]
            await alice.send(alice_tab, "private words")
            await alice.until(lambda f: agent_html(f) and "Echo: private words" in f["html"], "")
            async with page(bob_client, "bob") as bob:
                assert alice_tab not in bob.tabs()
                await bob.send(alice_tab, "let me in")
                refused = await bob.until(lambda f: f["type"] == "message", "bob's answer")
                assert "That conversation is not yours." in refused["html"]
                assert not any("private" in f["html"] for f in bob.messages())
            async with page(root_client, "root") as root:
                seen = await root.until(lambda f: f.get("tab") == alice_tab, "alice's tab")
                assert seen["type"] == "tab" and seen["owner"] == "alice"
                await root.until(lambda f: "Echo: private words" in f.get("html", ""), "hers")
    assert fake_agent.prompt_texts() == ["private words"]


# ---- settings and the token command -----------------------------------------------------------
def test_dashboard_token_prints_a_token_whose_digest_signs_that_user_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bot.cli import main
    from surfaces.dashboard.auth import TokenBook

    assert main(["dashboard-token", "alice"]) == 0
    out = capsys.readouterr().out
    token = re.search(r"it is shown only now\): (\S+)", out)
    digest = re.search(r"SHA-256 digest: ([0-9a-f]{64})", out)
    assert token and digest
    assert digest_of(token.group(1)) == digest.group(1)
    assert TokenBook({"alice": digest.group(1)}).user_for(token.group(1)) == "alice"
    assert "SWITCHBOARD_DASHBOARD__TOKENS" in out


def test_a_tokens_setting_that_is_not_digests_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from config import ConfigError, load_settings

    monkeypatch.setenv("SWITCHBOARD_DASHBOARD__TOKENS", '{"alice": "plain-token"}')
    with pytest.raises(ConfigError) as bad:
        load_settings()
    assert "SWITCHBOARD_DASHBOARD__TOKENS" in str(bad.value)
    assert "not a SHA-256 hex digest" in str(bad.value)
    monkeypatch.setenv("SWITCHBOARD_DASHBOARD__TOKENS", '{"alice": "' + "A" * 64 + '"}')
    assert load_settings().dashboard.tokens == {"alice": "a" * 64}


async def test_the_commands_are_in_the_menu_and_work_typed(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        hello = await alice.until(lambda f: f["type"] == "hello", "the hello frame")
        names = {command["name"] for command in hello["commands"]}
        assert {"compact", "stop", "status", "model", "new"} <= names
        await alice.send(alice.tabs()[0], "/status")
        status = await alice.until(agent_html, "the status answer")
        assert "Echo" not in status["html"]  # answered by the bot, not sent to the agent
    assert fake_agent.prompt_texts() == []
