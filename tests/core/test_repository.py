"""The repository itself: self-contained, and its design document keeps up with the code.

* No tracked file names the sibling directory that development once shared, or an absolute path
  of the machine it was written on; tracked symlinks stay inside the repository.
* ``docs/architecture.md`` has the sections the code cites by name, and documents every table and
  view of schema ``icepack``, every event topic and every ``ICEPACK_*`` variable the code reads.
* The README's "How it fits together" links the design document.

Fast and service-free: it reads files and imports ``icepack_core`` only.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import icepack_core.settings as settings_module
from icepack_core.settings import Settings
from icepack_core.types import Topic

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
SCHEMA = REPO / "libs" / "icepack_core" / "src" / "icepack_core" / "db" / "schema.sql"
SOURCE_ROOTS = ("libs", "services")

# Built from parts so that this file does not contain the text it looks for; a name that
# merely starts with it (a "-root" suffix) is another folder.
SHARED_DIR = re.compile(re.escape(".." + "/shared") + r"(?![\w-])")
WORK_DIR = re.compile(r"(?<![\w.-])" + re.escape("/" + "work/"))

# The headings code comments cite as (docs/architecture.md, "<heading>").
SECTIONS = (
    "Shape",
    "Layout",
    "Schema",
    "Events",
    "Work items",
    "Jobs, leases, fences, locks",
    "Metrics contract",
    "Health",
    "Policies and recommendations",
    "Action intents",
    "Spark execution",
    "Catalogs",
    "Interfaces",
    "Settings",
    "Telemetry",
    "Deploy",
    "Testing with real components",
    "Design decisions and corrections",
)
# ICEPACK_ literals in the sources that are not environment variables.
NOT_VARIABLES = {"ICEPACK_ERROR": "IcepackError.code, an error code"}
_VARIABLE = re.compile(r"ICEPACK_[A-Z0-9_]+")


def tracked_files() -> list[Path]:
    """Every file git tracks in this checkout (the contents of a fresh clone)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"`git ls-files` failed in {REPO}: {exc}")
    return [REPO / name for name in listing.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file's text, or None for binary files (NUL bytes or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def sections(markdown: str) -> dict[str, str]:
    """``## heading`` -> the text up to the next ``## `` heading."""
    found: dict[str, str] = {}
    heading: str | None = None
    lines: list[str] = []
    for line in [*markdown.splitlines(), "## "]:
        if line.startswith("## "):
            if heading is not None:
                found[heading] = "\n".join(lines)
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    return found


@pytest.fixture(scope="module")
def doc() -> dict[str, str]:
    assert DOC.is_file(), "docs/architecture.md is missing"
    return sections(DOC.read_text(encoding="utf-8"))


def backticked(text: str) -> set[str]:
    """Every `code span` of a Markdown text."""
    return set(re.findall(r"`([^`\n]+)`", text))


# --- self-contained -------------------------------------------------------------------------


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    needles = [SHARED_DIR, WORK_DIR]
    if len(REPO.parts) > 2:  # the checkout's own absolute path, wherever it was cloned
        needles.append(re.compile(r"(?<![\w.-])" + re.escape(str(REPO)) + r"(?![\w.-])"))
    offenders = []
    for path in tracked_files():
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("tests/data/") or path.is_symlink() or not path.is_file():
            continue
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(needle.search(line) for needle in needles):
                offenders.append(f"{relative}:{number}: {line.strip()[:120]}")
    assert not offenders, "paths outside the repository:\n" + "\n".join(offenders)


def test_tracked_symlinks_point_inside_the_repository() -> None:
    outside = []
    for path in tracked_files():
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(REPO) or not target.exists():
                outside.append(f"{path.relative_to(REPO)} -> {path.readlink()}")
    assert not outside, "symlinks leaving the repository or dangling:\n" + "\n".join(outside)


# --- the design document --------------------------------------------------------------------


def cited_sections() -> Iterator[tuple[str, str]]:
    """(file, heading) for every ``docs/architecture.md, "<heading>"`` citation in the code
    (libs/, services/, go-inspector/, scripts/, bench/)."""
    code_roots = ("libs/", "services/", "go-inspector/", "scripts/", "bench/")
    for path in tracked_files():
        relative = path.relative_to(REPO).as_posix()
        if not relative.startswith(code_roots) or path.suffix not in (".py", ".go", ".sql", ".sh"):
            continue
        text = text_of(path) or ""
        # Citations wrap across comment lines: join them first.
        flat = re.sub(r"\s*\n\s*(#|//|--)?\s*", " ", text)
        for heading in re.findall(r'docs/architecture\.md, "([^"]+)"', flat):
            yield relative, heading


def test_the_document_has_every_section_and_every_cited_one(doc: dict[str, str]) -> None:
    missing = [s for s in SECTIONS if s not in doc]
    dangling = [
        f"{where} cites {heading!r}" for where, heading in cited_sections() if heading not in doc
    ]
    assert not missing, f"docs/architecture.md lacks the sections {missing}"
    assert not dangling, "citations of missing sections:\n" + "\n".join(dangling)


def schema_objects() -> set[str]:
    sql = SCHEMA.read_text(encoding="utf-8")
    return set(re.findall(r"^CREATE (?:TABLE|VIEW) icepack\.(\w+)", sql, re.MULTILINE))


def test_schema_section_documents_every_table_and_view(doc: dict[str, str]) -> None:
    objects = schema_objects()
    assert {"tables", "events", "jobs", "v_queue"} <= objects, "schema.sql did not parse"
    spans = backticked(doc.get("Schema", ""))
    missing = sorted(o for o in objects if o not in spans and f"icepack.{o}" not in spans)
    assert not missing, f"docs/architecture.md, Schema, does not document {missing}"


def test_events_section_documents_every_topic(doc: dict[str, str]) -> None:
    spans = backticked(doc.get("Events", ""))
    missing = sorted(t.value for t in Topic if t.value not in spans)
    assert not missing, f"docs/architecture.md, Events, does not document the topics {missing}"


class _RecordingEnviron(dict[str, str]):
    """An empty environment that remembers which variables were asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.append(key)
        return default


def catalog_variable_templates(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """``ICEPACK_CATALOG_<NAME>_*``: the per-catalog secrets settings reads, found by asking it."""
    environ = _RecordingEnviron()
    monkeypatch.setattr(settings_module, "os", SimpleNamespace(environ=environ))
    Settings(catalogs=[{"name": "probe", "type": "glue"}])
    prefix = "ICEPACK_CATALOG_PROBE_"
    templates = {
        f"ICEPACK_CATALOG_<NAME>_{k.removeprefix(prefix)}"
        for k in environ.asked
        if k.startswith(prefix)
    }
    assert templates, "settings read no ICEPACK_CATALOG_<NAME>_* variable (probe broken?)"
    return templates


def variables_in_sources() -> dict[str, str]:
    """ICEPACK_* names in the string literals of libs/ and services/ -> where one was seen.

    Names ending in ``_`` are prefixes of templates (``ICEPACK_CATALOG_{name}_...``)."""
    found: dict[str, str] = {}
    for root in SOURCE_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for name in _VARIABLE.findall(node.value):
                        if not name.endswith("_") and name not in NOT_VARIABLES:
                            found.setdefault(name, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_settings_section_documents_every_variable(
    doc: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = backticked(doc.get("Settings", ""))
    fields = {
        f"ICEPACK_{name.upper()}": "icepack_core.settings.Settings"
        for name in Settings.model_fields
    }
    templates = {
        t: "icepack_core.settings (per catalog)" for t in catalog_variable_templates(monkeypatch)
    }
    expected = {**variables_in_sources(), **fields, **templates}
    missing = sorted(
        f"{name} (from {where})" for name, where in expected.items() if name not in spans
    )
    assert not missing, "docs/architecture.md, Settings, does not document:\n  " + "\n  ".join(
        missing
    )


def test_settings_section_names_no_variable_nothing_reads(doc: dict[str, str]) -> None:
    documented = {
        n
        for span in backticked(doc.get("Settings", ""))
        for n in _VARIABLE.findall(span)
        if not n.endswith("_")
    }
    known = {f"ICEPACK_{name.upper()}" for name in Settings.model_fields}
    for path in tracked_files():  # scripts, tests, Go and images read some too
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("docs/") or relative == "README.md" or not path.is_file():
            continue
        known |= set(_VARIABLE.findall(text_of(path) or ""))
    unknown = sorted(documented - known)
    assert not unknown, f"docs/architecture.md, Settings, names variables nothing reads: {unknown}"


def test_readme_how_it_fits_together_links_the_design_document() -> None:
    readme = sections((REPO / "README.md").read_text(encoding="utf-8"))
    assert "How it fits together" in readme, "README.md lacks '## How it fits together'"
    assert "](docs/architecture.md)" in readme["How it fits together"], (
        "README.md, 'How it fits together', does not link docs/architecture.md"
    )
