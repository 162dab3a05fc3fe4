"""Operator API tokens: create (shown once), verify, revoke.

A token reads ``icepack_<key_id>_<secret>``. ``key_id`` (12 random lower-case letters and digits)
is public and finds the row; the database keeps only the SHA-256 of the whole token, and the
presented token's hash is compared with ``hmac.compare_digest`` so the comparison takes the same
time wherever the bytes differ. A revoked token stays in the table (audit trail) and is refused
with its own error, so an operator can tell "revoked" from "mistyped".

A token has a scope: ``write`` (the default, and what every token made before scopes was) may
call every endpoint; ``read`` may only read (``TokenInfo.may_write`` is False), which is what a
UI reader needs when ``ICEPACK_GATEWAY_READ_AUTH`` is on.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import (
    TokenInvalid,
    TokenMissing,
    TokenNameTaken,
    TokenNotFound,
    TokenRevoked,
)

PREFIX = "icepack"
_KEY_ALPHABET = string.ascii_lowercase + string.digits
_KEY_LENGTH = 12
# 32 random bytes: far beyond guessing, and short enough for an environment variable.
_SECRET_BYTES = 32
_TOKEN = re.compile(rf"^{PREFIX}_([a-z0-9]{{{_KEY_LENGTH}}})_([A-Za-z0-9_-]{{20,100}})$")
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
TokenScope = Literal["read", "write"]
SCOPES: tuple[TokenScope, ...] = get_args(TokenScope)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token's public facts (never its secret or hash)."""

    id: int
    name: str
    key_id: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    scope: TokenScope = "write"

    @property
    def may_write(self) -> bool:
        return self.scope == "write"

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> TokenInfo:
        return cls(
            row["id"],
            row["name"],
            row["key_id"],
            row["created_at"],
            row["last_used_at"],
            row["revoked_at"],
            row["scope"],
        )


def hash_token(token: str) -> bytes:
    """The SHA-256 digest stored for ``token``."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> tuple[str, str]:
    """A fresh ``(key_id, token)`` pair."""
    key_id = "".join(secrets.choice(_KEY_ALPHABET) for _ in range(_KEY_LENGTH))
    return key_id, f"{PREFIX}_{key_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"


class TokenStore:
    """Intent-named operations on ``icepack.api_tokens``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, name: str, scope: str = "write") -> tuple[str, TokenInfo]:
        """Create a token called ``name`` with ``scope`` (``read`` or ``write``).

        Returns:
            The token (show it once; it cannot be recovered) and its public facts.
        Raises:
            ValueError: the name is not 1-64 letters, digits or ``_.@-``, or the scope is not
                one of ``SCOPES``.
            TokenNameTaken: a live token already has that name.
        """
        if scope not in SCOPES:
            raise ValueError(f"token scope {scope!r} must be one of: {', '.join(SCOPES)}")
        if not TOKEN_NAME.match(name):
            raise ValueError(
                f"token name {name!r} must be 1-64 letters, digits or _.@- "
                "(starting with a letter or digit)"
            )
        key_id, token = new_token()
        try:
            row = await self.pool.fetchrow(
                load_query("token_insert"), name, key_id, hash_token(token), scope
            )
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "api_tokens_active_name":
                raise TokenNameTaken(name) from exc
            raise
        assert row is not None  # INSERT ... RETURNING always returns the row
        return token, TokenInfo.from_record(row)

    async def verify(self, token: str | None) -> TokenInfo:
        """The live token ``token`` is, or why it is refused.

        Raises:
            TokenMissing: no token was given.
            TokenInvalid: malformed, or no token matches.
            TokenRevoked: it matches a revoked token.
        """
        if not token:
            raise TokenMissing(
                "this endpoint needs an operator token: send `Authorization: Bearer <token>`"
            )
        match = _TOKEN.match(token)
        row = None
        if match is not None:
            row = await self.pool.fetchrow(load_query("token_get_by_key"), match.group(1))
        # Compare even when nothing was found, so a wrong key id costs what a wrong secret does.
        stored = bytes(row["token_hash"]) if row is not None else b"\0" * 32
        if not hmac.compare_digest(hash_token(token), stored) or row is None:
            raise TokenInvalid("the bearer token matches no Icepack token")
        info = TokenInfo.from_record(row)
        if info.revoked_at is not None:
            raise TokenRevoked(info.name)
        await self.pool.execute(load_query("token_touch"), info.id)
        return info

    async def revoke(self, name: str) -> TokenInfo:
        """Revoke the live token called ``name``.

        Raises:
            TokenNotFound: no live token has that name.
        """
        row = await self.pool.fetchrow(load_query("token_revoke"), name)
        if row is None:
            raise TokenNotFound(name)
        return TokenInfo.from_record(row)

    async def list(self) -> list[TokenInfo]:
        """Every token, live and revoked, newest first."""
        return [TokenInfo.from_record(r) for r in await self.pool.fetch(load_query("token_list"))]
