"""Decisions on runs that wait for a person: checking and storing them, continuing the run from them."""
