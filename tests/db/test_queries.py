import pytest

from icepack_core.db.queries import all_queries, load_query, parse_queries


def test_every_query_has_a_statement_and_noun_first_name() -> None:
    queries = all_queries()
    assert "job_claim" in queries and "event_read_after" in queries
    for name, sql in queries.items():
        assert sql.strip(), name
        assert name.split("_")[0] in {
            "job",
            "budget",
            "event",
            "consumer",
            "work",
            "lock",
            "table",
            "status",
            "manifest",
            "health",
            "catalog",
            "inspection",
            "policy",
            "polaris",
            "recommendation",
            "token",
            "deletion",
            "webhook",
            "deferral",
        }, name


def test_parse_rejects_a_duplicate_name() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_parse_rejects_an_empty_block() -> None:
    with pytest.raises(ValueError, match="no statement"):
        parse_queries("-- name: a\n-- just a comment\n")


def test_unknown_query_names_itself() -> None:
    with pytest.raises(KeyError, match="no_such_query"):
        load_query("no_such_query")


def test_keda_trigger_counts_only_claimable_jobs() -> None:
    sql = " ".join(load_query("job_count_claimable").split())
    assert sql == ("SELECT COALESCE(count(*), 0) FROM icepack.claimable_jobs(now())")
