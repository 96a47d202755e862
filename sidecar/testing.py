"""A segment executor driven by the run's input, for tests, benchmarks and until the agent loop lands.

The run's input is JSON: {"steps": [...], "output": "text"}. Steps, in order:
- {"sleep": seconds}: a step that takes time (the lease is renewed meanwhile);
- {"event": "name"}: writes an event of kind `step` with that name;
- {"effect": "description"}: stamps a non-idempotent write in flight, and clears it after the next step.
An input that is not such JSON completes at once with the input as output (the empty segment).
"""

import json

from .domain.vocabulary import SegmentOutcome
from .segment import Segment


class StepExecutor:
    def execute(self, segment: Segment) -> SegmentOutcome:
        try:
            plan = json.loads(segment.run.input)
        except ValueError:
            plan = None
        if not isinstance(plan, dict):
            return segment.complete(segment.run.input)
        in_flight = False
        for index, step in enumerate(plan.get("steps", [])):
            if segment.cancel_requested():
                return segment.cancel()
            if "effect" in step:
                segment.stamp_pending_effect(step["effect"])
                in_flight = True
                continue
            if "sleep" in step:
                segment.sleep(float(step["sleep"]))
            segment.event("step", {"index": index, "name": step.get("event", "sleep")})
            if in_flight:
                segment.clear_pending_effect()
                in_flight = False
        return segment.complete(str(plan.get("output", "")))
