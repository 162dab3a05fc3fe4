"""Named SQL queries, loaded once from the ``sql/*.sql`` files beside this module.

Each block starts with ``-- name: <noun_verb>`` followed by a one-line purpose comment and the
statement. Callers refer to queries by name; no module builds SQL for state changes at run time.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a ``.sql`` file into ``{name: statement}``.

    Raises:
        ValueError: a name appears twice or a block holds no statement.
    """
    found: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";").strip()
        name = match.group(1)
        if not statement:
            raise ValueError(f"query {name!r} has no statement")
        if name in found:
            raise ValueError(f"query {name!r} is defined twice")
        found[name] = statement
    return found


@cache
def all_queries() -> dict[str, str]:
    """Every named query of every ``sql/*.sql`` file."""
    merged: dict[str, str] = {}
    for entry in sorted(resources.files("icepack_core.db").joinpath("sql").iterdir(), key=str):
        if not entry.name.endswith(".sql"):
            continue
        for name, statement in parse_queries(entry.read_text(encoding="utf-8")).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined in two files")
            merged[name] = statement
    return merged


def load_query(name: str) -> str:
    """The SQL text of one named query.

    Raises:
        KeyError: no query has that name.
    """
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r}") from None
