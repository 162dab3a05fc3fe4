// Package inspect computes the TableStatus metrics of one Iceberg table from
// its metadata, following the contract in docs/table-status.md.
package inspect

import (
	"encoding/json"
	"time"
)

// InspectorName identifies this implementation in TableStatus.Inspector.
const InspectorName = "iceberg-go"

// DefaultTargetFileSizeBytes is Iceberg's default write.target-file-size-bytes.
const DefaultTargetFileSizeBytes int64 = 536870912

// TargetFileSizeProperty is the table property the small-file threshold is derived from.
const TargetFileSizeProperty = "write.target-file-size-bytes"

// Histogram bucket keys, exactly as the contract spells them.
const (
	BucketUnder1MiB  = "<1MiB"
	Bucket1To8MiB    = "1MiB-8MiB"
	Bucket8To32MiB   = "8MiB-32MiB"
	Bucket32To128MiB = "32MiB-128MiB"
	Bucket128To512   = "128MiB-512MiB"
	BucketOver512MiB = ">=512MiB"
)

const mib = int64(1) << 20

// Histogram counts live data files per size bucket. A struct (not a map) keeps
// all six keys present and in a stable order in the JSON output.
type Histogram struct {
	Under1MiB    int64 `json:"<1MiB"`
	From1To8     int64 `json:"1MiB-8MiB"`
	From8To32    int64 `json:"8MiB-32MiB"`
	From32To128  int64 `json:"32MiB-128MiB"`
	From128To512 int64 `json:"128MiB-512MiB"`
	Over512      int64 `json:">=512MiB"`
}

// add counts one file of the given size; lower bounds inclusive, upper exclusive.
func (h *Histogram) add(size int64) {
	switch {
	case size < 1*mib:
		h.Under1MiB++
	case size < 8*mib:
		h.From1To8++
	case size < 32*mib:
		h.From8To32++
	case size < 128*mib:
		h.From32To128++
	case size < 512*mib:
		h.From128To512++
	default:
		h.Over512++
	}
}

// merge adds the counts of o into h.
func (h *Histogram) merge(o Histogram) {
	h.Under1MiB += o.Under1MiB
	h.From1To8 += o.From1To8
	h.From8To32 += o.From8To32
	h.From32To128 += o.From32To128
	h.From128To512 += o.From128To512
	h.Over512 += o.Over512
}

// Buckets returns the histogram as a map keyed by the contract's bucket names.
func (h Histogram) Buckets() map[string]int64 {
	return map[string]int64{
		BucketUnder1MiB:  h.Under1MiB,
		Bucket1To8MiB:    h.From1To8,
		Bucket8To32MiB:   h.From8To32,
		Bucket32To128MiB: h.From32To128,
		Bucket128To512:   h.From128To512,
		BucketOver512MiB: h.Over512,
	}
}

// TableStatus is the metrics contract of one table (docs/table-status.md).
// Field order follows the contract table.
type TableStatus struct {
	Catalog          string `json:"catalog"`
	Namespace        string `json:"namespace"`
	Table            string `json:"table"`
	FormatVersion    int    `json:"format_version"`
	MetadataLocation string `json:"metadata_location"`
	// CurrentSnapshotID is an exact decimal: ids beyond the int64 range are kept.
	CurrentSnapshotID *json.Number `json:"current_snapshot_id"`
	InspectedAt       string       `json:"inspected_at"`
	Inspector         string       `json:"inspector"`
	InspectMs         int64        `json:"inspect_ms"`
	ManifestsRead     int64        `json:"manifests_read"`
	ManifestsCached   int64        `json:"manifests_cached"`

	SmallFileThresholdBytes int64     `json:"small_file_threshold_bytes"`
	DataFileCount           int64     `json:"data_file_count"`
	DataFileBytes           int64     `json:"data_file_bytes"`
	RecordCount             int64     `json:"record_count"`
	SmallFileCount          int64     `json:"small_file_count"`
	SmallFileBytes          int64     `json:"small_file_bytes"`
	FileSizeHistogram       Histogram `json:"file_size_histogram"`
	PositionDeleteFileCount int64     `json:"position_delete_file_count"`
	EqualityDeleteFileCount int64     `json:"equality_delete_file_count"`
	DeletionVectorCount     int64     `json:"deletion_vector_count"`
	DeleteRecordCount       int64     `json:"delete_record_count"`
	ManifestCount           int64     `json:"manifest_count"`
	ManifestBytes           int64     `json:"manifest_bytes"`
	PartitionCount          int64     `json:"partition_count"`
	MaxFilesInPartition     int64     `json:"max_files_in_partition"`
	AvgDataFileBytes        int64     `json:"avg_data_file_bytes"`

	SnapshotCount     int64   `json:"snapshot_count"`
	OldestSnapshotAt  *string `json:"oldest_snapshot_at"`
	CurrentSnapshotAt *string `json:"current_snapshot_at"`
	MetadataLogCount  int64   `json:"metadata_log_count"`
	RefCount          int64   `json:"ref_count"`

	TableStatistics     StatisticsFreshness `json:"table_statistics"`
	PartitionStatistics StatisticsFreshness `json:"partition_statistics"`

	// Clustering is always null here: the inspector service measures it after either
	// inspector, only for a table whose compaction policy clusters it (sort, zorder).
	Clustering *struct{} `json:"clustering"`
}

// FormatTimestamp renders t as RFC 3339 in UTC with exactly three fractional
// digits and a Z suffix, e.g. 2026-11-21T10:00:00.123Z.
func FormatTimestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// formatMillis renders a Unix epoch in milliseconds like FormatTimestamp.
func formatMillis(ms int64) string {
	return FormatTimestamp(time.UnixMilli(ms))
}
