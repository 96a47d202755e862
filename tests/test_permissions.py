"""The permission hook through sidecar.permissions.may(): the core's owner rule, the example plugin's
rules, and the first answer winning over every later one."""

import pytest

from sidecar.hookspecs import hookimpl
from sidecar.permissions import may
from sidecar.plugins import plugin_manager
from sidecar.store import runs

OWNER, OTHER = "be_user:7", "be_user:8"


@pytest.fixture
def run(database_url):
    return runs.get_run(runs.create_run(OWNER, "x", workspace="3"))


def test_the_owner_may_decide_their_own_run_and_nobody_else_may(run):
    assert may(OWNER, "3", "agent:approve", run) and may(OWNER, "3", "agent:input", run)
    assert not may(OTHER, "3", "agent:approve", run) and not may(OTHER, "3", "agent:input", run)
    assert not may(OWNER, "3", "agent:delete", run), "an action no plugin allows is refused"
    assert not may(None, "3", "agent:approve", run) and not may("", "3", "agent:approve", run)


def test_the_example_plugins_rules(run):
    # Its reviewers may approve any run, but not answer its input (left to the owner rule).
    assert may("example:reviewer", "3", "agent:approve", run)
    assert not may("example:reviewer", "3", "agent:input", run)
    # In its frozen workspace its False wins over the core's owner rule, asked after it.
    assert not may(OWNER, "example:frozen", "agent:approve", run)
    # Its dashboard's admins decide the runs the dashboard started (the run view's origin), and only those.
    assert not may("example:dashboard-admin", "3", "agent:input", run)
    dashboards = runs.get_run(runs.create_run(OWNER, "x", workspace="3", origin="example:dashboard"))
    assert may("example:dashboard-admin", "3", "agent:input", dashboards)


class Answers:
    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    @hookimpl
    def nrllm_permission_check(self, actor, workspace, action, run):
        self.asked.append((actor, workspace, action, run.id))
        return self.answer


@pytest.fixture
def register():
    registered = []

    def add(plugin):
        plugin_manager().register(plugin, name=f"permission-test-{len(registered)}")
        registered.append(plugin)
        return plugin

    yield add
    for plugin in registered:
        plugin_manager().unregister(plugin)


def test_a_plugin_answering_false_refuses_the_owner_and_true_allows_another(run, register):
    refuses = register(Answers(False))
    assert not may(OWNER, "3", "agent:approve", run)
    assert refuses.asked == [(OWNER, "3", "agent:approve", run.id)]
    refuses.answer = True
    assert may(OTHER, "3", "agent:input", run)


def test_the_first_answer_wins_and_none_passes_the_question_on(run, register):
    later = register(Answers(True))
    first = register(Answers(False))  # registered last, asked first (pluggy calls the newest first)
    assert not may(OWNER, "3", "agent:approve", run)
    assert later.asked == [], "nobody is asked after the first answer"
    first.answer = None
    assert may(OTHER, "3", "agent:approve", run) and len(later.asked) == 1
