"""`sidecar.wsgi:app`: the API for a WSGI server an operator brings, configured from the environment.

Importing it binds the database and loads the plugins (the schema must be current: `nrllm-sidecar db
upgrade` first). It serves the API only: run `nrllm-sidecar worker` beside it. docs/deploy.md shows a
gunicorn command line with the sidecar's own worker class.
"""

from .app import create_app

app = create_app()
