"""Secrets never reach the logs."""

import json

import structlog

from icepack_core.logs import redact_secrets, redact_text, setup_logging


def test_passwords_in_urls_are_masked():
    assert redact_text("connect postgresql://icepack:p4ss@db:5432/x failed") == (
        "connect postgresql://icepack:***@db:5432/x failed")


def test_secret_looking_keys_are_masked_recursively():
    event = {"event": "x", "token": "abc", "config": {"client_secret": "s", "uri": "https://h"},
             "items": ["https://u:pw@h/"]}
    out = redact_secrets(None, "info", event)
    assert out["token"] == "***"
    assert out["config"] == {"client_secret": "***", "uri": "https://h"}
    assert out["items"] == ["https://u:***@h/"]


def test_json_logs_carry_service_and_hide_secrets(capsys):
    setup_logging("tester", "info", "json")
    structlog.get_logger().info("catalog.loaded", credential="id:secret",
                                database="postgresql://a:b@h/db")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["event"] == "catalog.loaded" and record["service"] == "tester"
    assert record["credential"] == "***"
    assert "b@h" not in line and "id:secret" not in line
