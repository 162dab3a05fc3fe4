package inspect_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/icepack-dev/icepack/go-inspector/internal/inspect"
	"github.com/icepack-dev/icepack/go-inspector/internal/testtables"
)

// inspectShared inspects a shared table with the shared folder as working
// directory, because the tables' own paths are relative to it. t.Chdir makes
// the test non-parallel and restores the directory afterwards.
func inspectShared(t *testing.T, rel string, opts inspect.Options) (*inspect.TableStatus, testtables.Metadata) {
	t.Helper()
	dir := testtables.Dir(t)
	t.Chdir(dir)
	st, err := inspect.InspectLocation(context.Background(), rel, nil, opts)
	if err != nil {
		t.Fatalf("inspect %s: %v", rel, err)
	}
	return st, testtables.ReadMetadata(t, filepath.Join(dir, rel))
}

func summaryInt(t *testing.T, s map[string]string, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s[key], 10, 64)
	if err != nil {
		t.Fatalf("summary %s=%q: %v", key, s[key], err)
	}
	return v
}

func eq[T comparable](t *testing.T, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

// TestWriterSummaryIsGroundTruth compares the counts with the totals Apache
// Iceberg Java wrote into the current snapshot's summary.
func TestWriterSummaryIsGroundTruth(t *testing.T) {
	for _, rel := range []string{testtables.MyTable, testtables.MyTablePartitioned} {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(rel))), func(t *testing.T) {
			st, meta := inspectShared(t, rel, inspect.Options{})
			cur := meta.Current()
			if cur == nil {
				t.Fatal("shared table has no current snapshot")
			}
			s := cur.Summary
			eq(t, "data_file_count", st.DataFileCount, summaryInt(t, s, "total-data-files"))
			eq(t, "record_count", st.RecordCount, summaryInt(t, s, "total-records"))
			eq(t, "delete files", st.PositionDeleteFileCount+st.EqualityDeleteFileCount+st.DeletionVectorCount,
				summaryInt(t, s, "total-delete-files"))
			eq(t, "delete_record_count", st.DeleteRecordCount,
				summaryInt(t, s, "total-equality-deletes")+summaryInt(t, s, "total-position-deletes"))

			eq(t, "format_version", st.FormatVersion, meta.FormatVersion)
			if st.CurrentSnapshotID == nil || *st.CurrentSnapshotID != meta.CurrentSnapshotID {
				t.Errorf("current_snapshot_id = %v, want %s", st.CurrentSnapshotID, meta.CurrentSnapshotID)
			}
			eq(t, "snapshot_count", st.SnapshotCount, int64(len(meta.Snapshots)))
			eq(t, "metadata_log_count", st.MetadataLogCount, int64(len(meta.MetadataLog)))
			eq(t, "ref_count", st.RefCount, int64(len(meta.Refs)))
			oldest := meta.Snapshots[0].TimestampMs
			for _, sn := range meta.Snapshots {
				oldest = min(oldest, sn.TimestampMs)
			}
			eq(t, "oldest_snapshot_at", deref(st.OldestSnapshotAt), inspect.FormatTimestamp(time.UnixMilli(oldest)))
			eq(t, "current_snapshot_at", deref(st.CurrentSnapshotAt), inspect.FormatTimestamp(time.UnixMilli(cur.TimestampMs)))

			eq(t, "inspector", st.Inspector, "iceberg-go")
			eq(t, "manifests_read", st.ManifestsRead, st.ManifestCount)
			eq(t, "manifests_cached", st.ManifestsCached, 0)
			eq(t, "metadata_location", st.MetadataLocation, rel)
		})
	}
}

// TestHandVerifiedValues pins values checked by hand against the files on disk
// (sizes from stat, partitions from the data/name=* folders).
func TestHandVerifiedValues(t *testing.T) {
	t.Run("mytable", func(t *testing.T) {
		st, _ := inspectShared(t, testtables.MyTable, inspect.Options{})
		eq(t, "namespace", st.Namespace, "mydb")
		eq(t, "table", st.Table, "mytable")
		eq(t, "catalog", st.Catalog, "")
		eq(t, "data_file_count", st.DataFileCount, 2)
		eq(t, "data_file_bytes", st.DataFileBytes, 909+935)
		eq(t, "avg_data_file_bytes", st.AvgDataFileBytes, (909+935)/2)
		eq(t, "record_count", st.RecordCount, 6)
		eq(t, "equality_delete_file_count", st.EqualityDeleteFileCount, 4)
		eq(t, "position_delete_file_count", st.PositionDeleteFileCount, 0)
		eq(t, "deletion_vector_count", st.DeletionVectorCount, 0)
		eq(t, "partition_count", st.PartitionCount, 1) // unpartitioned with data counts 1
		eq(t, "max_files_in_partition", st.MaxFilesInPartition, 2)
		eq(t, "small_file_threshold_bytes", st.SmallFileThresholdBytes, 536870912/8)
		eq(t, "small_file_count", st.SmallFileCount, 2)
		eq(t, "histogram <1MiB", st.FileSizeHistogram.Under1MiB, 2)
		eq(t, "manifest_count", st.ManifestCount, 6)
		eq(t, "current_snapshot_at", deref(st.CurrentSnapshotAt), "2025-09-26T09:41:21.766Z")
		eq(t, "oldest_snapshot_at", deref(st.OldestSnapshotAt), "2025-09-26T09:37:23.926Z")
	})
	t.Run("mytable_partitioned", func(t *testing.T) {
		st, _ := inspectShared(t, testtables.MyTablePartitioned, inspect.Options{})
		eq(t, "data_file_bytes", st.DataFileBytes, 5*892+891)
		eq(t, "avg_data_file_bytes", st.AvgDataFileBytes, 891) // 5351 // 6
		eq(t, "partition_count", st.PartitionCount, 6)
		eq(t, "max_files_in_partition", st.MaxFilesInPartition, 1)
		eq(t, "equality_delete_file_count", st.EqualityDeleteFileCount, 3)
		eq(t, "delete_record_count", st.DeleteRecordCount, 3)
	})
}

func TestSmallFileOverrideAndIdentityFlags(t *testing.T) {
	st, _ := inspectShared(t, testtables.MyTable, inspect.Options{
		SmallFileBytes: 910, Catalog: "c", Namespace: "a.b", Table: "x",
	})
	eq(t, "small_file_threshold_bytes", st.SmallFileThresholdBytes, 910)
	eq(t, "small_file_count", st.SmallFileCount, 1) // 909 < 910, 935 is not
	eq(t, "small_file_bytes", st.SmallFileBytes, 909)
	eq(t, "catalog", st.Catalog, "c")
	eq(t, "namespace", st.Namespace, "a.b")
	eq(t, "table", st.Table, "x")
}

// TestWorkerCountDoesNotChangeResults runs the pool sequentially and widely.
func TestWorkerCountDoesNotChangeResults(t *testing.T) {
	one, _ := inspectShared(t, testtables.MyTablePartitioned, inspect.Options{Workers: 1})
	many, _ := inspectShared(t, testtables.MyTablePartitioned, inspect.Options{Workers: 64})
	one.InspectedAt, one.InspectMs = many.InspectedAt, many.InspectMs
	a, b := *one, *many
	a.CurrentSnapshotID, a.OldestSnapshotAt, a.CurrentSnapshotAt = nil, nil, nil
	b.CurrentSnapshotID, b.OldestSnapshotAt, b.CurrentSnapshotAt = nil, nil, nil
	if a != b {
		t.Errorf("workers=1 gives %+v, workers=64 gives %+v", a, b)
	}
}

func TestTableWithoutCurrentSnapshot(t *testing.T) {
	st, _ := inspectShared(t, testtables.MyTableEmpty, inspect.Options{})
	if st.CurrentSnapshotID != nil || st.CurrentSnapshotAt != nil || st.OldestSnapshotAt != nil {
		t.Errorf("want null snapshot fields, got %v %v %v", st.CurrentSnapshotID, st.CurrentSnapshotAt, st.OldestSnapshotAt)
	}
	eq(t, "data_file_count", st.DataFileCount, 0)
	eq(t, "manifest_count", st.ManifestCount, 0)
	eq(t, "partition_count", st.PartitionCount, 0)
	eq(t, "avg_data_file_bytes", st.AvgDataFileBytes, 0)
	eq(t, "manifests_read", st.ManifestsRead, 0)
}

// TestSnapshotIDBeyondInt64 reads the hand-made table whose snapshot id
// 9876543210123456789 does not fit the spec's long, as PyIceberg does: the id
// is reported exactly. Its current snapshot's summary has no totals: the
// first snapshot's (2 files, 4 records) plus the one added delete file are.
func TestSnapshotIDBeyondInt64(t *testing.T) {
	st, meta := inspectShared(t, testtables.CrossPartition, inspect.Options{})
	if st.CurrentSnapshotID == nil || *st.CurrentSnapshotID != "9876543210123456789" {
		t.Fatalf("current_snapshot_id = %v", st.CurrentSnapshotID)
	}
	first := meta.Snapshots[0].Summary
	eq(t, "data_file_count", st.DataFileCount, summaryInt(t, first, "total-data-files"))
	eq(t, "record_count", st.RecordCount, summaryInt(t, first, "total-records"))
	eq(t, "equality_delete_file_count", st.EqualityDeleteFileCount,
		summaryInt(t, meta.Current().Summary, "added-delete-files"))
	eq(t, "snapshot_count", st.SnapshotCount, 2)
	eq(t, "ref_count", st.RefCount, 1)
}

// TestMissingManifest deletes the manifests of a copied table.
func TestMissingManifest(t *testing.T) {
	src := testtables.Dir(t)
	tableRel := filepath.Dir(filepath.Dir(testtables.MyTable))
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, tableRel), os.DirFS(filepath.Join(src, tableRel))); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(tmp, tableRel, "metadata", "*-m0.avro"))
	for _, m := range manifests {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(tmp)
	_, err := inspect.InspectLocation(context.Background(), testtables.MyTable, nil, inspect.Options{})
	if !errors.Is(err, inspect.ErrManifest) {
		t.Fatalf("want ErrManifest, got %v", err)
	}
	if !strings.Contains(err.Error(), "-m0.avro") {
		t.Errorf("message should name the manifest: %v", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
