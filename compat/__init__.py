"""The compatibility gate: a run status is written only when every loaded consumer can read it."""
