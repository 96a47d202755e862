"""Version 3: the consumers the host reported, and whether it reported at all."""

from peewee import CharField, DateTimeField, IntegerField, TextField

from .frozen import FrozenModel

NAME = "the host's consumer report"


class ReportedConsumerRow(FrozenModel):
    name = CharField(max_length=128, primary_key=True)
    version = CharField(max_length=64)
    understands = TextField(null=True)
    reported_at = DateTimeField()

    class Meta:
        table_name = "reported_consumers"


class ConsumerReportState(FrozenModel):
    id = IntegerField(primary_key=True)
    reported_at = DateTimeField()

    class Meta:
        table_name = "consumer_report_state"


def apply(db) -> None:
    db.create_tables([ReportedConsumerRow, ConsumerReportState], safe=True)
