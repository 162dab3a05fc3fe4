package inspect_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/icepack-dev/icepack/go-inspector/internal/inspect"
)

const syntheticMetadata = `{
  "format-version": 3, "table-uuid": "1d0b6a0e-6d7e-4d7b-9a39-2d0f0f6c1a11", "location": "LOCATION",
  "last-sequence-number": 1, "last-updated-ms": 1780000000000, "last-column-id": 2, "next-row-id": NEXT_ROW_ID,
  "current-schema-id": 0,
  "schemas": [{"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "required": false, "type": "long"},
    {"id": 2, "name": "cat", "required": false, "type": "string"}]}],
  "default-spec-id": 0, "last-partition-id": 1000,
  "partition-specs": [{"spec-id": 0, "fields": [{"name": "cat", "transform": "identity", "source-id": 2, "field-id": 1000}]}],
  "default-sort-order-id": 0, "sort-orders": [{"order-id": 0, "fields": []}],
  "properties": {"write.target-file-size-bytes": "TARGET"},
  "current-snapshot-id": 100,
  "refs": {"main": {"snapshot-id": 100, "type": "branch"}, "v1": {"snapshot-id": 50, "type": "tag"}},
  "snapshots": [
    {"snapshot-id": 100, "sequence-number": 1, "timestamp-ms": 1780000000123, "manifest-list": "MANIFEST_LIST",
     "summary": {"operation": "append"}, "first-row-id": 0, "added-rows": ADDED_ROWS},
    {"snapshot-id": 50, "sequence-number": 0, "timestamp-ms": 1770000000007, "manifest-list": "LOCATION/metadata/never-read.avro",
     "summary": {"operation": "append"}}],
  "snapshot-log": [],
  "metadata-log": [{"metadata-file": "LOCATION/metadata/v1.metadata.json", "timestamp-ms": 1770000000000},
                   {"metadata-file": "LOCATION/metadata/v2.metadata.json", "timestamp-ms": 1775000000000}]
}`

// syntheticSizes cover every histogram bucket; 64 MiB is exactly the default
// small-file threshold and must not count as small.
var syntheticSizes = []int64{100, 2 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}

// expected is what the synthetic table must report, computed alongside writing it.
type expected struct {
	dataFiles, dataBytes, records, smallFiles, smallBytes int64
	partitions                                            map[string]int64
	manifestBytes                                         int64
}

// writeSyntheticTable writes a v3 table with dataManifests data manifests
// (one live and one DELETED entry each, every third also an EXISTING one) and
// one delete manifest holding a Parquet position delete, a PUFFIN deletion
// vector, an equality delete and a DELETED position delete.
func writeSyntheticTable(t *testing.T, dataManifests int) (string, expected) {
	t.Helper()
	dir := t.TempDir()
	loc := filepath.Join(dir, "wh", "ns", "synthetic")
	meta := filepath.Join(loc, "metadata")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	schema := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: "cat", Type: iceberg.PrimitiveTypes.String})
	spec := iceberg.NewPartitionSpecID(0, iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "cat", Transform: iceberg.IdentityTransform{}})
	snap := int64(100)
	want := expected{partitions: map[string]int64{}}

	file := func(content iceberg.ManifestEntryContent, format iceberg.FileFormat, name, part string, records, size int64,
		extra func(*iceberg.DataFileBuilder)) iceberg.ManifestEntry {
		b, err := iceberg.NewDataFileBuilder(spec, content, filepath.Join(loc, "data", name), format,
			map[int]any{1000: part}, nil, nil, records, size)
		if err != nil {
			t.Fatal(err)
		}
		if extra != nil {
			extra(b)
		}
		// Delete files are younger than the data (sequence number 2 against 1), so each
		// can still apply to a data file of its partition and counts (applicable.go).
		seq := int64(1)
		if content != iceberg.EntryContentData {
			seq = 2
		}
		return iceberg.NewManifestEntryBuilder(iceberg.EntryStatusADDED, &snap, b.Build()).SequenceNum(seq).FileSequenceNum(seq).Build()
	}
	writeManifest := func(name string, content iceberg.ManifestContent, add func(w *iceberg.ManifestWriter) error) iceberg.ManifestFile {
		var buf bytes.Buffer
		w, err := iceberg.NewManifestWriter(3, &buf, spec, schema, snap, iceberg.WithManifestWriterContent(content))
		if err != nil {
			t.Fatal(err)
		}
		if err := add(w); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(meta, name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		mf, err := w.ToManifestFile(path, int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		want.manifestBytes += int64(buf.Len())
		return mf
	}
	live := func(part string, records, size int64) {
		want.dataFiles++
		want.dataBytes += size
		want.records += records
		want.partitions[part]++
		if size < inspect.DefaultTargetFileSizeBytes/8 {
			want.smallFiles++
			want.smallBytes += size
		}
	}

	var manifests []iceberg.ManifestFile
	for i := range dataManifests {
		part, size := fmt.Sprintf("p%d", i%7), syntheticSizes[i%len(syntheticSizes)]
		manifests = append(manifests, writeManifest(fmt.Sprintf("data-%04d-m0.avro", i), iceberg.ManifestContentData,
			func(w *iceberg.ManifestWriter) error {
				live(part, 10, size)
				if err := w.Add(file(iceberg.EntryContentData, iceberg.ParquetFile, fmt.Sprintf("a-%d.parquet", i), part, 10, size, nil)); err != nil {
					return err
				}
				if i%3 == 0 {
					live(part, 4, 1000)
					if err := w.Existing(file(iceberg.EntryContentData, iceberg.ParquetFile, fmt.Sprintf("e-%d.parquet", i), part, 4, 1000, nil)); err != nil {
						return err
					}
				}
				return w.Delete(file(iceberg.EntryContentData, iceberg.ParquetFile, fmt.Sprintf("d-%d.parquet", i), "gone", 99, 99, nil))
			}))
	}
	manifests = append(manifests, writeManifest("deletes-m0.avro", iceberg.ManifestContentDeletes,
		func(w *iceberg.ManifestWriter) error {
			for _, e := range []iceberg.ManifestEntry{
				file(iceberg.EntryContentPosDeletes, iceberg.ParquetFile, "pos.parquet", "p0", 5, 500, nil),
				file(iceberg.EntryContentPosDeletes, iceberg.PuffinFile, "dv.puffin", "p0", 3, 300, func(b *iceberg.DataFileBuilder) {
					b.ReferencedDataFile(filepath.Join(loc, "data", "a-0.parquet")).ContentOffset(4).ContentSizeInBytes(40)
				}),
				file(iceberg.EntryContentEqDeletes, iceberg.ParquetFile, "eq.parquet", "p1", 2, 200, func(b *iceberg.DataFileBuilder) {
					b.EqualityFieldIDs([]int{1})
				}),
			} {
				if err := w.Add(e); err != nil {
					return err
				}
			}
			return w.Delete(file(iceberg.EntryContentPosDeletes, iceberg.ParquetFile, "old-pos.parquet", "p2", 77, 700, nil))
		}))

	var list bytes.Buffer
	lw, err := iceberg.NewManifestListWriterV3(&list, snap, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.AddManifests(manifests); err != nil {
		t.Fatal(err)
	}
	nextRowID := *lw.NextRowID()
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	listPath := filepath.Join(meta, "snap-100-1-list.avro")
	if err := os.WriteFile(listPath, list.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	metaPath := filepath.Join(meta, "v3.metadata.json")
	text := strings.NewReplacer("LOCATION", loc, "MANIFEST_LIST", listPath, "TARGET", "536870912",
		"NEXT_ROW_ID", fmt.Sprint(nextRowID), "ADDED_ROWS", fmt.Sprint(nextRowID)).Replace(syntheticMetadata)
	if err := os.WriteFile(metaPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return metaPath, want
}

// TestSyntheticTable checks deletion vectors, DELETED and EXISTING entries,
// every histogram bucket, the threshold boundary and a 1000+ manifest pool.
func TestSyntheticTable(t *testing.T) {
	t.Parallel()
	const dataManifests = 1200
	path, want := writeSyntheticTable(t, dataManifests)
	st, err := inspect.InspectLocation(context.Background(), "file://"+path, nil, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("inspected %d manifests in %d ms", st.ManifestsRead, st.InspectMs)
	eq(t, "format_version", st.FormatVersion, 3)
	eq(t, "namespace", st.Namespace, "ns")
	eq(t, "table", st.Table, "synthetic")
	eq(t, "manifest_count", st.ManifestCount, dataManifests+1)
	eq(t, "manifests_read", st.ManifestsRead, dataManifests+1)
	eq(t, "manifest_bytes", st.ManifestBytes, want.manifestBytes)
	eq(t, "data_file_count", st.DataFileCount, want.dataFiles)
	eq(t, "data_file_bytes", st.DataFileBytes, want.dataBytes)
	eq(t, "record_count", st.RecordCount, want.records)
	eq(t, "small_file_count", st.SmallFileCount, want.smallFiles)
	eq(t, "small_file_bytes", st.SmallFileBytes, want.smallBytes)
	eq(t, "avg_data_file_bytes", st.AvgDataFileBytes, want.dataBytes/want.dataFiles)
	eq(t, "partition_count", st.PartitionCount, int64(len(want.partitions)))
	var maxFiles int64
	for _, n := range want.partitions {
		maxFiles = max(maxFiles, n)
	}
	eq(t, "max_files_in_partition", st.MaxFilesInPartition, maxFiles)
	eq(t, "position_delete_file_count", st.PositionDeleteFileCount, 1)
	eq(t, "deletion_vector_count", st.DeletionVectorCount, 1)
	eq(t, "equality_delete_file_count", st.EqualityDeleteFileCount, 1)
	eq(t, "delete_record_count", st.DeleteRecordCount, 5+3+2)

	perBucket := int64(dataManifests / len(syntheticSizes))
	h := st.FileSizeHistogram
	eq(t, "<1MiB", h.Under1MiB, want.dataFiles-int64(dataManifests)+perBucket) // EXISTING files are 1000 B
	eq(t, "1MiB-8MiB", h.From1To8, perBucket)
	eq(t, "8MiB-32MiB", h.From8To32, perBucket)
	eq(t, "32MiB-128MiB", h.From32To128, perBucket)
	eq(t, "128MiB-512MiB", h.From128To512, perBucket)
	eq(t, ">=512MiB", h.Over512, perBucket)

	eq(t, "snapshot_count", st.SnapshotCount, 2)
	eq(t, "oldest_snapshot_at", deref(st.OldestSnapshotAt), "2026-02-02T02:40:00.007Z")
	eq(t, "current_snapshot_at", deref(st.CurrentSnapshotAt), "2026-05-28T20:26:40.123Z")
	eq(t, "metadata_log_count", st.MetadataLogCount, 2)
	eq(t, "ref_count", st.RefCount, 2)
}
