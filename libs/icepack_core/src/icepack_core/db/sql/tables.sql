-- The tables Icepack knows (icepack.tables): discovery's writes, holds, properties, reads.

-- name: table_lock_catalog
-- Serialise discovery refreshes of one catalog across replicas (held until commit).
SELECT pg_advisory_xact_lock(hashtextextended('icepack.discovery:' || $1::text, 0));

-- name: table_list_catalog
-- Every known table of one catalog, dropped ones included (discovery diffs against it).
SELECT id, namespace, name, metadata_location, dropped_at, catalog_etag
  FROM icepack.tables
 WHERE catalog = $1;

-- name: table_list_etags
-- The live tables of one catalog with a stored ETag and the metadata location it belongs to
-- (discovery's conditional loads send it as If-None-Match).
SELECT namespace, name, metadata_location, catalog_etag
  FROM icepack.tables
 WHERE catalog = $1 AND dropped_at IS NULL
   AND catalog_etag IS NOT NULL AND metadata_location IS NOT NULL;

-- name: table_insert
-- A table seen for the first time (no ETag yet: discovery sets it with table_set_etags).
INSERT INTO icepack.tables (catalog, namespace, name, metadata_location, properties)
VALUES ($1, $2, $3, $4, $5::jsonb)
RETURNING id;

-- name: table_insert_many
-- Tables seen for the first time, one per row of the arrays ($2 namespaces, $3 names, $4
-- locations, $5 JSON properties); their ids by name.
INSERT INTO icepack.tables (catalog, namespace, name, metadata_location, properties)
SELECT $1, t.namespace, t.name, t.metadata_location, t.properties::jsonb
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
       AS t(namespace, name, metadata_location, properties)
RETURNING id, namespace, name;

-- name: table_get_many_by_name
-- The rows of a catalog's tables named by ($2 namespaces, $3 names), dropped ones included
-- (discovery diffs each chunk of a listing against them).
SELECT t.id, t.namespace, t.name, t.metadata_location, t.dropped_at, t.catalog_etag
  FROM unnest($2::text[], $3::text[]) AS k(namespace, name)
  JOIN icepack.tables t ON t.catalog = $1 AND t.namespace = k.namespace AND t.name = k.name;

-- name: table_update_seen
-- A known table seen again with a new metadata location or after being dropped: record the
-- location (keep the old one when this listing could not load it) and clear dropped_at. The
-- properties are replaced only when this sighting read them with the location ($3 NULL: a SQL
-- catalog's listing has none; the stored ones, which safety rules read, stand). A new
-- location clears the stored ETag (it belonged to the old one; discovery sets the new one with
-- table_set_etags in the same transaction).
UPDATE icepack.tables
   SET metadata_location = coalesce($2, metadata_location),
       properties        = CASE WHEN $2::text IS NULL OR $3::jsonb IS NULL THEN properties
                                ELSE $3::jsonb END,
       catalog_etag      = CASE WHEN $2::text IS NULL THEN catalog_etag END,
       last_seen_at      = now(),
       dropped_at        = NULL
 WHERE id = $1;

-- name: table_set_etags
-- The ETags full loads answered for the metadata locations just recorded ($1 ids, $2 ETags).
UPDATE icepack.tables AS t SET catalog_etag = e.etag
  FROM unnest($1::bigint[], $2::text[]) AS e(id, etag)
 WHERE t.id = e.id;

-- name: table_touch_seen
-- Known tables seen again unchanged: last_seen_at moves once it is 10 minutes old, not on every
-- pass (a pass a minute rewrote every row of the fleet: 100,000 row updates a minute).
UPDATE icepack.tables SET last_seen_at = now()
 WHERE id = ANY($1::bigint[]) AND last_seen_at < now() - interval '10 minutes';

-- name: table_mark_dropped
-- Tables no longer in their catalog's listing (dropped_at set once, at the first miss).
UPDATE icepack.tables SET dropped_at = now()
 WHERE id = ANY($1::bigint[]) AND dropped_at IS NULL
RETURNING id;

-- name: table_get
-- One table by id.
SELECT id, catalog, namespace, name, metadata_location, properties, dropped_at, maintenance_hold,
       location
  FROM icepack.tables
 WHERE id = $1;

-- name: table_list_active
-- Every table still in its catalog, in catalog/namespace/name order.
SELECT id, catalog, namespace, name, metadata_location, last_seen_at
  FROM icepack.tables
 WHERE dropped_at IS NULL
 ORDER BY catalog, namespace, name;

-- name: table_get_by_name
-- One table of a catalog by namespace and name (discovery's targeted refresh of a pushed change).
SELECT id, namespace, name, metadata_location, dropped_at
  FROM icepack.tables
 WHERE catalog = $1 AND namespace = $2 AND name = $3;

-- name: table_find_by_metadata_dir
-- The live tables of a catalog whose current metadata file sits in the same directory as $2
-- (a metadata file an S3 notification names). s3a:// and s3n:// name the same objects as s3://.
SELECT namespace, name
  FROM icepack.tables
 WHERE catalog = $1 AND dropped_at IS NULL
   AND regexp_replace(regexp_replace(metadata_location, '^s3[an]://', 's3://'), '[^/]*$', '')
     = regexp_replace(regexp_replace($2::text, '^s3[an]://', 's3://'), '[^/]*$', '');

-- name: table_held_counts
-- Tables still in their catalog whose automatic maintenance is stopped, per catalog (every
-- catalog with a live table, zeros included).
SELECT catalog, count(*) FILTER (WHERE maintenance_hold IS NOT NULL) AS tables
  FROM icepack.tables
 WHERE dropped_at IS NULL
 GROUP BY catalog;

-- name: table_backoff_counts
-- Tables still in their catalog with at least one action resting after permanent failures,
-- per catalog: the planner's failure backoff (job_failure_streaks, fleet-wide): n permanently
-- failed jobs naming the action since it last succeeded on the table, the newest at `last`,
-- rest until last + least(cap, base * 2^(n-1)). $1 base seconds, $2 cap seconds.
-- Only a (table, action) whose newest failure finished within the cap can be resting, so the
-- streaks are counted for those alone (found through the jobs_finished index).
WITH recent AS (
    SELECT DISTINCT j.table_id, a.elem->>'action' AS action
      FROM icepack.jobs j
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
           ) AS a(elem)
     WHERE j.finished_at > now() - make_interval(secs => $2::float8)
       AND j.state = 'failed' AND j.table_id IS NOT NULL AND jsonb_typeof(a.elem) = 'object'),
failures AS (
    SELECT DISTINCT r.table_id, j.id, r.action, j.finished_at
      FROM recent r
     CROSS JOIN LATERAL (SELECT j.id, j.finished_at, j.actions FROM icepack.jobs j
                          WHERE j.table_id = r.table_id AND j.state = 'failed') AS j
     CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(j.actions) = 'array' THEN j.actions ELSE '[]'::jsonb END
           ) AS a(elem)
     WHERE jsonb_typeof(a.elem) = 'object' AND a.elem->>'action' = r.action),
successes AS (
    SELECT r.table_id, s.action, s.finished_at
      FROM (SELECT DISTINCT table_id FROM recent) AS r
     CROSS JOIN LATERAL (SELECT ja.action, max(ja.finished_at) AS finished_at
                           FROM icepack.jobs j JOIN icepack.job_actions ja ON ja.job_id = j.id
                          WHERE j.table_id = r.table_id AND ja.state = 'succeeded'
                          GROUP BY ja.action) AS s),
streaks AS (
    SELECT f.table_id, f.action, count(*) AS n, max(f.finished_at) AS last
      FROM failures f
      LEFT JOIN successes s ON s.table_id = f.table_id AND s.action = f.action
     WHERE f.action IS NOT NULL AND (s.finished_at IS NULL OR f.finished_at > s.finished_at)
     GROUP BY f.table_id, f.action)
SELECT t.catalog, count(DISTINCT t.id) AS tables
  FROM streaks s JOIN icepack.tables t ON t.id = s.table_id
 WHERE t.dropped_at IS NULL
   AND s.last + make_interval(secs => least($2::float8,
                                            $1::float8 * power(2, least(s.n - 1, 60)))) > now()
 GROUP BY t.catalog;

-- name: table_lineage
-- Table $1 and every dropped table it is the live successor of (``live_table_at``: a rename),
-- so the ledger rows of a renamed table are purged and restored with it.
SELECT $1::bigint AS id
UNION
SELECT o.id
  FROM icepack.tables t
  JOIN icepack.tables o
    ON o.catalog = t.catalog AND o.dropped_at IS NOT NULL
   AND rtrim(o.location, '/') = rtrim(t.location, '/')
 WHERE t.id = $1 AND icepack.live_table_at(o.id) = $1;

-- name: table_find
-- One table by its identity, dropped ones included (their history stays readable).
SELECT id, catalog, namespace, name, metadata_location, properties, first_seen_at,
       last_seen_at, dropped_at, maintenance_hold
  FROM icepack.tables
 WHERE catalog = $1 AND namespace = $2 AND name = $3;

-- name: table_page_by_name
-- A page of tables still in their catalog, in (catalog, namespace, name) order after the keyset
-- cursor ($6, $7, $8), with their latest health and current status (the handler picks a few
-- metrics from it). $1 catalog, $2 namespace, $3 health, $4 issue code, $5 search text, $9 limit.
-- Latest health and status come from table_health_latest; a table with status snapshots but
-- no assessment (not written by record_inspection) falls back to its newest snapshot.
WITH page AS (
    SELECT t.id, t.catalog, t.namespace, t.name, t.last_seen_at,
           coalesce(l.health, 'unknown') AS health, l.score, l.issues, l.assessed_at,
           l.table_id AS assessed_id
      FROM icepack.tables t
      LEFT JOIN icepack.table_health_latest l ON l.table_id = t.id
     WHERE t.dropped_at IS NULL
       AND (t.catalog, t.namespace, t.name) > ($6::text, $7::text, $8::text)
       AND ($1::text IS NULL OR t.catalog = $1)
       AND ($2::text IS NULL OR t.namespace = $2)
       AND ($3::text IS NULL OR coalesce(l.health, 'unknown') = $3)
       AND ($4::text IS NULL
            OR l.issues @> jsonb_build_array(jsonb_build_object('code', $4::text)))
       AND ($5::text IS NULL
            OR strpos(lower(t.catalog || '.' || t.namespace || '.' || t.name), lower($5)) > 0)
     ORDER BY t.catalog, t.namespace, t.name
     LIMIT $9)
SELECT p.id, p.catalog, p.namespace, p.name, p.last_seen_at, p.health, p.score, p.issues,
       p.assessed_at, 0 AS sort_key,
       coalesce(l.inspected_at, s.inspected_at) AS inspected_at,
       CASE WHEN p.assessed_id IS NULL THEN s.status ELSE l.status END AS status
  FROM page p
  LEFT JOIN icepack.table_health_latest l ON l.table_id = p.assessed_id
  LEFT JOIN LATERAL (SELECT inspected_at, status FROM icepack.status_snapshots ss
                      WHERE p.assessed_id IS NULL AND ss.table_id = p.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 ORDER BY p.catalog, p.namespace, p.name;

-- name: table_page_by_score
-- Like table_page_by_name, ordered by health score (worst first unless $10 asks for best
-- first), then identity; tables never assessed come last either way (sort key 101, or 1 best
-- first). Keyset cursor ($11 sort key, $6, $7, $8).
-- The assessed tables are read in score order from table_health_latest's (score, table_id)
-- index (one branch per direction; $10 switches the other off), so a page costs about `limit`
-- index entries, not the fleet; the never-assessed tail is only looked for when the assessed
-- ones do not fill the page. The wide status documents are read for the page's rows only.
WITH candidates AS NOT MATERIALIZED (
    SELECT t.id, t.catalog, t.namespace, t.name, t.last_seen_at,
           coalesce(l.health, 'unknown') AS health, l.score, l.issues, l.assessed_at,
           l.table_id AS assessed_id
      FROM icepack.tables t
      LEFT JOIN icepack.table_health_latest l ON l.table_id = t.id
     WHERE t.dropped_at IS NULL
       AND ($1::text IS NULL OR t.catalog = $1)
       AND ($2::text IS NULL OR t.namespace = $2)
       AND ($3::text IS NULL OR coalesce(l.health, 'unknown') = $3)
       AND ($4::text IS NULL
            OR l.issues @> jsonb_build_array(jsonb_build_object('code', $4::text)))
       AND ($5::text IS NULL
            OR strpos(lower(t.catalog || '.' || t.namespace || '.' || t.name), lower($5)) > 0)),
worst AS (
    SELECT c.*, c.score AS sort_key
      FROM candidates c
     WHERE NOT $10::boolean
       AND c.score >= $11::integer
       AND (c.score, c.catalog, c.namespace, c.name) > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.score, c.catalog, c.namespace, c.name
     LIMIT $9),
best AS (
    SELECT c.*, -c.score AS sort_key
      FROM candidates c
     WHERE $10::boolean
       AND c.score <= -$11::integer
       AND (-c.score, c.catalog, c.namespace, c.name) > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.score DESC, c.catalog, c.namespace, c.name
     LIMIT $9),
assessed AS (
    SELECT * FROM worst
    UNION ALL
    SELECT * FROM best),
never AS (
    SELECT c.*, CASE WHEN $10::boolean THEN 1 ELSE 101 END AS sort_key
      FROM candidates c
     WHERE c.assessed_id IS NULL
       AND (SELECT count(*) FROM assessed) < $9
       AND (CASE WHEN $10::boolean THEN 1 ELSE 101 END, c.catalog, c.namespace, c.name)
           > ($11::integer, $6::text, $7::text, $8::text)
     ORDER BY c.catalog, c.namespace, c.name
     LIMIT $9),
page AS (
    SELECT * FROM assessed
    UNION ALL
    SELECT * FROM never
     ORDER BY sort_key, catalog, namespace, name
     LIMIT $9)
SELECT p.id, p.catalog, p.namespace, p.name, p.last_seen_at, p.health, p.score, p.issues,
       p.assessed_at, p.sort_key,
       coalesce(l.inspected_at, s.inspected_at) AS inspected_at,
       CASE WHEN p.assessed_id IS NULL THEN s.status ELSE l.status END AS status
  FROM page p
  LEFT JOIN icepack.table_health_latest l ON l.table_id = p.assessed_id
  LEFT JOIN LATERAL (SELECT inspected_at, status FROM icepack.status_snapshots ss
                      WHERE p.assessed_id IS NULL AND ss.table_id = p.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 ORDER BY p.sort_key, p.catalog, p.namespace, p.name;

-- name: table_detail
-- One table with its latest health, status, recommendation and job, in one round trip.
SELECT t.id, t.catalog, t.namespace, t.name, t.metadata_location, t.properties,
       t.first_seen_at, t.last_seen_at, t.dropped_at, t.maintenance_hold,
       to_jsonb(h) AS health, to_jsonb(s) AS status, to_jsonb(r) AS recommendation,
       j.id AS job_id
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT assessment_id AS id, status_snapshot_id, health, score, issues,
                            assessed_at
                       FROM icepack.table_health_latest WHERE table_id = t.id) h ON true
  LEFT JOIN LATERAL (SELECT id, inspected_at, inspector, metadata_location,
                            current_snapshot_id, status
                       FROM icepack.status_snapshots WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) s ON true
  LEFT JOIN LATERAL (SELECT id, status_snapshot_id, actions, job_id, created_at
                       FROM icepack.recommendations WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) r ON true
  LEFT JOIN LATERAL (SELECT id FROM icepack.jobs WHERE table_id = t.id
                      ORDER BY id DESC LIMIT 1) j ON true
 WHERE t.catalog = $1 AND t.namespace = $2 AND t.name = $3;

-- name: table_hold_set
-- Stop automatic maintenance of a table, with the evidence why.
UPDATE icepack.tables SET maintenance_hold = $2::jsonb WHERE id = $1;

-- name: table_hold_lock
-- A table's hold, its row locked until the transaction ends (so a release and an executor
-- setting a new hold cannot interleave). $1 table id.
SELECT id, catalog, namespace, name, maintenance_hold
  FROM icepack.tables
 WHERE id = $1
   FOR UPDATE;

-- name: table_hold_release
-- An operator re-enables automatic maintenance of a table (icepack_core.holds). $1 table id.
UPDATE icepack.tables SET maintenance_hold = NULL
 WHERE id = $1 AND maintenance_hold IS NOT NULL
RETURNING id;

-- name: table_holds_all
-- Every table automatic maintenance is stopped for, by name.
SELECT id, catalog, namespace, name, dropped_at, maintenance_hold
  FROM icepack.tables
 WHERE maintenance_hold IS NOT NULL
 ORDER BY catalog, namespace, name;

-- name: table_plan_inputs
-- What planning one table reads, in one round trip: the table row (as table_get), its newest
-- status snapshot (status_id NULL: never inspected successfully) and assessment score, and
-- whether any job ever ran on it (none: its job history is known to be empty, not read).
SELECT t.id, t.catalog, t.namespace, t.name, t.metadata_location, t.properties, t.dropped_at,
       t.maintenance_hold, t.location, s.id AS status_id, s.status, h.score,
       EXISTS (SELECT 1 FROM icepack.jobs j WHERE j.table_id = t.id) AS has_jobs
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT id, status FROM icepack.status_snapshots
                      WHERE table_id = t.id ORDER BY id DESC LIMIT 1) s ON true
  LEFT JOIN LATERAL (SELECT score FROM icepack.health_assessments
                      WHERE table_id = t.id ORDER BY id DESC LIMIT 1) h ON true
 WHERE t.id = $1;

-- name: table_set_properties
-- Keep a table's properties as its current metadata has them (icepack.* overrides live there).
UPDATE icepack.tables SET properties = $2::jsonb WHERE id = $1;

-- name: table_set_location
-- Keep a table's root location as its current metadata has it (orphan-removal overlap check).
UPDATE icepack.tables SET location = $2 WHERE id = $1 AND location IS DISTINCT FROM $2;

-- name: table_locations_known
-- Every table of every catalog Icepack knows of, for the location checks (orphan-removal
-- overlap, confinement): each live maintained table with its root location (or, until
-- inspected, its metadata location) and properties (write paths), and each table listed but
-- not maintained (id NULL, ``unmaintained`` says why) with what its metadata last said.
SELECT id, catalog, namespace, name, location, metadata_location, properties,
       NULL::text AS unmaintained
  FROM icepack.tables
 WHERE dropped_at IS NULL
UNION ALL
SELECT NULL, catalog, namespace, name, location, metadata_location, write_paths, reason
  FROM icepack.unmaintained_tables;
