"""Locations compared as the file system sees them: the one normalisation of Icepack.

Every check that asks "is this file that table's?" (the location-overlap check, the deletion
confinement rule, the expiry ledger's "still live" comparison, ``referenced_files``) compares
paths through ``parse_location`` so that two spellings of one file compare equal.

The parse mirrors Hadoop's ``org.apache.hadoop.fs.Path(String)``, which Iceberg's Hadoop file IO
and Spark's listings go through (the tests use it as the oracle):

- a scheme is the text before the first ``:`` when no ``/`` comes earlier; an authority follows
  ``//``; the rest is the path, taken literally: ``?`` and ``#`` are ordinary characters (a URL
  parser would cut the path there, so ``s3://b/sandbox/t?/../../prod/f`` would look like a file
  of ``sandbox/t``);
- repeated separators collapse, ``.`` segments go, ``seg/..`` pairs cancel (a ``..`` above the
  root stays, as ``java.net.URI.normalize`` keeps it), and trailing separators go.

and then folds what ``Path`` leaves to the file system, so that the result names one object:

- scheme case, and the aliases of one store (``s3a``/``s3n`` are ``s3``; ``gcs`` is ``gs``;
  ``wasb[s]``/``abfss`` are ``abfs``, with the account's ``blob`` endpoint read as ``dfs``);
- authority case (host names are case-insensitive; S3 and GCS bucket and Azure container names
  are lower-case) and a store's default port (``hdfs://nn`` is ``hdfs://nn:8020``);
- a ``file:`` authority (the local file system ignores it: ``file://x/a`` is ``/a``), and a
  location with no scheme is a local path (Hadoop's default file system).

Path case is compared exactly: every store Icepack reaches (S3, GCS, ADLS, HDFS, a Linux local
file system) is case-sensitive in paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One store, several schemes (Hadoop's connectors and Azure's two endpoints).
SCHEME_ALIASES = {
    "s3a": "s3",
    "s3n": "s3",
    "gcs": "gs",
    "wasb": "abfs",
    "wasbs": "abfs",
    "abfss": "abfs",
}
# A scheme's default port, as its Hadoop file system fills it in (``hdfs://nn`` is ``nn:8020``).
DEFAULT_PORTS = {
    "hdfs": "8020",
    "webhdfs": "9870",
    "swebhdfs": "9871",
    "http": "80",
    "https": "443",
}
# Azure: ``wasb`` reaches an account through its blob endpoint, ``abfs`` through its dfs one.
_AZURE_BLOB = ".blob.core.windows.net"
_AZURE_DFS = ".dfs.core.windows.net"
# Object stores (schemes as folded above): no Hadoop ``FileSystem`` in a Spark that has only
# Iceberg's cloud bundles, and no local path for the executor's in-process reader.
OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "abfs", "oss"})
# RFC 3986 scheme syntax (java.net.URI refuses anything else).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


class LocationError(ValueError):
    """A location that names no file: empty, relative, or with an invalid scheme."""


@dataclass(frozen=True)
class Location:
    """A normalised location: ``scheme://authority/path``.

    ``path`` is absolute, ``/``-separated, without empty or ``.`` segments and without a
    trailing separator (the root is ``/``); a ``..`` remains only above the root.
    """

    scheme: str
    authority: str
    path: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    @property
    def escapes_root(self) -> bool:
        """Whether a ``..`` climbs above the root (stores disagree on what that names)."""
        return self.path == "/.." or self.path.startswith("/../")

    def contains(self, other: Location) -> bool:
        """Whether ``other`` is this location or under it (at a separator boundary: ``…/t``
        does not contain ``…/t_v2``). Neither may climb above its root."""
        if self.escapes_root or other.escapes_root:
            return False
        if (self.scheme, self.authority) != (other.scheme, other.authority):
            return False
        if self.path == "/" or self.path == other.path:
            return True
        return other.path.startswith(self.path + "/")

    def overlaps(self, other: Location) -> bool:
        """Whether one location contains the other. Conservative where the spelling leaves
        it open: a location above its root overlaps everything on its store, and an empty
        authority (``hdfs:///x``: the default file system's) matches any authority."""
        if self.scheme != other.scheme:
            return False
        authorities = {self.authority, other.authority}
        if len(authorities) > 1 and "" not in authorities:
            return False
        if self.escapes_root or other.escapes_root:
            return True
        a, b = Location(self.scheme, "", self.path), Location(self.scheme, "", other.path)
        return a.contains(b) or b.contains(a)


def _split(text: str) -> tuple[str | None, str | None, str]:
    """(scheme, authority, path) as ``org.apache.hadoop.fs.Path(String)`` splits them."""
    scheme: str | None = None
    start = 0
    colon, slash = text.find(":"), text.find("/")
    if colon != -1 and (slash == -1 or colon < slash):
        scheme, start = text[:colon], colon + 1
    authority: str | None = None
    if text.startswith("//", start) and len(text) - start > 2:
        next_slash = text.find("/", start + 2)
        end = next_slash if next_slash > 0 else len(text)
        authority, start = text[start + 2 : end], end
    return scheme, authority, text[start:]


def _normal_path(path: str) -> str:
    """Collapse separators, drop ``.``, cancel ``seg/..`` (``java.net.URI.normalize``)."""
    kept: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == ".." and kept and kept[-1] != "..":
            kept.pop()
        else:
            kept.append(segment)
    return "/" + "/".join(kept)


def _authority(scheme: str, authority: str) -> str:
    if scheme == "file":
        return ""
    folded = authority.lower()
    host, colon, port = folded.rpartition(":")
    if colon and "]" not in port and port == DEFAULT_PORTS.get(scheme):
        folded = host
    if scheme == "abfs" and folded.endswith(_AZURE_BLOB):
        folded = folded[: -len(_AZURE_BLOB)] + _AZURE_DFS
    return folded


def parse_location(text: str) -> Location:
    """``text`` as the file system reads it (module doc).

    Raises:
        LocationError: ``text`` is empty, relative, or has an invalid scheme.
    """
    raw = text.strip()
    if not raw:
        raise LocationError("an empty location names no file")
    scheme, authority, path = _split(raw)
    if scheme is not None and not _SCHEME.fullmatch(scheme):
        raise LocationError(f"location {text!r}: {scheme!r} is not a valid scheme")
    folded = (scheme or "file").lower()
    folded = SCHEME_ALIASES.get(folded, folded)
    if not path.startswith("/") and (path or authority is None):
        raise LocationError(f"location {text!r} is relative; a file location must be absolute")
    return Location(folded, _authority(folded, authority or ""), _normal_path(path))


def normalize_location(text: str) -> str:
    """``parse_location(text)`` as a string: equal strings name the same file.

    Raises:
        LocationError: as ``parse_location``.
    """
    return str(parse_location(text))


def location_key(text: str) -> str:
    """The comparison key of a path read from table metadata: ``normalize_location``, or the
    text itself when it names no valid location (such a path can then match only itself;
    sets built with this function only ever *keep* files, never license a deletion)."""
    try:
        return normalize_location(text)
    except LocationError:
        return text


def locations_overlap(a: str, b: str) -> bool:
    """Whether one location equals or contains the other (``Location.overlaps``).

    Raises:
        LocationError: either names no valid location.
    """
    return parse_location(a).overlaps(parse_location(b))


def has_dot_segments(text: str) -> bool:
    """Whether the path of ``text`` spells a ``.`` or ``..`` segment. Iceberg never writes one,
    and file IOs disagree on it (Hadoop resolves it, S3FileIO keeps it in the object key)."""
    _scheme, _authority_text, path = _split(text.strip())
    return any(segment in (".", "..") for segment in path.split("/"))


def object_store_scheme(text: str) -> str | None:
    """The folded scheme of ``text`` when it names an object store (``s3a://b/k`` gives
    ``s3``), else None (a file system, or no valid location)."""
    try:
        scheme = parse_location(text).scheme
    except LocationError:
        return None
    return scheme if scheme in OBJECT_STORE_SCHEMES else None
