"""What each image installs, computed from ``uv.lock`` the way its Dockerfile computes it.

An image's selection is the flags of its ``RUN uv sync`` steps (``--package``, ``--no-dev``,
...), read from the Dockerfile itself, given to ``uv export`` (same resolver, same lock, nothing
installed). The tests in tests/deploy check the sets; tests/runtime blocks the modules the
general image lacks to run the services as that image would.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERAL_DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
EXECUTOR_DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile.executor"
# `uv sync` flags that say how to install, not what: the two build steps differ only in these.
INSTALL_ONLY_FLAGS = frozenset({"--no-install-workspace", "--no-editable"})
# The Spark engines' clients and what only they pull in (icepack-core[spark]).
SPARK_STACK = frozenset(
    {
        "pyspark",
        "py4j",
        "pyhive",
        "thrift",
        "thrift-sasl",
        "pure-sasl",
        "grpcio",
        "grpcio-status",
        "pandas",
    }
)


def uv() -> str | None:
    """The uv binary: the one running us under ``uv run``, else the one on PATH."""
    return os.environ.get("UV") or shutil.which("uv")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, line continuations joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def sync_steps(path: Path) -> list[list[str]]:
    """The arguments after ``uv sync`` of every ``RUN uv sync ...`` in ``path``."""
    steps = []
    for word, args in instructions(path):
        words = shlex.split(args)
        if word == "RUN" and words[:2] == ["uv", "sync"]:
            steps.append(words[2:])
    return steps


def selection(args: list[str]) -> list[str]:
    """What a ``uv sync`` selects: its arguments without the install-only flags."""
    return [a for a in args if a not in INSTALL_ONLY_FLAGS]


@dataclass(frozen=True)
class DependencySet:
    """Third-party distributions (normalised names) and workspace members (project names)."""

    distributions: frozenset[str]
    members: frozenset[str]


def member_name(path: str) -> str:
    with (REPO / path / "pyproject.toml").open("rb") as f:
        return normalise(tomllib.load(f)["project"]["name"])


def export(sync_selection: list[str]) -> DependencySet:
    """``uv export`` of the lock for a ``uv sync`` selection (``--frozen``: lock as is)."""
    binary = uv()
    if binary is None:
        raise RuntimeError("uv is not on PATH")
    result = subprocess.run(
        [
            binary,
            "export",
            "--format",
            "requirements.txt",
            "--no-hashes",
            "--no-header",
            "--no-annotate",
            *sync_selection,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"uv export {' '.join(sync_selection)} failed: {result.stderr}")
    distributions, members = set(), set()
    for line in result.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path = line.removeprefix("-e").strip()
        if path.startswith("./"):
            members.add(member_name(path))
            continue
        match = re.match(r"[A-Za-z0-9._-]+", line)
        assert match is not None, f"unparsed export line {line!r}"
        distributions.add(normalise(match.group(0)))
    return DependencySet(frozenset(distributions), frozenset(members))


def image_dependencies(dockerfile: Path) -> DependencySet:
    """What ``dockerfile``'s ``uv sync`` steps install (they must all select the same)."""
    selections = {tuple(selection(step)) for step in sync_steps(dockerfile)}
    if len(selections) != 1:
        raise AssertionError(f"{dockerfile.name}: uv sync steps select differently: {selections}")
    (chosen,) = selections
    return export(list(chosen))


def top_level_modules(distributions: frozenset[str]) -> frozenset[str]:
    """The importable top-level modules of ``distributions`` in this environment (stdlib
    names excluded, whatever a distribution's metadata claims)."""
    found = {
        module
        for module, dists in packages_distributions().items()
        if any(normalise(d) in distributions for d in dists)
    }
    return frozenset(found - set(sys.stdlib_module_names))


def modules_missing_from_general_image() -> frozenset[str]:
    """Top-level modules the executor image has and the general image does not."""
    general = image_dependencies(GENERAL_DOCKERFILE).distributions
    executor = image_dependencies(EXECUTOR_DOCKERFILE).distributions
    return top_level_modules(executor - general)
