"""A PostgreSQL connection killed while a finished tool's result is saved: the result is kept, the tool ran once."""

from __future__ import annotations

import psycopg
import pytest

from tarry import tool
from tarry.store import Store
from tests.store.test_failures import pay_model

DROP_ONCE = """
CREATE SEQUENCE tarry_test_fault;
CREATE FUNCTION tarry_test_drop_connection() RETURNS trigger AS $$
BEGIN
    IF NEW.role = 'tool' AND nextval('tarry_test_fault') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER tarry_test_drop_once BEFORE INSERT ON tarry_messages
    FOR EACH ROW EXECUTE FUNCTION tarry_test_drop_connection();
"""


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.mark.parametrize("lease", [0.5, 30.0])
async def test_a_result_whose_save_lost_the_connection_is_saved_again_not_called_interrupted(
    postgres_url: str, lease: float
) -> None:
    runs: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pays; not safe to run twice."""
        runs.append(amount)
        return "paid"

    async with Store(postgres_url, lease=lease) as store:
        await store.setup()
        with psycopg.connect(plain(postgres_url), autocommit=True) as connection:
            connection.execute(DROP_ONCE)  # the first tool result's INSERT kills its own connection
        chat = await store.create_chat(pay_model(), [pay])
        reply = await chat.ask("Pay")
        assert reply is not None and reply.content == "Done."
        assert chat.messages[2].content == "paid"
        assert runs == [5]
        with psycopg.connect(plain(postgres_url)) as connection:
            fired = connection.execute("SELECT last_value FROM tarry_test_fault").fetchone()
        assert fired is not None and fired[0] >= 2, "the first save was not dropped: the test tested nothing"
    async with Store(postgres_url) as other:
        again = await other.load_chat(chat.id, pay_model(), [pay])
        assert [message.content for message in again.messages] == ["Pay", "", "paid", "Done."]
