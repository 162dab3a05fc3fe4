"""Settings: bad or half-configured values give one clear message naming the variable."""

import json
from pathlib import Path

import pytest

from icepack_core.errors import ConfigError
from icepack_core.settings import load_settings, mask_url


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("ICEPACK_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("mysql://u@h/db", "must be a postgresql:// URL"),
        ("postgresql://u@h:notaport/db", "invalid port"),
        ("postgresql://u@h:5432", "names no database"),
        ("not a url", "must be a postgresql:// URL"),
    ],
)
def test_malformed_database_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", value)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert "ICEPACK_DATABASE_URL" in str(exc.value)
    assert expected in str(exc.value)


def test_rest_catalog_with_half_of_the_oauth_credentials_is_rejected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "ICEPACK_CATALOGS",
        json.dumps(
            [
                {
                    "name": "polaris",
                    "type": "rest",
                    "uri": "https://polaris:8181/api/catalog",
                    "client_id": "abc",
                }
            ]
        ),
    )
    with pytest.raises(ConfigError) as exc:
        load_settings()
    message = str(exc.value)
    assert "ICEPACK_CATALOGS" in message and "client_secret is missing" in message


def test_rest_credential_must_have_both_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ICEPACK_CATALOGS",
        json.dumps([{"name": "polaris", "type": "rest", "uri": "https://p/api/catalog"}]),
    )
    monkeypatch.setenv("ICEPACK_CATALOG_POLARIS_CREDENTIAL", "only-an-id")
    with pytest.raises(ConfigError, match="CLIENT_ID:CLIENT_SECRET"):
        load_settings()


@pytest.mark.parametrize(
    "uri", ["htps://u:s3cr3t@polaris/api", "postgresql://u:s3cr3t@db/cat?password=s3cr3t"]
)
def test_a_configuration_error_never_quotes_a_password(
    monkeypatch: pytest.MonkeyPatch, uri: str
) -> None:
    """Settings that fail to load never registered their secrets: the error message itself
    must not carry a password a mistyped value quotes."""
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps([{"name": "r", "type": "rest", "uri": uri}]))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "uri" in str(info.value) and "s3cr3t" not in str(info.value)


def test_catalog_secret_comes_from_its_own_variable_and_is_never_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", "postgresql://icepack:hunter2@db:5432/icepack")
    monkeypatch.setenv(
        "ICEPACK_CATALOGS",
        json.dumps(
            [
                {
                    "name": "polaris",
                    "type": "rest",
                    "uri": "https://p/api/catalog",
                    "headers": {"X-Iceberg-Access-Delegation": "vended-credentials"},
                }
            ]
        ),
    )
    monkeypatch.setenv("ICEPACK_CATALOG_POLARIS_CREDENTIAL", "client:s3cr3t")
    settings = load_settings()
    (catalog,) = settings.catalogs
    assert catalog.credential is not None
    assert catalog.credential.get_secret_value() == "client:s3cr3t"
    assert catalog.scope == "PRINCIPAL_ROLE:ALL"
    printed = repr(settings) + str(settings) + settings.model_dump_json()
    assert "s3cr3t" not in printed and "hunter2" not in printed
    assert settings.masked_dsn == "postgresql://icepack:***@db:5432/icepack"


def test_invalid_json_in_catalogs_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEPACK_CATALOGS", "[{not json")
    with pytest.raises(ConfigError, match="ICEPACK_CATALOGS: not valid JSON"):
        load_settings()


def test_engine_without_its_endpoint_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEPACK_SPARK_ENGINE", "thrift")
    with pytest.raises(ConfigError, match="ICEPACK_SPARK_THRIFT_HOST"):
        load_settings()


def test_duplicate_catalog_names_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    one = {"name": "a", "type": "glue", "region": "eu-west-1"}
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps([one, one]))
    with pytest.raises(ConfigError, match=r"names \['a'\] more than once"):
        load_settings()


def test_out_of_range_number_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEPACK_JOB_MAX_ATTEMPTS", "0")
    with pytest.raises(ConfigError, match="ICEPACK_JOB_MAX_ATTEMPTS"):
        load_settings()


def test_embedded_default_catalog_when_none_configured(tmp_path: Path) -> None:
    settings = load_settings(
        database_url="postgresql://p@127.0.0.1:5432/icepack", data_dir=tmp_path
    )
    (catalog,) = settings.effective_catalogs()
    assert catalog.name == "icepack" and catalog.type == "sql"
    assert catalog.warehouse == (tmp_path / "warehouse").as_uri()


def test_mask_url_leaves_urls_without_password_alone() -> None:
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    "catalog",
    [
        {"name": "r", "type": "rest", "uri": "http://catalog:8181", "notify": True},
        {"name": "s", "type": "sql", "uri": "sqlite:///tmp/catalog.db", "notify": True},
    ],
)
def test_notify_is_refused_where_no_postgres_trigger_can_push(
    monkeypatch: pytest.MonkeyPatch, catalog: dict[str, object]
) -> None:
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps([catalog]))
    with pytest.raises(ConfigError, match="notify needs a SQL catalog in Postgres") as exc:
        load_settings()
    assert "ICEPACK_CATALOGS" in str(exc.value)
