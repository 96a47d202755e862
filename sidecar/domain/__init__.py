"""Pure rules of the sidecar: no Flask, no peewee, no network. Tested without a database."""
