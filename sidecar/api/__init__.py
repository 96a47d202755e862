"""The HTTP API: its views, schemas and request handling; sidecar/app.py assembles them into the app."""
