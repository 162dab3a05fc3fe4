"""Run go-inspector (``icepack-iceberg-inspector``, iceberg-go) and parse its JSON contract.

Selected with ``ICEPACK_METADATA_INSPECTOR=iceberg-go``. The binary reads the table from its
metadata location; it has no access to ``manifest_stats``, so it reads every manifest.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from icepack_core.errors import InspectionFailed
from icepack_core.inspection.status import TableStatus

DEFAULT_BINARY = Path("go-inspector/bin/icepack-iceberg-inspector")
TIMEOUT_SECONDS = 600.0
_REPO_ROOT = Path(__file__).resolve().parents[5]
# FileIO properties that are secrets travel in the child's environment, never on its argv
# (which any local user can read in /proc).
_SECRET_PROPS = {
    "s3.access-key-id": "AWS_ACCESS_KEY_ID",
    "s3.secret-access-key": "AWS_SECRET_ACCESS_KEY",
    "s3.session-token": "AWS_SESSION_TOKEN",
}
_PASSED_PROPS = ("s3.endpoint", "s3.region", "s3.path-style-access", "s3.force-virtual-addressing")


def resolve_binary(configured: Path | None) -> Path:
    """The go-inspector executable: the configured path, else ``go-inspector/bin/...`` in the
    working directory or the source checkout.

    Raises:
        InspectionFailed: no executable found (the message names ICEPACK_GO_INSPECTOR_PATH).
    """
    candidates = [configured] if configured else [DEFAULT_BINARY, _REPO_ROOT / DEFAULT_BINARY]
    for path in candidates:
        if path is not None and path.is_file():
            return path
    raise InspectionFailed(
        f"go-inspector not found at {', '.join(str(c) for c in candidates)}; build it "
        "(make -C go-inspector) or set ICEPACK_GO_INSPECTOR_PATH"
    )


def _command(
    exe: Path,
    identity: list[str],
    io_properties: dict[str, str],
    small_file_bytes: int | None,
    max_block_bytes: int | None,
) -> tuple[list[str], dict[str, str]]:
    """go-inspector's argv and environment: credentials travel in the environment, the other
    FileIO properties it understands as ``--prop`` arguments (argv, not a shell: nothing is
    interpreted)."""
    args = [str(exe), *identity]
    if small_file_bytes is not None:
        args += ["--small-file-bytes", str(small_file_bytes)]
    if max_block_bytes is not None:  # the bound of decompression, enforced in Go too
        args += ["--max-block-bytes", str(max_block_bytes)]
    env = dict(os.environ)
    for key, value in io_properties.items():
        if key in _SECRET_PROPS:
            env[_SECRET_PROPS[key]] = value
        elif key in _PASSED_PROPS:
            args += ["--prop", f"{key}={value}"]
    return args, env


async def inspect_with_go(
    metadata_location: str,
    *,
    catalog: str,
    namespace: str,
    table: str,
    binary: Path | None = None,
    io_properties: dict[str, str] | None = None,
    small_file_bytes: int | None = None,
    max_block_bytes: int | None = None,
    time_limit: float = TIMEOUT_SECONDS,
) -> TableStatus:
    """Inspect one table with go-inspector.

    Raises:
        InspectionFailed: the binary is missing, failed, timed out or reported an error.
    """
    args, env = _command(
        resolve_binary(binary),
        [
            "--metadata-location",
            metadata_location,
            "--catalog",
            catalog,
            "--namespace",
            namespace,
            "--table",
            table,
        ],
        io_properties or {},
        small_file_bytes,
        max_block_bytes,
    )
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise InspectionFailed(
            f"go-inspector timed out after {time_limit:g}s on {metadata_location}"
        ) from None
    return _status_of(proc.returncode, out, err, metadata_location)


def _status_of(code: int | None, out: bytes, err: bytes, metadata_location: str) -> TableStatus:
    """The status go-inspector printed, or InspectionFailed with its error (its JSON error
    document, else the end of its stderr)."""
    try:
        doc = json.loads(out or b"null")
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        raise InspectionFailed(str(doc["error"].get("message") or "go-inspector failed"))
    if code != 0 or not isinstance(doc, dict):
        detail = err.decode(errors="replace").strip()[-2000:] or f"exit code {code}"
        raise InspectionFailed(f"go-inspector failed on {metadata_location}: {detail}")
    try:
        return TableStatus.model_validate(doc)
    except ValueError as exc:
        raise InspectionFailed(f"go-inspector printed an invalid status: {exc}") from exc
