"""The library's version: one definition, read by the package metadata (pyproject.toml's
dynamic version), every record the library writes (bundles, index ``_meta``,
calibrations) and ``lr --version``. A module of its own so that recording it imports
nothing else (the package root imports every public room)."""

from __future__ import annotations

__version__ = "0.1.0"
