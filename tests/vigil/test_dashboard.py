"""The dashboard in a real browser: headless Chromium (Debian's), driven by Playwright."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import sync_playwright

from support.browser import ARGS, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page whose script errors fail the test that used it."""
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert errors == []


def test_cards_show_live_numbers_that_change(server, browser):
    page = browser.new_page()
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"{server.url}/dashboard")
    card = page.locator('.card[data-app="people"]')
    card.wait_for(timeout=30_000)
    assert "SLO 1500 ms" in card.inner_text()
    att = card.locator(".att-1m")
    page.wait_for_function("() => /%$/.test(document.querySelector('.card[data-app=people] .att-1m').textContent)",
                           timeout=30_000)
    assert re.fullmatch(r"\d+(\.\d)?%", att.inner_text())
    assert re.search(r"\d+ ms / \d+ ms \(1500 ms\)", card.locator(".latency").inner_text())
    decoded = page.locator("#streams td.decoded").first
    first = int(decoded.inner_text())
    page.wait_for_function(f"() => Number(document.querySelector('#streams td.decoded').textContent) > {first}",
                           timeout=15_000)  # pushed over server-sent events, no reload
    assert page.locator("#conn").inner_text() == "live"
    page.locator("#captions td.caption").first.wait_for(timeout=90_000)  # written by the LLM
    assert "in view." in page.locator("#captions td.caption").first.inner_text()
    assert "live" in card.locator(".pill.live").first.inner_text()
    assert re.fullmatch(r"\d+:\d\d\.\d–\d+:\d\d\.\d", page.locator("#captions td.muted").first.inner_text())
    # a server that runs its engine in its own process has no /v1/cluster: the page never asks
    assert not [u for u in asked if "/v1/cluster" in u]
    page.close()


def test_the_first_paint_needs_no_event_stream(server, browser):
    page = browser.new_page()
    page.route("**/v1/overview/stream*", lambda route: route.abort())  # as a proxy that buffers events would
    page.goto(f"{server.url}/dashboard")
    card = page.locator('.card[data-app="people"]')
    card.wait_for(timeout=30_000)
    assert "SLO 1500 ms" in card.inner_text()
    assert page.locator("#streams td.decoded").count() >= 1
    page.close()


def test_app_page_draws_charts_and_the_latest_frame(server, page):
    page.goto(f"{server.url}/dashboard")
    page.locator('.card[data-app="people"] h2 a').click()
    page.wait_for_url("**/dashboard/apps/people")
    page.locator("#latency .main-svg").first.wait_for(timeout=30_000)  # plotly, served locally
    page.wait_for_function("() => document.getElementById('frame').naturalWidth > 0", timeout=30_000)
    assert page.evaluate("() => document.getElementById('frame').naturalWidth") == 640
    assert re.fullmatch(r"SLO 1500 ms · attainment \(last minute\) (\d+\.\d%|–) · p99 (\d+ ms|∞ \(drops\)|–)",
                        page.locator("#summary").inner_text())


def test_the_events_page_lists_events_with_their_snapshots_and_filters_them(server, page):
    page.goto(f"{server.url}/dashboard")
    page.get_by_role("link", name="events").click()
    page.wait_for_url("**/dashboard/events")
    thumb = page.locator("#events img.thumb").first
    thumb.wait_for(timeout=60_000)
    assert page.locator("#viewer").is_hidden()  # nothing picked yet: no broken image
    # stream time of a file: where in the clip, not seconds since 1970
    assert re.fullmatch(r"\d+:\d\d\.\d into the clip", page.locator("#events td.time").first.inner_text())
    page.wait_for_function("() => { const i = document.querySelector('#events img.thumb'); "
                           "return i && i.complete && i.naturalWidth > 0; }", timeout=30_000)
    ids = [int(i) for i in page.locator("#events tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")]
    assert ids == sorted(ids, reverse=True)  # newest first
    thumb.click()  # the whole frame, with the box drawn
    page.wait_for_function("() => document.getElementById('viewer').naturalWidth > 0", timeout=30_000)
    assert page.evaluate("() => document.getElementById('viewer').naturalWidth") == 640
    page.select_option("#f-type", "line_cross")  # the clip's people cross the midblock line
    page.wait_for_url("**/dashboard/events?type=line_cross")
    page.wait_for_function("() => { const t = [...document.querySelectorAll('#events td.type')]; "
                           "return t.length > 0 && t.every(c => c.textContent === 'line_cross'); }", timeout=60_000)
    assert "midblock" in page.locator("#events tbody tr").first.inner_text()


def test_an_events_clip_plays_in_the_events_page(server, page):
    """The clip button fetches the recording around the event and the player loads it
    (Chromium decodes the remuxed H.264: its duration is known and it has no error)."""
    page.goto(f"{server.url}/dashboard/events?type=line_cross")
    button = page.locator("#events button.clip").first
    button.wait_for(timeout=60_000)
    button.click()
    page.wait_for_function("() => { const v = document.getElementById('player'); "
                           "return !v.hidden && (v.readyState >= 1 || v.error); }", timeout=30_000)
    state = page.evaluate("() => { const v = document.getElementById('player'); "
                          "return {error: v.error && v.error.code, duration: v.duration, width: v.videoWidth}; }")
    assert state["error"] is None and state["duration"] > 2.0 and state["width"] == 640, state
    assert page.locator("#viewer").is_hidden()


def test_a_cameras_live_view_refreshes_its_apps_annotated_frames(server, page):
    page.goto(f"{server.url}/dashboard")
    page.locator("#streams a.live-link", has_text="street").click()
    page.wait_for_url("**/dashboard/live/street")
    frame = '#views figure[data-app="people"] img'
    page.wait_for_function(f"() => {{ const i = document.querySelector('{frame}'); return i && i.naturalWidth > 0; }}",
                           timeout=30_000)
    assert page.evaluate(f"() => document.querySelector('{frame}').naturalWidth") == 640
    first = page.evaluate(f"() => document.querySelector('{frame}').src")
    page.wait_for_function(f"() => document.querySelector('{frame}').src !== {first!r}", timeout=10_000)


@pytest.mark.parametrize("path,rendered", [
    ("/docs", "() => document.querySelectorAll('.opblock').length"),
    ("/redoc", "() => document.querySelectorAll('.operation-type').length"),
])
def test_the_api_pages_render_offline(server, page, path, rendered):
    """Swagger UI and ReDoc with every file from this server: a request elsewhere (a CDN,
    a font) is refused, as on an offline machine."""
    elsewhere = []

    def only_here(route):
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    page.goto(f"{server.url}{path}")
    page.wait_for_function(f"() => ({rendered})() > 20", timeout=30_000)
    assert "/v1/streams" in page.inner_text("body")
    assert elsewhere == []
