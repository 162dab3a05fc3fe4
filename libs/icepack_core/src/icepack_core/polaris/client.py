"""Polaris' policy API over HTTP: applicable policies, paged, within the catalog's limits.

``PolarisClient`` is blocking (callers run it in a thread). Every request, the OAuth2 token's
included, passes the catalog's ``CatalogGate`` (``discovery.limits``: its concurrency and rate
limits) and is counted as ``policy``. Authentication is the catalog's own: a bearer ``token``,
or client credentials exchanged at ``oauth2_server_uri`` (default ``{uri}/v1/oauth/tokens``),
renewed once on a 401. Errors are ``PolarisUnavailable`` carrying the status and Polaris' error
type only: never a header, a token or the credential.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from icepack_core.discovery.limits import CatalogCalls, CatalogGate
from icepack_core.polaris.mapping import PolarisPolicy
from icepack_core.settings import CatalogConfig

UNIT_SEPARATOR = "\x1f"  # joins namespace levels in the ``namespace`` query parameter
PAGE_SIZE = 200
MAX_PAGES = 1_000  # a server that keeps answering a next-page-token cannot loop a pass
TIMEOUT = httpx.Timeout(10.0, read=30.0)


class PolarisUnavailable(Exception):
    """A policy request that failed (no secret in the message)."""


class PolarisNotFound(PolarisUnavailable):
    """404: the target (table, namespace) or the policy API itself does not exist."""


class PolarisRefused(PolarisUnavailable):
    """400 or 405: the request is not one the server knows (a catalog without the API)."""


class PolarisClient:
    """The policy API of one Polaris catalog (see the module)."""

    def __init__(
        self,
        cfg: CatalogConfig,
        gate: CatalogGate,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        assert cfg.uri is not None
        self.cfg = cfg
        self.gate = gate
        prefix = cfg.polaris_prefix or cfg.warehouse or ""
        self.base = f"{cfg.uri.rstrip('/')}/polaris/v1/{quote(prefix, safe='')}"
        self._http = httpx.Client(timeout=TIMEOUT, transport=transport)
        self._token: str | None = cfg.token.get_secret_value() if cfg.token else None
        self.page_size = PAGE_SIZE
        self._token_lock = threading.Lock()  # concurrent first requests fetch one token

    def close(self) -> None:
        self._http.close()

    def _fetch_token(self, calls: CatalogCalls | None) -> str:
        assert self.cfg.credential is not None and self.cfg.uri is not None
        client_id, _, secret = self.cfg.credential.get_secret_value().partition(":")
        url = self.cfg.oauth2_server_uri or f"{self.cfg.uri.rstrip('/')}/v1/oauth/tokens"
        form = {
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": secret,
            "scope": self.cfg.scope,
        }
        try:
            answer = self.gate.call("policy", calls, partial(self._http.post, url, data=form))
        except httpx.HTTPError as exc:
            raise PolarisUnavailable(f"OAuth2 token request: {type(exc).__name__}") from None
        if answer.status_code != 200:
            raise PolarisUnavailable(f"OAuth2 token request answered {answer.status_code}")
        try:
            token = answer.json().get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise PolarisUnavailable("OAuth2 token answer carries no access_token")
        return token

    def _ensure_token(self, calls: CatalogCalls | None) -> None:
        if self._token is not None or self.cfg.credential is None:
            return
        with self._token_lock:
            if self._token is None:
                self._token = self._fetch_token(calls)

    def _get(self, path: str, params: dict[str, str], calls: CatalogCalls | None) -> Any:
        for attempt in (1, 2):
            self._ensure_token(calls)
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
            headers.update(self.cfg.headers)
            try:
                get = partial(self._http.get, self.base + path, params=params, headers=headers)
                answer = self.gate.call("policy", calls, get)
            except httpx.HTTPError as exc:
                raise PolarisUnavailable(f"GET {path}: {type(exc).__name__}") from None
            if answer.status_code == 401 and attempt == 1 and self.cfg.credential is not None:
                self._token = None  # expired: fetch a new one, once
                continue
            if answer.status_code == 200:
                try:
                    return answer.json()
                except ValueError:
                    raise PolarisUnavailable(f"GET {path}: the answer is not JSON") from None
            kind = _error_type(answer)
            error = {404: PolarisNotFound, 400: PolarisRefused, 405: PolarisRefused}.get(
                answer.status_code, PolarisUnavailable
            )
            raise error(f"GET {path} answered {answer.status_code} {kind}".rstrip())
        raise AssertionError("unreachable")

    def applicable(
        self,
        namespace: tuple[str, ...] | None = None,
        table: str | None = None,
        calls: CatalogCalls | None = None,
    ) -> list[PolarisPolicy]:
        """The policies applicable to the catalog (no arguments), a namespace, or a table,
        every page (``next-page-token``) followed.

        Raises:
            PolarisNotFound: the namespace or table does not exist (or no policy API).
            PolarisUnavailable: any other failure, or an answer that is not the contract's.
        """
        params: dict[str, str] = {"pageSize": str(self.page_size)}
        if namespace:
            params["namespace"] = UNIT_SEPARATOR.join(namespace)
        if table is not None:
            params["target-name"] = table
        found: list[PolarisPolicy] = []
        for _ in range(MAX_PAGES):
            body = self._get("/applicable-policies", params, calls)
            try:
                found += [PolarisPolicy.model_validate(p) for p in body["applicable-policies"]]
            except (KeyError, TypeError, ValidationError):
                raise PolarisUnavailable("applicable-policies: not the contract's shape") from None
            token = body.get("next-page-token")
            if not token:
                return found
            params["pageToken"] = str(token)
        raise PolarisUnavailable(f"applicable-policies: more than {MAX_PAGES} pages")

    def detect(self, calls: CatalogCalls | None = None) -> bool:
        """Whether the catalog answers Polaris' policy API (the catalog's applicable policies):
        200 yes; 404, 400 or 405 (no such route) no.

        Raises:
            PolarisUnavailable: it could not be told (5xx, 401, 403, no answer).
        """
        try:
            self._get("/applicable-policies", {"pageSize": "1"}, calls)
        except (PolarisNotFound, PolarisRefused):
            return False
        return True


def _error_type(answer: httpx.Response) -> str:
    try:
        error = answer.json().get("error", {})
        return str(error.get("type", ""))[:100]
    except (ValueError, AttributeError):
        return ""
