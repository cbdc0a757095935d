"""ARCHITECTURE.md stays true: every module it names exists, and every module of the package has its place there."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import tarry

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "ARCHITECTURE.md").read_text()
PACKAGE = Path(tarry.__file__).parent


def top_level_modules() -> set[str]:
    """The modules and packages directly under ``tarry``."""
    names = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    names |= {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    return names


def resolves(name: str) -> bool:
    """Whether ``name`` (``tarry.x.y.Z``) is a module, or a name its longest importable prefix holds."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def test_every_name_the_page_gives_exists() -> None:
    named = set(re.findall(r"`(tarry(?:\.\w+)+)", PAGE))
    assert len(named) > 20
    missing = sorted(name for name in named if not resolves(name))
    assert missing == [], f"ARCHITECTURE.md names what does not exist: {missing}"


def test_every_top_level_module_has_its_place_on_the_page() -> None:
    listed = set(re.findall(r"`(\w+)`", PAGE)) | {name.split(".")[1] for name in re.findall(r"`(tarry\.\w+)", PAGE)}
    unplaced = sorted(top_level_modules() - listed)
    assert unplaced == [], f"ARCHITECTURE.md does not say where these modules belong: {unplaced}"


def test_the_layers_contract_places_every_module_with_no_exemption() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert len(config) == 1, "one contract holds the whole package"
    (layers,) = config
    assert layers["type"] == "layers"
    assert "ignore_imports" not in layers
    placed = {name.strip() for layer in layers["layers"] for name in re.split(r"[|:]", layer)}
    ours = {name.removeprefix("tarry.") for name in placed if name.startswith("tarry.")}
    assert ours == top_level_modules(), "the layers contract must place every module of tarry"
