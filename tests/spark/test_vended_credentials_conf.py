"""The ``vended_credentials`` catalog setting: both clients ask for vended credentials, and
what a catalog vends is masked like a configured secret (no JVM, no server)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from icepack_core.discovery.catalogs import catalog_properties, register_vended_secrets
from icepack_core.settings import CatalogConfig
from icepack_core.spark.catalog_conf import redact_conf, spark_catalog_conf
from icepack_core.telemetry.logs import redact, redact_text

HEADER = "X-Iceberg-Access-Delegation"


def vending_catalog(**extra: object) -> CatalogConfig:
    return CatalogConfig(
        name="polaris",
        type="rest",
        uri="https://polaris.example.com/api/catalog",
        warehouse="analytics",
        credential="icepack-client:client-secret-value",
        vended_credentials=True,
        **extra,
    )


def test_both_clients_ask_for_vended_credentials_and_get_no_static_keys() -> None:
    cfg = vending_catalog(s3_endpoint="http://127.0.0.1:8333", region="us-east-1")
    spark = spark_catalog_conf(cfg)
    assert spark[f"spark.sql.catalog.polaris.header.{HEADER}"] == "vended-credentials"
    assert not any("access-key" in k or "secret" in k for k in spark)
    py = catalog_properties(cfg)
    assert py[f"header.{HEADER}"] == "vended-credentials"
    assert not any(k.startswith("s3.") and "key" in k for k in py)
    # a header value may be an API key: the redacted conf shows none of them
    assert redact_conf(spark)[f"spark.sql.catalog.polaris.header.{HEADER}"] == "***"


def test_without_the_setting_spark_does_not_ask() -> None:
    cfg = vending_catalog().model_copy(update={"vended_credentials": False})
    assert not any(HEADER in k for k in spark_catalog_conf(cfg))


def test_an_explicit_header_still_wins() -> None:
    cfg = vending_catalog(headers={HEADER: "remote-signing"})
    assert spark_catalog_conf(cfg)[f"spark.sql.catalog.polaris.header.{HEADER}"] == (
        "remote-signing"
    )
    assert catalog_properties(cfg)[f"header.{HEADER}"] == "remote-signing"


@pytest.mark.parametrize("kind", ["sql", "glue"])
def test_vended_credentials_on_a_catalog_that_cannot_vend_is_refused(kind: str) -> None:
    uri = "postgresql://u@127.0.0.1/db" if kind == "sql" else None
    with pytest.raises(ValidationError, match=f"vended_credentials needs a REST catalog.*{kind}"):
        CatalogConfig(name="lake", type=kind, uri=uri, vended_credentials=True)


def test_vended_secrets_are_masked_wherever_they_appear_the_key_id_is_not() -> None:
    secret, session = "vendedSecret-Zq81Lk3", "vendedSession-Pw72Nc9"
    register_vended_secrets(
        {
            "s3.access-key-id": "AKIAVENDEDKEYID",
            "s3.secret-access-key": secret,
            "s3.session-token": session,
            "s3.endpoint": "http://127.0.0.1:8333",
            "client.region": "us-east-1",
        }
    )
    text = f"S3 403 with key {secret} and session {session} at http://127.0.0.1:8333"
    masked = redact_text(text)
    assert secret not in masked and session not in masked
    assert "http://127.0.0.1:8333" in masked and "us-east-1" in redact_text("us-east-1")
    assert redact({"error": f"denied: {secret}"}) == {"error": "denied: ***"}
    assert "AKIAVENDEDKEYID" in redact_text("key id AKIAVENDEDKEYID")
