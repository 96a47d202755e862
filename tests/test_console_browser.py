"""The console in a real browser (Debian's chromium driven by Playwright), against a live sidecar with a
worker and real A2A peers: an operator finds a waiting run and its remote task, resends an unknown outcome
and revokes a token (whose session then ends); a host actor sees a refusal by its field, then approves a
pause and watches the run complete without reloading. Every request a page made went to the sidecar.

The screenshots docs/console.md shows are taken here, into a temporary directory; with
NRLLM_UPDATE_SCREENSHOTS=1 into docs/console/, replacing the committed ones (a run of the suite leaves the
working tree as it was). Without chromium (or Playwright) these tests skip; under CI=true they fail
instead (.ci/run installs chromium)."""

import os
import shutil
from pathlib import Path

import pytest

from sidecar.store import consumers, migrations, runs, tokens
from sidecar.store import db as store_db
from sidecar.store.models import ApiToken, Outbound
from tests.support import ROOT
from tests.support.api import ACTOR, app_for, served, settings_for
from tests.support.decisions import INPUT_SCRIPT
from tests.support.delegation import delegating_run, register
from tests.support.peers import PeerPool
from tests.support.runs import run_row
from tests.support.waiting import wait_until
from tests.support.workers import worker_in_thread

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DOCUMENTED_SCREENSHOTS = ROOT / "docs" / "console"
IN_CI = os.environ.get("CI", "").lower() == "true"
WIDE, NARROW = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
pytestmark = pytest.mark.slow


def _require_browser():
    missing = None
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        missing = "chromium is not installed (.ci/run installs it)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright package is not installed (pip install -e '.[test]')"
    if missing:
        if IN_CI:
            pytest.fail(f"{missing}, but CI=true requires it", pytrace=False)
        pytest.skip(missing)


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    """Where the screenshots go: docs/console/ when asked to update them, else a directory of the test run."""
    if os.environ.get("NRLLM_UPDATE_SCREENSHOTS") == "1":
        return DOCUMENTED_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    """A live sidecar on an SQLite file: the app behind a threaded server, a worker with a coordinator,
    and A2A peers on 127.0.0.1. Yields (base URL, peer pool)."""
    directory = tmp_path_factory.mktemp("console")
    url = f"sqlite:///{directory / 'sidecar.db'}"
    bound = store_db.bind(url)
    migrations.upgrade()
    settings = settings_for(url, directory)
    app = app_for(settings)
    consumers.replace_report([])  # an empty report opens the gate: delegation is offered
    worker = worker_in_thread(settings, concurrency=4)
    with served(app) as base, PeerPool() as peers:
        yield base, peers
        worker.stop(grace=5)
    bound.close()


class Visit:
    """A browser context of its own (its own cookies), recording every request its pages make."""

    def __init__(self, browser, base: str, screenshots: Path | None = None, viewport=WIDE):
        self.base = base
        self.screenshots = screenshots
        self.context = browser.new_context(viewport=viewport, base_url=base)
        self.requests: list[str] = []
        self.page = self.context.new_page()
        self.page.on("request", lambda request: self.requests.append(request.url))

    def log_in(self, token: str, actor: str = ""):
        self.page.goto("/console/")
        self.page.get_by_label("Token", exact=True).fill(token)
        if actor:
            self.page.get_by_label("Actor").fill(actor)
        self.page.get_by_role("button", name="Log in").click()

    def nav(self, name: str):
        self.page.get_by_role("navigation", name="Console").get_by_role("link", name=name, exact=True).click()

    def shot(self, name: str, viewport=None):
        if viewport:
            self.page.set_viewport_size(viewport)
        path = self.screenshots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0, f"the screenshot {name} is empty"
        if viewport:
            self.page.set_viewport_size(WIDE)

    def close(self):
        self.context.close()
        assert self.requests, "the page made no request"
        elsewhere = [url for url in self.requests if not url.startswith(self.base + "/")]
        assert elsewhere == [], f"requests left the sidecar's origin: {elsewhere}"


def test_an_operator_finds_a_waiting_run_resends_an_unknown_outcome_and_revokes_a_token(
        browser, sidecar, screenshots):
    base, peers = sidecar
    operator = tokens.create("ops", "operator")[0]
    night_shift = tokens.create("night-shift", "operator")[0]
    # One run whose send's answer is lost (a 0.3 peer cannot be asked for it: only a resend helps), and one
    # whose remote task works for a while.
    lossy = peers.lossy_proxy(peers.start(card="0.3"), drop=("message/send",))
    register("research", lossy.url, poll=0.2)
    register("translate", peers.start(card="1.0").url, poll=0.2)
    lost_run = delegating_run("research", "work:0.2:forty-two")
    slow_run = delegating_run("translate", "work:120:later")
    wait_until(lambda: run_row(lost_run).status == run_row(slow_run).status == "waiting_for_dependency",
               what="both runs to wait")
    (lost_send,) = Outbound.select().where(Outbound.run == lost_run)
    (slow_send,) = Outbound.select().where(Outbound.run == slow_run)
    wait_until(lambda: Outbound.get_by_id(slow_send.id).remote_task_id is not None, what="the task id")
    task_id = Outbound.get_by_id(slow_send.id).remote_task_id
    assert lost_send.outcome == "outcome_unknown"

    visit = Visit(browser, base, screenshots)
    page = visit.page
    page.goto("/console/runs")
    assert page.url.startswith(f"{base}/console/login")
    visit.shot("login")
    visit.log_in(operator)
    assert page.url == f"{base}/console/runs"
    assert page.get_by_role("link", name="waiting_for_dependency 2").is_visible()
    visit.shot("runs")
    visit.shot("runs-narrow", NARROW)

    visit.nav("Waiting")
    row = page.locator("tr", has=page.locator(f'a[href="/console/runs/{slow_run}"]'))
    assert row.locator(".task-id").inner_text() == task_id
    assert "translate" in row.inner_text()
    visit.shot("waiting")

    # The run's own page says the same, and links the send in the journal.
    row.get_by_role("link", name=slow_run[:8]).click()
    assert task_id in page.locator("#waits-on + dl").inner_text()

    visit.nav("Outbound")
    first = page.locator("tbody tr").first
    assert lost_send.id[:8] in first.inner_text() and "outcome_unknown" in first.inner_text()  # unknown first
    first.get_by_role("link", name="Resend…").click()
    assert "new message id" in page.locator("main").inner_text()
    visit.shot("resend")
    lossy.drop.clear()
    page.get_by_role("button", name="Resend now").click()
    assert "Resent" in page.get_by_role("status").inner_text()
    wait_until(lambda: run_row(lost_run).status == "completed", what="the resent run to complete")
    assert run_row(lost_run).output == "Remote said: forty-two"
    assert Outbound.get_by_id(lost_send.id).outcome == "superseded"

    # An invalid registration is refused by its field, as the API refuses it.
    visit.nav("Remote agents")
    page.get_by_role("link", name="Register a remote agent").click()
    page.get_by_label("Name").fill("billing")
    page.get_by_label("URL").fill("ftp://billing.example/")
    page.get_by_role("button", name="Save").click()
    assert page.get_by_label("URL").get_attribute("aria-invalid") == "true"
    assert page.locator("#url-error").inner_text() == "Must be an http or https URL with a host."
    visit.shot("agent-form-error")

    # Another operator's session, then its token revoked from the first one's console.
    other = Visit(browser, base)
    other.log_in(night_shift)
    assert other.page.url == f"{base}/console/runs"
    visit.nav("Tokens")
    visit.shot("tokens")
    page.get_by_role("link", name="Revoke night-shift…").click()
    page.get_by_role("button", name="Revoke night-shift").click()
    assert "revoked" in page.get_by_role("status").inner_text()
    assert ApiToken.get(ApiToken.name == "night-shift").revoked_at is not None
    other.nav("Health")
    assert other.page.url.startswith(f"{base}/console/login")
    assert "Your session ended" in other.page.inner_text("main")
    other.close()
    visit.close()


def test_a_host_actor_answers_approves_and_watches_the_run_complete(browser, sidecar, screenshots):
    base, _ = sidecar
    host = tokens.create("typo3", "host")[0]
    # Approval, then a step that takes a while: the run page is open before the run completes.
    slow = [{"tool_calls": [{"id": "n", "name": "write_note", "arguments": {"text": "Page 42 needs a look"}}]},
            {"tool_calls": [{"id": "s", "name": "sleep", "arguments": {"seconds": 3}}]},
            {"content": "Done: {last_tool_result}"}]
    approval_run = runs.create_run(ACTOR, "review page 42", spec={"provider": "scripted", "script": slow})
    input_run = runs.create_run(ACTOR, "which page?", spec={"provider": "scripted", "script": INPUT_SCRIPT})
    wait_until(lambda: run_row(approval_run).status == "waiting_for_approval"
               and run_row(input_run).status == "waiting_for_input", what="both runs to pause")

    visit = Visit(browser, base, screenshots)
    page = visit.page
    # By keyboard only: the skip link, then the labelled fields in order, and Enter.
    page.goto("/console/login")
    focused = []
    for _ in range(3):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id || document.activeElement.textContent"))
    assert focused == ["Skip to content", "token", "actor"]
    page.keyboard.press("Shift+Tab")
    page.keyboard.type(host)
    page.keyboard.press("Tab")
    page.keyboard.type(ACTOR)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/console/inbox")
    visit.shot("inbox")
    visit.shot("inbox-narrow", NARROW)

    # An answer the pause's schema refuses: the reason by the field, from the decision service.
    answer_card = page.locator(f"#pause-{run_row(input_run).waiting_on}")
    answer_card.get_by_label("page").fill("0")
    answer_card.get_by_label("Store the decision").check()
    answer_card.get_by_role("button", name="Answer").click()
    answer_card = page.locator(f"#pause-{run_row(input_run).waiting_on}")
    field = answer_card.get_by_label("page")
    assert field.get_attribute("aria-invalid") == "true"
    error_id = field.get_attribute("aria-describedby")
    assert page.locator(f"#{error_id}").inner_text() == "0 is less than the minimum of 1"
    assert "invalid_input" in answer_card.locator(".refusal").inner_text()
    visit.shot("inbox-error")
    field.fill("3")
    answer_card.get_by_role("button", name="Answer").click()
    assert "Decision stored" in page.get_by_role("status").inner_text()
    wait_until(lambda: run_row(input_run).status == "completed", what="the worker to continue the answered run")

    # Decide now: the run's page follows the continuation over its event stream, without a reload.
    approval_card = page.locator(f"#pause-{run_row(approval_run).waiting_on}")
    assert "write_note" in approval_card.inner_text() and "non_idempotent_write" in approval_card.inner_text()
    approval_card.get_by_label("Comment").fill("Looks right")
    approval_card.get_by_role("button", name="Approve").click()
    assert page.url == f"{base}/console/runs/{approval_run}"
    page.evaluate("window.stillTheSamePage = true")
    status = page.locator("#run-status")
    assert status.inner_text() != "completed"  # the sleep step is still running
    status.filter(has_text="completed").wait_for(timeout=30_000)
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.locator("#run-output").inner_text() == "Done: slept 3s"
    assert page.locator("#events li", has_text="decision").count() == 1
    visit.shot("run-completed")
    visit.close()
