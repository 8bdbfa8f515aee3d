"""The trace viewer in a real headless Chromium: lifelines, arrows, payloads, filters, size."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    allow_permission,
    demo_agent_block,
    prompt_params,
    proxy_block,
    read_jsonl,
    start_session,
)
from playwright.sync_api import Page, sync_playwright

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium")
    assert executable, "Chromium is needed: run tests/install-chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _view(trace: Path) -> Path:
    html = trace.with_suffix(".html")
    done = subprocess.run(
        [sys.executable, "-m", "conductor", "trace", "view", str(trace), "-o", str(html)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "<script src" not in html.read_text()
        and "http" not in html.read_text().split("<script", 1)[0]
    )
    return html


def _open(browser, html: Path) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.route(
        "**/*",
        lambda route: (
            route.abort() if not route.request.url.startswith("file:") else route.continue_()
        ),
    )
    page.goto(html.as_uri())
    return page


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory) -> Path:
    from conftest import Peer

    folder = tmp_path_factory.mktemp("view")
    chain = folder / "chain.toml"
    chain.write_text(
        proxy_block(name="p1") + proxy_block(name="p2") + demo_agent_block(name="agent")
    )
    trace = folder / "trace.jsonl"
    peer = Peer(
        [sys.executable, "-m", "conductor", "--trace", str(trace), "run", str(chain)], cwd=ROOT
    )
    try:
        session = start_session(peer)
        peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
        allow_permission(peer)
        peer.response(5)
        peer.request(6, "session/new", {"cwd": "/tmp", "mcpServers": []})
        peer.response(6)
        peer.close_stdin()
        peer.wait()
    finally:
        peer.kill()
    return trace


def test_lifelines_arrows_and_payload(browser, demo_trace):
    events = read_jsonl(demo_trace)
    page = _open(browser, _view(demo_trace))
    assert page.locator(".head").all_inner_texts() == ["editor", "p1", "p2", "agent"]
    assert page.locator(".lifeline").count() == 4
    arrows = page.locator(".arrow")
    rendered = arrows.count()
    assert 0 < rendered <= len(events)
    for i in range(rendered):
        arrow = arrows.nth(i)
        event = events[int(arrow.get_attribute("data-index"))]
        assert (arrow.get_attribute("data-from"), arrow.get_attribute("data-to")) == (
            event["from"],
            event["to"],
        )
    assert page.locator("#count").inner_text() == f"{len(events)} of {len(events)} messages"
    # Click the editor's prompt: the panel shows its params; jump to its response.
    prompt = next(
        i
        for i, e in enumerate(events)
        if e.get("method") == "session/prompt" and e["from"] == "editor"
    )
    page.locator(f'.arrow[data-index="{prompt}"]').click()
    assert json.loads(page.locator("#payload").inner_text()) == events[prompt]["params"]
    page.get_by_role("button", name="Go to its response").click()
    assert json.loads(page.locator("#payload").inner_text()) == {"stopReason": "end_turn"}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "trace-view.png"), full_page=True)
    page.close()


def test_filters_by_session_and_method(browser, demo_trace):
    events = read_jsonl(demo_trace)
    page = _open(browser, _view(demo_trace))
    page.select_option("#session", "sess-1")
    in_session = [e for e in events if e["session"] == "sess-1"]
    assert page.locator("#count").inner_text() == f"{len(in_session)} of {len(events)} messages"
    page.select_option("#session", "")
    page.fill("#method", "session/prompt")
    prompts = [e for e in events if e.get("method") == "session/prompt"]
    assert page.locator("#count").inner_text() == f"{2 * len(prompts)} of {len(events)} messages"
    page.close()


def test_tens_of_thousands_of_messages_stay_usable(browser, tmp_path):
    trace = tmp_path / "big.jsonl"
    hops = [("editor", "p1"), ("p1", "agent"), ("agent", "p1"), ("p1", "editor")]
    with trace.open("w") as f:
        for i in range(40_000):
            sender, receiver = hops[i % 4]
            kind = "request" if i % 4 < 2 else "response"
            event = {
                "type": kind,
                "ts": i / 1000,
                "protocol": "acp",
                "from": sender,
                "to": receiver,
                "id": i // 4,
                "session": f"s{i % 3}",
            }
            event |= (
                {"method": "session/prompt", "params": {"n": i}}
                if kind == "request"
                else {"is_error": False, "payload": {"n": i}}
            )
            f.write(json.dumps(event) + "\n")
    page = _open(browser, _view(trace))
    assert page.locator("#count").inner_text() == "40000 of 40000 messages"
    assert page.locator(".arrow").count() < 200
    page.evaluate("document.getElementById('diagram').scrollTop = 1e9")
    page.wait_for_timeout(200)
    last = page.locator(".arrow").last
    assert last.get_attribute("data-index") == "39999"
    last.click()
    assert json.loads(page.locator("#payload").inner_text()) == {"n": 39999}
    page.close()


def test_bad_trace_file_is_reported(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "request"}\nnot json\n')
    done = subprocess.run(
        [sys.executable, "-m", "conductor", "trace", "view", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "line 1" in done.stderr and "Traceback" not in done.stderr
