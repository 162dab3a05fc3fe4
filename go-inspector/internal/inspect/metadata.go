package inspect

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/big"

	"github.com/icepack-dev/icepack/go-inspector/internal/avro"
)

// tableMeta is the part of a table metadata JSON file the contract needs.
// Fields the contract does not use (schemas, specs, row lineage's next-row-id
// and first-row-id, encryption keys) are not decoded, so a valid file of any
// format version is read without validating what is not used; statistics
// entries and snapshot summaries are kept raw and read leniently
// (statistics.go: what is malformed there is skipped, never fatal).
type tableMeta struct {
	FormatVersion       int                        `json:"format-version"`
	Properties          map[string]string          `json:"properties"`
	CurrentSnapshotID   *json.Number               `json:"current-snapshot-id"`
	Snapshots           []snapshotMeta             `json:"snapshots"`
	MetadataLog         []json.RawMessage          `json:"metadata-log"`
	Refs                map[string]json.RawMessage `json:"refs"`
	Statistics          json.RawMessage            `json:"statistics"`
	PartitionStatistics json.RawMessage            `json:"partition-statistics"`
}

// snapshotMeta is one snapshot; v1 snapshots may list Manifests inline
// instead of a ManifestList.
type snapshotMeta struct {
	SnapshotID   json.Number `json:"snapshot-id"`
	TimestampMs  int64       `json:"timestamp-ms"`
	ManifestList string      `json:"manifest-list"`
	Manifests    []string    `json:"manifests"`
	// Raw: read leniently by freshness (statistics.go).
	ParentSnapshotID json.RawMessage `json:"parent-snapshot-id"`
	Summary          json.RawMessage `json:"summary"`
}

// gzipMagic starts a gzip stream: Iceberg writes gzip-compressed metadata as
// *.gz.metadata.json (and some tools as *.metadata.json.gz), so the content,
// not the name, decides.
var gzipMagic = []byte{0x1f, 0x8b}

// parseMetadata decodes a metadata file's bytes (plain or gzip-compressed).
func parseMetadata(raw []byte) (*tableMeta, error) {
	if bytes.HasPrefix(raw, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		// Bounded like an Avro block (four caps): a small file must not expand
		// to take the process's memory.
		limit := 4 * avro.MaxBlockBytes()
		if raw, err = io.ReadAll(io.LimitReader(zr, limit+1)); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if int64(len(raw)) > limit {
			return nil, fmt.Errorf("gzip: %w (%w): the metadata expands beyond %d bytes (4 x ICEPACK_AVRO_MAX_BLOCK_BYTES)",
				avro.ErrCorrupt, avro.ErrBlockTooLarge, limit)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m tableMeta
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not valid table metadata JSON: %w", err)
	}
	if m.FormatVersion < 1 || m.FormatVersion > 3 {
		return nil, fmt.Errorf("unsupported format-version %d", m.FormatVersion)
	}
	for i, s := range m.Snapshots {
		if _, err := snapshotID(s.SnapshotID); err != nil {
			return nil, fmt.Errorf("snapshot %d: %w", i, err)
		}
	}
	if m.CurrentSnapshotID != nil {
		if _, err := snapshotID(*m.CurrentSnapshotID); err != nil {
			return nil, fmt.Errorf("current-snapshot-id: %w", err)
		}
	}
	return &m, nil
}

// snapshotID returns a snapshot id in canonical decimal form. The spec makes
// it a long, but like PyIceberg any integer is accepted (a hand-made table has
// 9876543210123456789), so ids are compared and reported as exact decimals.
func snapshotID(n json.Number) (json.Number, error) {
	v, ok := new(big.Int).SetString(string(n), 10)
	if !ok {
		return "", fmt.Errorf("snapshot id %s is not an integer", n)
	}
	return json.Number(v.String()), nil
}

// current returns the current snapshot: none when current-snapshot-id is
// absent, null or -1, or names no listed snapshot (as PyIceberg does).
func (m *tableMeta) current() *snapshotMeta {
	if m.CurrentSnapshotID == nil {
		return nil
	}
	id, _ := snapshotID(*m.CurrentSnapshotID)
	if id == "-1" {
		return nil
	}
	for i := range m.Snapshots {
		if sid, _ := snapshotID(m.Snapshots[i].SnapshotID); sid == id {
			return &m.Snapshots[i]
		}
	}
	return nil
}

// refCount counts refs, with the implicit main branch of a table that has a
// current snapshot but no refs entry for it (older writers, v1).
func (m *tableMeta) refCount() int64 {
	n := int64(len(m.Refs))
	if _, ok := m.Refs["main"]; !ok && m.hasCurrentID() {
		n++
	}
	return n
}

func (m *tableMeta) hasCurrentID() bool {
	if m.CurrentSnapshotID == nil {
		return false
	}
	id, _ := snapshotID(*m.CurrentSnapshotID)
	return id != "-1"
}

// fillHistory sets the snapshot, metadata-log and ref counts.
func (m *tableMeta) fillHistory(st *TableStatus) {
	st.SnapshotCount = int64(len(m.Snapshots))
	if len(m.Snapshots) > 0 {
		oldest := m.Snapshots[0].TimestampMs
		for _, s := range m.Snapshots[1:] {
			oldest = min(oldest, s.TimestampMs)
		}
		at := formatMillis(oldest)
		st.OldestSnapshotAt = &at
	}
	st.MetadataLogCount = int64(len(m.MetadataLog))
	st.RefCount = m.refCount()
	m.fillStatistics(st)
}
