"""Serving the API in production: gunicorn with threaded workers (docs/deploy.md).

`http_worker` is the gunicorn worker class (JSON errors, request read deadlines, streams that end when the
worker stops); `server` runs gunicorn's arbiter with the sidecar's worker beside it (`serve`).
"""
