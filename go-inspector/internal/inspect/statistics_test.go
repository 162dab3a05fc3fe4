package inspect

import "testing"

// The walk over the current lineage: the nearest described ancestor, what
// was added since (replace snapshots add nothing), and lenient reading of
// malformed entries, summaries and parents.
func TestStatisticsFreshnessWalksTheCurrentLineage(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"format-version": 1, "current-snapshot-id": 4, "snapshots": [
	  {"snapshot-id": 1, "timestamp-ms": 1, "manifests": [], "summary": {"operation": "append", "added-records": "10", "added-data-files": "1"}},
	  {"snapshot-id": 2, "timestamp-ms": 2, "manifests": [], "parent-snapshot-id": 1, "summary": {"operation": "replace", "added-records": "10", "added-data-files": "1"}},
	  {"snapshot-id": 3, "timestamp-ms": 3, "manifests": [], "parent-snapshot-id": 2, "summary": {"operation": "append", "added-records": "5", "added-data-files": "x"}},
	  {"snapshot-id": 4, "timestamp-ms": 4, "manifests": [], "parent-snapshot-id": 3, "summary": "not an object"}],
	 "statistics": [{"snapshot-id": "1", "file-size-in-bytes": 9}, {"snapshot-id": 1, "file-size-in-bytes": 70}, {"snapshot-id": 9, "file-size-in-bytes": 1}],
	 "partition-statistics": "not a list"}`)
	m, err := parseMetadata(raw)
	if err != nil {
		t.Fatal(err)
	}
	var st TableStatus
	m.fillHistory(&st)
	ts := st.TableStatistics
	if ts.Files != 2 || ts.SnapshotID == nil || *ts.SnapshotID != "1" || ts.FileBytes != 70 {
		t.Fatalf("table statistics = %+v", ts)
	}
	if *ts.SnapshotsBehind != 3 || *ts.AddedRecords != 5 || *ts.AddedDataFiles != 0 {
		t.Fatalf("distance = %d snapshots, %d records, %d files", *ts.SnapshotsBehind, *ts.AddedRecords, *ts.AddedDataFiles)
	}
	ps := st.PartitionStatistics
	if ps.Files != 0 || ps.SnapshotID != nil || ps.SnapshotsBehind != nil || ps.AddedRecords != nil {
		t.Fatalf("partition statistics = %+v, want missing", ps)
	}
}
