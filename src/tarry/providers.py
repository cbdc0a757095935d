"""Model providers: the adapter a ``"provider:model"`` string names, from the installed providers' entry points."""

from __future__ import annotations

import weakref
from importlib.metadata import entry_points

from tarry.messages import Model

_MODEL_TYPES: weakref.WeakSet[type] = weakref.WeakSet()
"""Classes that define a model's members themselves, whose instances were found to be models: checking the
protocol costs about 10 µs each time."""


def resolve_model(model: Model | str | None) -> Model | None:
    """``model`` itself, or the adapter a ``"provider:model"`` string names (from installed providers)."""
    if isinstance(model, str):
        return _provided(model)
    if model is not None and type(model) not in _MODEL_TYPES:
        _check_model(model)
    return model


def _check_model(model: object) -> None:
    """Refuse what is not a model; remember the class of one whose class defines the members itself."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model or a 'provider:model' string, got {model!r}")
    if hasattr(type(model), "name") and hasattr(type(model), "complete"):  # not only some instances
        _MODEL_TYPES.add(type(model))


def _provided(model: str) -> Model:
    """The adapter the installed provider named before the colon of ``model`` makes for the name after it."""
    provider, sep, name = model.partition(":")
    if not sep or not provider or not name:
        raise ValueError(f"A model string looks like 'provider:model', got {model!r}")
    found = entry_points(group="tarry.providers", name=provider)
    if not found:
        known = sorted(point.name for point in entry_points(group="tarry.providers"))
        raise ValueError(f"Unknown model provider {provider!r}; known: {', '.join(known) or 'none'}")
    factory = next(iter(found)).load()
    made = factory(name)
    if not isinstance(made, Model):
        raise TypeError(f"The {provider} provider made {made!r}, not a Model")
    return made
