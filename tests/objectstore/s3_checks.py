"""Oracles for tables on an S3-compatible store: which referenced files are missing, read
through S3 itself (boto3), not through the code under test."""

from __future__ import annotations

from typing import Any


def s3_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
    )


def object_exists(s3: Any, location: str) -> bool:
    """Whether the object at ``s3://bucket/key`` (or ``s3a://``) exists; Iceberg writes keys
    verbatim (no percent-encoding), so the key is the location's path as it stands."""
    scheme, _, rest = location.partition("://")
    assert scheme in ("s3", "s3a"), location
    bucket, _, key = rest.partition("/")  # not urlsplit: '#' and '?' are key characters here
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def referenced_files(spark: Any, table: str) -> list[str]:
    """Every file a remaining snapshot references: data, deletes, manifests, manifest lists."""
    paths = [
        r["file_path"] for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()
    ]
    paths += [r["path"] for r in spark.sql(f"SELECT path FROM {table}.all_manifests").collect()]
    paths += [
        r["manifest_list"]
        for r in spark.sql(f"SELECT manifest_list FROM {table}.snapshots").collect()
    ]
    return paths


def missing_referenced_objects(spark: Any, s3: Any, table: str) -> list[str]:
    """Referenced files gone from the store. Must always be empty."""
    return [p for p in referenced_files(spark, table) if not object_exists(s3, p)]
