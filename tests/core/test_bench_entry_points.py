"""Every benchmark ``make bench`` runs can at least be imported.

Benchmarks are not tests and ``make test`` does not run them, so a module moved under them
(an import left pointing at the old place) would only show when someone runs ``make bench``.
Importing each entry module runs its imports but not its ``main`` (guarded by ``__name__``).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bench_modules() -> list[str]:
    """The modules of the ``bench`` target's ``uv run python -m ...`` lines."""
    target = re.search(r"^bench:.*?\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert target, "the Makefile has no bench target"
    return re.findall(r"uv run python -m (bench[\w.]*)", target.group(1))


def test_make_bench_runs_every_benchmark_package() -> None:
    packages = {p.parent.name for p in (REPO / "bench").glob("*/__main__.py")}
    assert {m.split(".")[1] for m in bench_modules()} == packages


@pytest.mark.parametrize("module", bench_modules())
def test_bench_entry_module_imports(module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} not found"
    importlib.import_module(f"{module}.__main__" if spec.submodule_search_locations else module)
