"""Version 10: how many pushes came for a send (the console shows them beside a waiting run's remote task)."""

from peewee import CharField, IntegerField

from .frozen import FrozenModel, add_missing_columns

NAME = "pushes seen per send"


class Outbound(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    pushes_seen = IntegerField(default=0)

    class Meta:
        table_name = "outbound"


def apply(db) -> None:
    add_missing_columns(db, Outbound.pushes_seen)
