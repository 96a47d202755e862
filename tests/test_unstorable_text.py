"""Text no database can store (the NUL character, an unpaired surrogate) in a remote agent's JSON is replaced
by U+FFFD, so the result is stored and the run completes, on every database (the model's: test_openai_provider)."""

import pytest

from tests.support.delegation import register
from tests.support.runs import tool_results
from tests.test_delegation_outcomes import FINAL, delegate, finished, scripted_run

pytestmark = pytest.mark.usefixtures("delegation_offered")

MARK = "UNSTORABLE-HERE"  # what the peer answers; the proxy turns it into the escape the peer could not send


@pytest.mark.parametrize("escape", [b"\\u0000", b"\\ud800"], ids=["NUL", "surrogate"])
def test_a_remote_answer_with_unstorable_text_is_stored_with_replacements(settings, peers, start_worker, escape):
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=(), rewrite=lambda data: data.replace(MARK.encode(), escape))
    register("research", proxy.url)
    run_id = scripted_run(delegate("research", f"complete:a{MARK}b"), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    assert tool_results(run_id) == ["a\ufffdb"]
    assert (run.status, run.output) == ("completed", "Remote said: a\ufffdb")
