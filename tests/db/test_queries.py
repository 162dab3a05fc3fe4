from importlib import resources

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
            "fingerprint",
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


# Each sql/ file holds the queries of one table (or one tightly bound group of tables): a query
# sits in the file of the table its name's noun names, whoever calls it.
FILE_PREFIXES = {
    "budgets": ("budget_", "job_give_back"),
    "catalog_hints": ("catalog_hint_",),
    "catalog_status": ("catalog_status_", "catalog_listing_"),
    "consumer_offsets": ("consumer_", "webhook_consumer_"),
    "data_file_fingerprints": ("fingerprint_",),
    "deletions": ("deletion_",),
    "events": ("event_",),
    "health": ("health_",),
    "inspection_totals": ("inspection_totals_",),
    "job_actions": ("job_action_record", "job_actions_of", "job_last_"),
    "jobs": ("job_",),
    "locks": ("lock_",),
    "maintenance_deferrals": ("deferral_",),
    "manifest_stats": ("manifest_stats_",),
    "pending_verifications": ("table_pending_verification_",),
    "planner_replans": ("recommendation_replan",),
    "polaris": ("polaris_",),
    "policies": ("policy_",),
    "recommendations": ("recommendation_",),
    "status_snapshots": ("status_",),
    "tables": ("table_",),
    "tokens": ("token_",),
    "unmaintained_tables": ("table_unmaintained_",),
    "webhooks": ("webhook_",),
    "work_items": ("work_",),
}


def test_each_sql_file_holds_one_tables_queries() -> None:
    files = {
        entry.name.removesuffix(".sql"): parse_queries(entry.read_text(encoding="utf-8"))
        for entry in resources.files("icepack_core.db").joinpath("sql").iterdir()
        if entry.name.endswith(".sql")
    }
    assert set(files) == set(FILE_PREFIXES)
    # A query goes to the file whose prefix matches it longest (job_last_runs: job_actions).
    for stem, queries in files.items():
        for name in queries:
            home = max(
                (
                    (len(p), f)
                    for f, prefixes in FILE_PREFIXES.items()
                    for p in prefixes
                    if name.startswith(p)
                ),
                default=(0, None),
            )[1]
            assert home == stem, f"{name} is in {stem}.sql, belongs in {home}.sql"
