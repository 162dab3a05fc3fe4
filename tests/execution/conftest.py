"""Fixtures shared by the executor's Spark tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from icepack_core.settings import Settings
from tests.support.settings import service_settings


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    """The services' settings on this test's database and the Spark fixtures' catalog."""
    return service_settings(database_url, spark_catalog_settings, tmp_path)


@pytest.fixture
def need_settings(database_url: str, spark_catalog_settings: Settings, tmp_path: Path) -> Settings:
    """``runner_settings`` with a minimum benefit of 3 objects (the default is 50), so the
    small tables of the scheduling tests are due."""
    return service_settings(
        database_url, spark_catalog_settings, tmp_path, maintenance_min_benefit=3
    )
