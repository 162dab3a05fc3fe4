"""Secrets never reach the logs."""

import json
import string

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.telemetry.logs import (
    redact,
    redact_secrets,
    redact_text,
    register_secrets,
    setup_logging,
)


def test_passwords_in_urls_are_masked() -> None:
    assert redact_text("connect postgresql://icepack:p4ss@db:5432/x failed") == (
        "connect postgresql://icepack:***@db:5432/x failed"
    )


def test_secret_looking_keys_are_masked_recursively() -> None:
    event = {
        "event": "x",
        "token": "abc",
        "config": {"client_secret": "s", "uri": "https://h"},
        "items": ["https://u:pw@h/"],
    }
    out = redact_secrets(None, "info", event)
    assert out["token"] == "***"
    assert out["config"] == {"client_secret": "***", "uri": "https://h"}
    assert out["items"] == ["https://u:***@h/"]


def test_json_logs_carry_service_and_hide_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("tester", "info", "json")
    structlog.get_logger().info(
        "catalog.loaded", credential="id:secret", database="postgresql://a:b@h/db"
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["event"] == "catalog.loaded" and record["service"] == "tester"
    assert record["credential"] == "***"
    assert "b@h" not in line and "id:secret" not in line


# Each form a secret takes in Icepack's configuration, as it shows up in text (exception
# messages, a repr of a conf dict, a URL in a log line). No value is registered here: these
# are caught by the patterns alone.
FORMS = [
    "sc://spark:15002/;token={s};user_id=icepack",
    "postgresql://icepack@db:5432/icepack?password={s}&sslmode=require",
    "postgresql://icepack:{s}@db:5432/icepack",
    "{{'fs.azure.account.key.acct.dfs.core.windows.net': '{s}'}}",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net={s}",
    '{{"s3.secret-access-key": "{s}", "s3.access-key-id": "AKIAPUBLIC"}}',
    "fs.s3a.secret.key={s}",
    "{{'Authorization': 'Bearer {s}'}}",
    "header.Authorization: Bearer {s}",
    "ICEPACK_CATALOG_POLARIS_CREDENTIAL=client:{s}",
    '{{"credential": "client:{s}"}}',
    "ICEPACK_SPARK_THRIFT_PASSWORD={s}",
]


@pytest.mark.parametrize("form", FORMS)
@given(
    secret=st.text(alphabet=string.ascii_letters + string.digits + "+/=_-", min_size=8, max_size=40)
)
@settings(max_examples=40)
def test_every_secret_form_is_masked(form: str, secret: str) -> None:
    text = form.format(s=secret)
    assert secret not in redact_text(text), redact_text(text)


def test_harmless_text_is_left_alone() -> None:
    for text in (
        "the token: the Icepack database did not answer",
        "s3.access-key-id=AKIAPUBLIC",
        "CALL demo.system.rewrite_data_files(table => 'sales.orders')",
        "signal=SIGTERM",
        "sc://spark:15002/;user_id=icepack",
        "token revoked",
        "the planner's token bucket is empty",
    ):
        assert redact_text(text) == text


def test_registered_secrets_are_masked_anywhere() -> None:
    register_secrets(["Zq81-registered-value", "short"])
    assert redact_text("error: Zq81-registered-value in a message") == "error: *** in a message"
    assert redact_text("a short word") == "a short word"  # too short to register
    assert redact({"note": "x Zq81-registered-value y", "n": 5}) == {"note": "x *** y", "n": 5}


def test_a_registered_secret_that_is_a_word_of_a_key_does_not_unmask_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from icepack_core.telemetry import logs

    monkeypatch.setattr(logs, "_KNOWN", set(logs._KNOWN))  # the registry is process-wide
    register_secrets(["secret"])  # e.g. a test catalog's client secret
    assert "abcdef123456" not in redact_text("fs.s3a.secret.key=abcdef123456")


_WORDS = [
    "pass",
    "PWD",
    "Secret",
    "token",
    "credential",
    "Authorization",
    "api_key",
    "account.key",
    "access-key",
    "private_key",
    "signature",
]
_FILLER = ["://", "@", "user:", "Bearer ", "/", "-", ".", " ", "&", ";", "x", "0a1b2c3d", "'", '"']
# key<sep>value pieces, so that every keyword is also tried alone as a secret's key.
_ASSIGNMENT = st.tuples(
    st.sampled_from(["", "fs.", "x_"]),
    st.sampled_from(_WORDS),
    st.sampled_from(["", "word", ".key", "_id"]),
    st.sampled_from(["=", " = ", "': '", '":"', ": '", ":"]),
    st.sampled_from(["v4lue99", "***", "AKIA1"]),
).map("".join)


@given(
    text=st.lists(st.one_of(st.sampled_from(_FILLER + _WORDS), _ASSIGNMENT), max_size=12).map(
        "".join
    )
)
@settings(max_examples=300)
def test_the_prechecks_change_no_result(text: str) -> None:
    """``redact_text`` skips a pattern when text lacks a character or word it needs (speed:
    each pattern backtracks over long paths); the result must equal running every pattern."""
    from icepack_core.telemetry import logs

    every = logs._URL_PASSWORD.sub(lambda m: m.group("head") + logs.REDACTED, text)
    every = logs._AUTH_SCHEME.sub(lambda m: m.group("head") + logs.REDACTED, every)
    every = logs._KEY_VALUE.sub(logs._mask_key_value, every)
    for secret in sorted(logs._KNOWN, key=len, reverse=True):
        every = every.replace(secret, logs.REDACTED)
    assert redact_text(text) == every


@pytest.mark.parametrize("word", _WORDS)
def test_each_secret_word_alone_names_a_secret_key(word: str) -> None:
    assert redact_text(f"fs.{word}.value=v4lue99 and more") == f"fs.{word}.value=*** and more"
