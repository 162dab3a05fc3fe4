// Package testtables locates the Iceberg tables written by Apache Iceberg Java
// that the repository vendors (tests/data/tables-external) for tests, and reads the writer's own
// metadata independently of iceberg-go so it can serve as ground truth.
package testtables

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// EnvDir overrides where the tables are looked for.
const EnvDir = "ICEPACK_TABLES_EXTERNAL"

// Metadata paths of the shared tables, relative to Dir (the tables' own paths
// are relative to that folder too).
const (
	MyTable            = "data/persistent/equality_deletes/warehouse/mydb/mytable/metadata/v7.metadata.json"
	MyTableEmpty       = "data/persistent/equality_deletes/warehouse/mydb/mytable/metadata/v1.metadata.json"
	MyTablePartitioned = "data/persistent/equality_deletes/warehouse/mydb/mytable_partitioned/metadata/v6.metadata.json"
	CrossPartition     = "data/persistent/equality_delete_cross_partition/warehouse/ns/t/metadata/vfinal.metadata.json"
)

// Dir returns the absolute path of tests/data/tables-external inside the
// repository, or $ICEPACK_TABLES_EXTERNAL when set. The tables are part of the
// repository, so a missing folder fails the test.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	// This file sits at <clone>/go-inspector/internal/testtables; resolving from
	// it rather than the working directory keeps working after t.Chdir.
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate testtables source file")
	}
	candidate := filepath.Join(filepath.Dir(self), "..", "..", "..", "tests", "data", "tables-external")
	if _, err := os.Stat(filepath.Join(candidate, "README.md")); err != nil {
		t.Fatalf("vendored test tables not found at %s (set %s to use another copy): %v", candidate, EnvDir, err)
	}
	return filepath.Clean(candidate)
}

// Snapshot is the part of a snapshot the tests compare against.
type Snapshot struct {
	SnapshotID   json.Number       `json:"snapshot-id"`
	TimestampMs  int64             `json:"timestamp-ms"`
	ManifestList string            `json:"manifest-list"`
	Summary      map[string]string `json:"summary"`
}

// Metadata is the part of a metadata JSON file the tests compare against.
type Metadata struct {
	FormatVersion     int                        `json:"format-version"`
	CurrentSnapshotID json.Number                `json:"current-snapshot-id"`
	Snapshots         []Snapshot                 `json:"snapshots"`
	MetadataLog       []json.RawMessage          `json:"metadata-log"`
	Refs              map[string]json.RawMessage `json:"refs"`
}

// ReadMetadata parses the metadata file at path with encoding/json only.
func ReadMetadata(t testing.TB, path string) Metadata {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m Metadata
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// Current returns the current snapshot, or nil when there is none.
func (m Metadata) Current() *Snapshot {
	for i := range m.Snapshots {
		if m.Snapshots[i].SnapshotID == m.CurrentSnapshotID {
			return &m.Snapshots[i]
		}
	}
	return nil
}
