"""The real SQL catalog with every ``load_table`` counted: how many times a path loads a table.

Used by ``tests/execution/test_metadata_loads.py`` and ``bench.after_job``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier

from icepack_core.discovery.catalogs import CatalogSet, load_catalog
from icepack_core.settings import CatalogConfig


class CountingSqlCatalog(SqlCatalog):
    """The real SQL catalog; every ``load_table`` is appended to ``loads`` first."""

    def __init__(self, name: str, loads: list[str], **properties: str) -> None:
        super().__init__(name, **properties)
        self.loads = loads

    def load_table(self, identifier: str | Identifier) -> Table:
        self.loads.append(str(identifier))
        return super().load_table(identifier)


class CountingCatalogs(CatalogSet):
    """``CatalogSet`` whose SQL catalogs count their table loads into ``loads``."""

    def __init__(self, configs: Iterable[CatalogConfig]) -> None:
        super().__init__(configs)
        self.loads: list[str] = []
        self._counting: dict[str, Catalog] = {}

    async def get(self, name: str) -> Catalog:
        if name not in self._counting:
            real = await asyncio.to_thread(load_catalog, self.configs[name])
            assert isinstance(real, SqlCatalog), type(real)
            self._counting[name] = CountingSqlCatalog(name, self.loads, **real.properties)
        return self._counting[name]
