"""The images' Python dependencies, from uv.lock and each Dockerfile's own `uv sync` flags: the
general image (discovery, inspector, planner, gateway) carries no Spark stack, the executor
image carries icepack-core[spark], and `make setup` still installs everything.

The slow test replays the general Dockerfile's build stage (its COPY and `uv sync` steps, in
order, into a scratch context) and runs the installed `icepack` there: no Docker engine needed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deploy_helpers import need
from tests.support.image_deps import (
    EXECUTOR_DOCKERFILE,
    GENERAL_DOCKERFILE,
    REPO,
    SPARK_STACK,
    export,
    image_dependencies,
    instructions,
    member_name,
    selection,
    sync_steps,
    uv,
)

GENERAL_SERVICES = {"icepack-discovery", "icepack-inspector", "icepack-planner", "icepack-gateway"}


@pytest.fixture(autouse=True)
def _uv() -> None:
    need(uv() is not None, "uv is not on PATH")


@pytest.mark.parametrize("path", [GENERAL_DOCKERFILE, EXECUTOR_DOCKERFILE], ids=lambda p: p.name)
def test_both_sync_steps_select_the_same_packages(path: Path) -> None:
    # Layer 1 installs the third-party dependencies of the selection, layer 2 adds the
    # workspace code; a different selection in layer 2 would silently add or drop packages.
    steps = sync_steps(path)
    assert len(steps) == 2, steps
    deps_layer, code_layer = steps
    assert "--no-install-workspace" in deps_layer and "--no-editable" in code_layer
    assert selection(deps_layer) == selection(code_layer)
    assert "--frozen" in deps_layer and "--no-dev" in deps_layer
    assert "--all-packages" not in deps_layer, "selects the executor and its Spark extra"


def test_general_image_has_no_spark_stack() -> None:
    deps = image_dependencies(GENERAL_DOCKERFILE)
    assert deps.members == GENERAL_SERVICES | {"icepack-core"}
    assert deps.distributions & SPARK_STACK == set()
    # What the services do need is there (PyIceberg reads zstd manifests with zstandard).
    assert {"pyiceberg", "pyarrow", "asyncpg", "starlette", "zstandard"} <= deps.distributions


def test_executor_image_has_the_spark_extra() -> None:
    deps = image_dependencies(EXECUTOR_DOCKERFILE)
    assert deps.members == {"icepack-executor", "icepack-core"}
    assert deps.distributions >= SPARK_STACK


def test_every_service_ships_in_exactly_one_image() -> None:
    members = {
        member_name(str(p.parent.relative_to(REPO)))
        for p in (REPO / "services").glob("*/pyproject.toml")
    }
    general = image_dependencies(GENERAL_DOCKERFILE).members - {"icepack-core"}
    executor = image_dependencies(EXECUTOR_DOCKERFILE).members - {"icepack-core"}
    assert general | executor == members
    assert general & executor == set()


def test_make_setup_still_installs_the_spark_extra() -> None:
    # The dev environment (`make setup`, `make lint`) runs every test, Spark ones included.
    makefile = (REPO / "Makefile").read_text()
    line = next(ln.strip() for ln in makefile.splitlines() if "uv sync --frozen" in ln)
    args = shlex.split(line)[2:]
    deps = export(selection(args))
    assert deps.distributions >= SPARK_STACK
    assert "icepack-executor" in deps.members


def replay_build_stage(dockerfile: Path, context: Path, venv: Path) -> None:
    """Run ``dockerfile``'s first stage here: COPY from the repository into ``context`` and
    each ``uv sync`` with the stage's ENV (only the venv path is moved under ``context``)."""
    steps = instructions(dockerfile)
    first = next(i for i, (w, _) in enumerate(steps) if w == "FROM")
    end = next(i for i, (w, _) in enumerate(steps) if w == "FROM" and i > first)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    ran = 0
    for word, args in steps[first + 1 : end]:
        if word == "ENV":
            env |= dict(item.split("=", 1) for item in shlex.split(args))
        elif word == "COPY":
            *sources, dest = shlex.split(args)
            for source in sources:
                target = context / dest
                if (REPO / source).is_dir():
                    shutil.copytree(
                        REPO / source,
                        target,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / source, target)
        elif word == "RUN" and args.startswith("uv sync"):
            run_env = env | {
                "UV_PROJECT_ENVIRONMENT": str(venv),
                # The image's Python is python:3.11; here, the interpreter running the tests.
                "UV_PYTHON": sys.executable,
                # Bytecode and copies change how, not what, is installed; skip the slow part.
                "UV_COMPILE_BYTECODE": "0",
                "UV_LINK_MODE": "hardlink",
            }
            uv_bin = uv()
            assert uv_bin is not None
            result = subprocess.run(
                [uv_bin, *shlex.split(args)[1:]],
                cwd=context,
                env=run_env,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert result.returncode == 0, f"{args}: {result.stderr[-3000:]}"
            ran += 1
    assert ran == 2, f"{dockerfile.name}: expected two uv sync steps, replayed {ran}"


@pytest.mark.slow
def test_general_image_build_installs_no_spark_and_runs(tmp_path: Path) -> None:
    context, venv = tmp_path / "app", tmp_path / "app" / ".venv"
    context.mkdir()
    replay_build_stage(GENERAL_DOCKERFILE, context, venv)
    python = venv / "bin" / "python"
    listing = subprocess.run(
        [
            python,
            "-c",
            "import importlib.metadata as m\n"
            "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    installed = {name.lower().replace("_", "-") for name in listing}
    assert installed & SPARK_STACK == set()
    assert GENERAL_SERVICES | {"icepack-core"} <= installed
    assert "icepack-executor" not in installed
    # The code is installed (not editable), so the build context could go: run from elsewhere.
    code = (
        "import importlib.metadata as m, sys\n"
        "import icepack_gateway.app, icepack_core.spark\n"
        "names = sorted(e.name for e in m.entry_points(group='icepack.services'))\n"
        "print(','.join(names), 'pyspark' in sys.modules)\n"
    )
    shutil.rmtree(context / "libs")
    shutil.rmtree(context / "services")
    probe = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["discovery,gateway,inspector,planner", "False"]
    # `icepack maintain` names the missing extra instead of a traceback.
    maintain = subprocess.run(
        [venv / "bin" / "icepack", "maintain", "lake.db.events"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={
            "PATH": os.environ["PATH"],
            "COLUMNS": "300",
            "ICEPACK_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        },
    )
    assert maintain.returncode == 2, maintain.stdout + maintain.stderr
    assert "pip install 'icepack-core[spark]'" in maintain.stderr
    assert "Traceback" not in maintain.stderr
