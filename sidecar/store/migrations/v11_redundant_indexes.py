"""Version 11: four indexes that only repeated the first column of another. `run_events`, `model_turns`,
`tool_results` and `person_pauses` each had an index of `run_id` beside one of (`run_id`, ...), which every
lookup by run, every cascade and every foreign key check can use as well; each insert maintained both (a
delegation writes twelve events). Dropping an index takes a moment and blocks nothing for long."""

from playhouse.migrate import SchemaMigrator, migrate

NAME = "indexes that repeated another's first column"
# table -> the index dropped (its only column run_id), the index that serves in its place
REDUNDANT = {
    "run_events": ("run_events_run_id", ("run_id", "sequence")),
    "model_turns": ("model_turns_run_id", ("run_id", "index")),
    "tool_results": ("tool_results_run_id", ("run_id", "tool_call_id")),
    "person_pauses": ("person_pauses_run_id", ("run_id", "turn_index")),
}


def apply(db) -> None:
    migrator = SchemaMigrator.from_database(db)
    drops = []
    for table, (name, serving) in REDUNDANT.items():
        indexes = {index.name: tuple(index.columns) for index in db.get_indexes(table)}
        if name in indexes and serving in indexes.values():
            drops.append(migrator.drop_index(table, name))
    if drops:
        migrate(*drops)
