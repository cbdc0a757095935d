"""A tool the model would see without a description or with untyped parameters warns where it is defined."""

from __future__ import annotations

import warnings

import pytest

from tarry import Tool, tool
from tarry.errors import TarryWarning


def test_a_tool_class_without_a_docstring_warns_at_its_definition() -> None:
    with pytest.warns(TarryWarning, match=r"Tool Nameless has no description \(give it a docstring") as caught:

        class Nameless(Tool):
            def execute(self, city: str) -> str:
                return city

    assert [record.filename for record in caught] == [__file__]


def test_untyped_parameters_are_named_in_the_warning() -> None:
    with pytest.warns(TarryWarning, match=r"has untyped parameters, city, days \(the model is told") as caught:

        class Forecast(Tool):
            """Tells the weather."""

            def execute(self, city, days, units: str = "C") -> str:  # type: ignore[no-untyped-def]
                return f"{city} {days} {units}"

    assert "no description" not in str(caught[0].message)


def test_a_decorated_function_warns_at_the_decorator() -> None:
    with pytest.warns(TarryWarning, match=r"Tool shout has no description .* untyped parameters, text ") as bare:

        @tool
        def shout(text):  # type: ignore[no-untyped-def]
            return text.upper()

    with pytest.warns(TarryWarning, match=r"Tool whisper has untyped parameters, text ") as called:

        @tool(name="whisper", description="Says it quietly.")
        def quiet(text):  # type: ignore[no-untyped-def]
            return text.lower()

    assert [record.filename for record in [*bare, *called]] == [__file__, __file__]
    assert shout("hi") == "HI"


def test_a_described_typed_tool_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Convert(Tool):
            """Converts euros."""

            def execute(self, amount: float, *extra, **options) -> str:  # type: ignore[no-untyped-def]
                return str(amount)

        @tool
        def add(a: int, b: int = 1) -> int:
            """Adds."""
            return a + b

        Convert()


def test_a_tool_without_execute_says_so_when_made() -> None:
    class Base(Tool):
        """A base for tools that share a helper; made only through its subclasses."""

    with pytest.raises(TypeError, match=r"^Base defines no execute\(\): a Tool subclass needs 'def execute"):
        Base()

    class Ping(Base):
        """Answers pong."""

        def execute(self) -> str:
            return "pong"

    assert Ping().name == "ping"
