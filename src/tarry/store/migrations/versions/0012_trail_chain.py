"""A trail that shows tampering: each row's lane (one of several hash chains), its place in that lane and its hash;
on PostgreSQL, a trigger that chains each row tarry appends, under a lock of its lane only, and one that refuses to
change or remove rows.

Rows written before this revision are chained here, each lane in id order.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.chain import FIELDS, GENESIS, LANES, VERSION, lane_of, row_hash, time_text
from tarry.store.tables import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TABLE = "tarry_decision_events"
_LOCK = 7413266
"""With the lane, the advisory lock (two-key form) that makes appends to one lane take turns (``schema.migrate``
takes 7413265 in the one-key form)."""


def _field(expression: str) -> str:
    """One line of the hashed text: ``~`` for none, else the length, ``:`` and the text. Written out in the trigger,
    not as a function of its own, which would be sixteen calls a row (a function with a ``SET`` clause is never
    inlined, and switches the setting at each call)."""
    return f"CASE WHEN {expression} IS NULL THEN '~' ELSE char_length({expression})::text || ':' || {expression} END"


_TEXT = ", ".join(
    [
        f"'{VERSION}'",
        "NEW.lane::text",
        "NEW.seq::text",
        "COALESCE(last_hash, '" + GENESIS + "')",
        *(
            _field("to_char(NEW.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            if name == "at"
            else _field(f"NEW.{name}::text")
            for name in FIELDS
        ),
    ]
)
"""The hashed text's lines, as ``tarry.store.chain.row_hash`` writes them."""

_POSTGRES_UP = [
    # No SET clause, so that a statement ordering its rows by lane can inline it; it names only pg_catalog's
    # functions, which come first on any search_path.
    "CREATE FUNCTION tarry_trail_lane(chat_id text) RETURNS integer LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT CASE WHEN chat_id IS NULL OR chat_id = '' THEN 0 "
    f"ELSE get_byte(sha256(convert_to(chat_id, 'UTF8')), 0) % {LANES} END $$",
    f"""CREATE FUNCTION tarry_trail_append() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    last_seq bigint;
    last_hash text;
BEGIN
    IF NEW.seq IS DISTINCT FROM 0 THEN  -- not written by tarry: left outside the chain, as written
        RETURN NEW;
    END IF;
    NEW.lane := tarry_trail_lane(NEW.chat_id);
    PERFORM pg_advisory_xact_lock({_LOCK}, NEW.lane);  -- appends to a lane take turns until each one's commit
    SELECT seq, hash INTO last_seq, last_hash FROM {_TABLE} WHERE lane = NEW.lane AND seq > 0
        ORDER BY seq DESC LIMIT 1;
    NEW.seq := COALESCE(last_seq, 0) + 1;
    NEW.hash := encode(sha256(convert_to(concat_ws(E'\\n', {_TEXT}), 'UTF8')), 'hex');
    RETURN NEW;
END $$""",
    f"CREATE TRIGGER tarry_trail_append BEFORE INSERT ON {_TABLE} FOR EACH ROW EXECUTE FUNCTION tarry_trail_append()",
    """CREATE FUNCTION tarry_trail_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tarry''s trail is append-only: % of its rows is refused', TG_OP
        USING HINT = 'Rows of the trail (' || TG_TABLE_NAME || ') are only ever added.';
END $$""",
    f"CREATE TRIGGER tarry_trail_refuse BEFORE UPDATE OR DELETE ON {_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION tarry_trail_refuse()",
    f"CREATE TRIGGER tarry_trail_refuse_truncate BEFORE TRUNCATE ON {_TABLE} "
    "FOR EACH STATEMENT EXECUTE FUNCTION tarry_trail_refuse()",
]
_POSTGRES_DOWN = [
    f"DROP TRIGGER tarry_trail_refuse_truncate ON {_TABLE}",
    f"DROP TRIGGER tarry_trail_refuse ON {_TABLE}",
    "DROP FUNCTION tarry_trail_refuse()",
    f"DROP TRIGGER tarry_trail_append ON {_TABLE}",
    "DROP FUNCTION tarry_trail_append()",
    "DROP FUNCTION tarry_trail_lane(text)",
]


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("lane", sa.Integer))
    op.add_column(_TABLE, sa.Column("seq", _ID))
    op.add_column(_TABLE, sa.Column("hash", sa.String(64)))
    op.create_index("ix_tarry_decision_events_lane", _TABLE, ["lane", "seq"], unique=True)
    _chain_existing_rows()
    if op.get_bind().dialect.name == "postgresql":
        for statement in _POSTGRES_UP:
            op.execute(statement)


def _chain_existing_rows() -> None:
    content = [sa.column(name, UTCDateTime if name == "at" else sa.Text) for name in FIELDS]
    chained_columns = (sa.column("lane", sa.Integer), sa.column("seq", _ID), sa.column("hash", sa.String))
    events = sa.table(_TABLE, sa.column("id", _ID), *chained_columns, *content)
    read = sa.select(
        events.c.id,
        events.c.at,
        *(sa.cast(events.c[name], sa.Text).label(name) for name in FIELDS if name != "at"),
    ).order_by(events.c.id)
    connection = op.get_bind()
    last: dict[int, tuple[int, str]] = {}  # each lane's last place and hash so far
    chained = []
    for row in connection.execute(read).mappings():
        text = {name: row[name] for name in FIELDS}
        text["at"] = time_text(row["at"])
        lane = lane_of(row["chat_id"])
        seq, previous = last.get(lane, (0, GENESIS))
        last[lane] = (seq + 1, row_hash(lane, seq + 1, previous, text))
        chained.append({"row": row["id"], "new_lane": lane, "new_seq": seq + 1, "new_hash": last[lane][1]})
    if chained:
        chain = (
            sa.update(events)
            .where(events.c.id == sa.bindparam("row"))
            .values(lane=sa.bindparam("new_lane"), seq=sa.bindparam("new_seq"), hash=sa.bindparam("new_hash"))
        )
        connection.execute(chain, chained)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _POSTGRES_DOWN:
            op.execute(statement)
    op.drop_index("ix_tarry_decision_events_lane", _TABLE)
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_column("hash")
        batch.drop_column("seq")
        batch.drop_column("lane")
