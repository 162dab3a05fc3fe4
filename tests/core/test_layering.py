"""The package map in docs/architecture.md ("Layout"), enforced: no layer imports one above it.

Every import in ``icepack_core`` (top-level and function-local alike) is read with ``ast`` and
checked against ``LAYERS``; services may use any library layer but never another service.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "libs" / "icepack_core" / "src" / "icepack_core"
SERVICES = REPO / "services"

# Lowest first. A module may import its own layer and any layer below, nothing above.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        {"types", "errors", "decompression"},
        {"telemetry"},
        {"settings"},
        {"intents", "policy"},
        {"db", "spark"},
        {"queue", "access"},
        {"runtime", "notify"},
        {"discovery", "polaris"},
        {"inspection"},
        {"safety"},
        {"planning"},
        {"execution"},
        {"local"},
        {"cli"},
    )
)
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
SERVICE_PACKAGES = {f"icepack_{p.name}" for p in SERVICES.iterdir() if (p / "src").is_dir()}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import statement in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "icepack_core":  # `from icepack_core import x`: x is the module
                found.extend((node.lineno, f"icepack_core.{a.name}") for a in node.names)
            else:
                found.append((node.lineno, node.module))
    return found


def top_package(module: str) -> str | None:
    """``icepack_core.queue.jobs`` -> ``queue``; ``None`` for modules outside icepack_core."""
    parts = module.split(".")
    return parts[1] if parts[0] == "icepack_core" and len(parts) > 1 else None


def core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if p.name != "__init__.py" or p.parent != CORE)


def test_every_core_package_has_a_layer() -> None:
    packages = {p.relative_to(CORE).parts[0].removesuffix(".py") for p in core_modules()}
    assert packages - set(RANK) == set(), "add new packages to LAYERS and docs/architecture.md"


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_no_core_module_imports_a_higher_layer(path: Path) -> None:
    own = path.relative_to(CORE).parts[0].removesuffix(".py")
    upward = []
    for line, module in imported_modules(path):
        if module.split(".")[0] in SERVICE_PACKAGES:
            upward.append(f"line {line}: {module} (a service)")
        target = top_package(module)
        if target is not None and RANK[target] > RANK[own]:
            upward.append(f"line {line}: {module} ({target} is above {own})")
    assert upward == []


@pytest.mark.parametrize("service", sorted(SERVICE_PACKAGES))
def test_no_service_imports_another(service: str) -> None:
    root = SERVICES / service.removeprefix("icepack_") / "src" / service
    others = SERVICE_PACKAGES - {service}
    crossing = [
        f"{path.name}:{line}: {module}"
        for path in sorted(root.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[0] in others
    ]
    assert crossing == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule is only as good as the import reader: it must see function-local imports."""
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from icepack_core.cli.app import main\nfrom icepack_core import db\n"
    )
    assert sorted(imported_modules(module)) == [(2, "icepack_core.cli.app"), (3, "icepack_core.db")]


# The shared vocabulary (docs/architecture.md, "Layout"): each is defined once, in types.py.
VOCABULARY = (
    "Action",
    "PolicyType",
    "IssueCode",
    "Severity",
    "Health",
    "JobState",
    "Topic",
    "TableRef",
)


def test_the_vocabulary_is_defined_once() -> None:
    definitions: dict[str, list[str]] = {name: [] for name in VOCABULARY}
    for root in (CORE, SERVICES):
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and node.name in definitions:
                    definitions[node.name].append(str(path.relative_to(REPO)))
    assert {name: where for name, where in definitions.items() if len(where) != 1} == {}
    assert all(
        where == ["libs/icepack_core/src/icepack_core/types.py"] for where in definitions.values()
    )
