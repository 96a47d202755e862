"""Everything the tests share, one module per topic; the fixtures are registered in tests/conftest.py.

Before this package the tests had nineteen support modules that overlapped: five ways to start a worker (a
process, and four in-thread fixtures that differed in executor, companions and settings), two `settings`
and three `client` fixtures, and two ways to drive a segment, one of them with a claim written by hand
beside the store's. Now there is one of each:

  databases        the database fixtures (a SQLite file per test, PostgreSQL and MariaDB databases per process)
  private_servers  PostgreSQL and MariaDB servers of a test's own, to stop and break
  api              the one `settings`, `app` and `client` fixtures (and `settings_for`, `app_for` where a
                   test has a database of its own); tokens, headers, the app on a real HTTP server
                   (`live_server`) and the same app as the webhook real peers post to (`webhook`)
  workers          the one way to start a worker process (`start_worker_process`) and the one way to run
                   a worker in this process (`worker_in_thread`, and the `start_worker` fixture that stops
                   what it started); `wait_for_ticks` of its coordinators; stopping and scraping processes
  segments         the one synchronous way to drive a segment (`drive_segment`): the store's own claim of
                   the next queued run (`claim_next`), then the agent loop in this thread, as a worker would
  runs             what the tests read back about a run: its row, events, tool results
  waiting          `wait_until`, for what another thread or process does (never for what this one does)
  engine           providers and tools that count or crash, for the engine and its processes
  decisions        runs that pause for a person, and the decisions a host sends
  delegation       remote agents and delegating runs; the `peers` and `delegation_offered` fixtures
  peers            a real a2a-sdk peer on 127.0.0.1
  network          proxies and servers that misbehave (lost answers, faults, silence, canned bytes)
  servers          the one way to start `nrllm-sidecar serve` in its own process (`start_serve`, which
                   `live_sidecar` uses for the installed command too); raw HTTP, process trees
  streams          server-sent event clients: one stream, or a crowd of them
  commands         the command line in this process
  plugin_site, secrets_scan, reference_scan: one job each

Timing, the rules for tests: nothing waits a fixed time for another party. Leases are generous
(GENEROUS_LEASE) unless a test is about a lease running out and says so with a short one of its own;
waiting is `wait_until` on a condition, its timeout long because it returns as soon as the condition
holds; "nothing more happened" is checked after a number of coordinator ticks (`wait_for_ticks`), not after
a number of seconds; a bound on how long something took is far from what it is compared with (a push
against a 60 s poll), never near what a quiet machine does.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
GENEROUS_LEASE = 30.0  # seconds: a worker never loses a lease because the machine is busy
# For the tests about a lease running out: a takeover within seconds (a worker reaps once per lease period),
# yet long enough that a busy machine's heartbeats (every third of it) keep a live holder's lease.
SHORT_LEASE = 3.0
