"""The only layer that writes SQL: models, migrations, atomic claims, fenced writes."""
