"""Version 6: the outbound journal notes a push that came before its run's suspension."""

from peewee import CharField, DateTimeField

from .frozen import FrozenModel, add_missing_columns

NAME = "pushes that come before the suspension"


class Outbound(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    push_received_at = DateTimeField(null=True)

    class Meta:
        table_name = "outbound"


def apply(db) -> None:
    add_missing_columns(db, Outbound.push_received_at)
