// The console's only script: a run page's timeline follows the run's events live (EventSource, with the
// session's cookie, from the console's own stream route). Everything else works without it.
"use strict";

function eventItem(event) {
  const item = document.createElement("li");
  item.dataset.sequence = event.sequence;
  const seq = document.createElement("span");
  seq.className = "seq";
  seq.textContent = event.sequence;
  const kind = document.createElement("strong");
  kind.textContent = event.kind;
  const at = document.createElement("time");
  at.textContent = event.at;
  const payload = document.createElement("pre");
  payload.textContent = JSON.stringify(event.payload);
  item.append(seq, " ", kind, " ", at, payload);
  return item;
}

function showRun(run) {
  const status = document.getElementById("run-status");
  if (status) {
    status.textContent = run.status;
    status.className = "status s-" + run.status;
  }
  const output = document.getElementById("run-output");
  if (output && run.output !== null && run.output !== undefined) output.textContent = run.output;
}

function followTimeline(list) {
  const state = document.getElementById("stream-state");
  const source = new EventSource(list.dataset.stream);
  state.textContent = "Following the run's events…";
  source.addEventListener("run_event", (message) => {
    const event = JSON.parse(message.data);
    if (list.querySelector(`li[data-sequence="${event.sequence}"]`)) return;
    list.append(eventItem(event));
    if (event.kind === "status" && event.payload && event.payload.to) showRun({status: event.payload.to});
  });
  source.addEventListener("run", (message) => {
    // The stream's last message: the run is terminal or waiting again.
    const run = JSON.parse(message.data);
    showRun(run);
    source.close();
    state.textContent = run.status.startsWith("waiting_")
      ? "The run waits again (reload to see on what); the events above are complete."
      : "The run has ended; the events above are complete.";
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) state.textContent = "The event stream closed; reload to follow again.";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("events");
  if (list && list.dataset.final !== "yes") followTimeline(list);
});
