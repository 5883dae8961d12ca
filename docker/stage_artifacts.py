"""Stage what the image build copies: ``python3 docker/stage_artifacts.py TARGET``.

``opensearch`` / ``elasticsearch``: makes sure the artifacts of the engine's lock
(``lr_opensearch/node/<engine>.lock.json``) are in the node cache (``lr node install``
fetches and checks them, once), then links them into
``docker/.artifacts/<engine>/`` with ``SHA256SUMS`` (the lock's digests, checked again inside
the build) and ``ORDER`` (the distribution first, then the plugins in install order).
Prints the engine's version (the image tag).

``project``: writes ``docker/.artifacts/project/requirements.txt``, the dependencies of
pyproject.toml plus its ``ingest`` (the document encoder on ONNX Runtime: no torch) and
``es`` extras, so that the image's dependency layer depends on that list only (not on every
edit of pyproject.toml), and ``requirements-search.txt`` for the search image (the
dependencies plus the ``es`` extra). Neither image has torch (``train``, for the host).
Prints the package version.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

from lr_opensearch.node import cache_dir, install, load_lock
from lr_opensearch.version import __version__

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy inside pip
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
PROJECT_EXTRAS = ("ingest", "es")  # the project image: documents on ONNX Runtime, no torch
SEARCH_EXTRAS = ("es",)  # the search image: no document encoder


def stage(engine: str, out_root: Path = HERE / ".artifacts") -> str:
    """Stage ENGINE's zips under ``out_root/<engine>``; returns the engine's version."""
    lock = load_lock(engine=engine)
    install(engine=engine)  # fetches (mvn) and verifies the zips when not cached yet
    store = cache_dir() / "artifacts"
    out = out_root / engine
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ordered = sorted(lock.artifacts, key=lambda a: a.role != "distribution")  # stable sort
    for artifact in ordered:
        src, dst = store / artifact.file_name, out / artifact.file_name
        try:
            os.link(src, dst)
        except OSError:  # another file system: copy
            shutil.copyfile(src, dst)
    (out / "SHA256SUMS").write_text(
        "".join(f"{a.sha256}  {a.file_name}\n" for a in ordered), encoding="utf-8")
    (out / "ORDER").write_text("".join(f"{a.file_name}\n" for a in ordered), encoding="utf-8")
    return lock.version


def stage_requirements(out_root: Path = HERE / ".artifacts") -> str:
    """Write the project image's requirements.txt; returns the package version."""
    with open(HERE.parent / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    out = out_root / "project"
    out.mkdir(parents=True, exist_ok=True)
    for name, extras in (("requirements.txt", PROJECT_EXTRAS),
                         ("requirements-search.txt", SEARCH_EXTRAS)):
        wanted = list(project["dependencies"])
        for extra in extras:
            wanted += project["optional-dependencies"][extra]
        text = "".join(f"{line}\n" for line in wanted)
        target = out / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    return __version__  # pyproject's version is dynamic: lr_opensearch/version.py


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=["opensearch", "elasticsearch", "project"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    version = stage_requirements() if args.target == "project" else stage(args.target)
    sys.stdout.write(version + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
