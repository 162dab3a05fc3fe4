package inspect_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/icepack-dev/icepack/go-inspector/internal/inspect"
)

// minimalMetadata is a valid v2 metadata file with one snapshot whose manifest
// list is MANIFEST_LIST; it needs no shared tables.
const minimalMetadata = `{
  "format-version": 2,
  "table-uuid": "96247900-66da-4f86-9cbe-c81dbcf8420f",
  "location": "LOCATION",
  "last-sequence-number": 1,
  "last-updated-ms": 1758879194794,
  "last-column-id": 1,
  "current-schema-id": 0,
  "schemas": [{"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "int"}]}],
  "default-spec-id": 0,
  "partition-specs": [{"spec-id": 0, "fields": []}],
  "last-partition-id": 999,
  "default-sort-order-id": 0,
  "sort-orders": [{"order-id": 0, "fields": []}],
  "properties": {},
  "current-snapshot-id": 7,
  "refs": {"main": {"snapshot-id": 7, "type": "branch"}},
  "snapshots": [{"snapshot-id": 7, "sequence-number": 1, "timestamp-ms": 1758879194794,
                 "manifest-list": "MANIFEST_LIST", "summary": {"operation": "append"}}],
  "snapshot-log": [], "metadata-log": []
}`

// writeMetadata writes content as tmp/ns/tbl/metadata/v1.metadata.json.
func writeMetadata(t *testing.T, content string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	meta := filepath.Join(dir, "ns", "tbl", "metadata")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(meta, "v1.metadata.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

func minimal(dir string) string {
	r := strings.NewReplacer("LOCATION", filepath.Join(dir, "ns", "tbl"),
		"MANIFEST_LIST", filepath.Join(dir, "ns", "tbl", "metadata", "snap-7-missing.avro"))
	return r.Replace(minimalMetadata)
}

func TestInspectionFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name     string
		setup    func(t *testing.T) string
		sentinel error
		mention  string
	}{
		{"missing metadata file", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "nope.metadata.json")
		}, inspect.ErrMetadata, "nope.metadata.json"},
		{"non-JSON metadata", func(t *testing.T) string {
			p, _ := writeMetadata(t, "this is not json\n")
			return p
		}, inspect.ErrMetadata, "v1.metadata.json"},
		{"truncated metadata", func(t *testing.T) string {
			tmp := t.TempDir()
			full := minimal(tmp)
			p, _ := writeMetadata(t, full[:len(full)/2])
			return p
		}, inspect.ErrMetadata, "v1.metadata.json"},
		{"missing manifest list", func(t *testing.T) string {
			dir := t.TempDir()
			meta := filepath.Join(dir, "ns", "tbl", "metadata")
			if err := os.MkdirAll(meta, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(meta, "v1.metadata.json")
			if err := os.WriteFile(p, []byte(minimal(dir)), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, inspect.ErrManifestList, "snap-7-missing.avro"},
		{"empty location", func(t *testing.T) string { return "" }, inspect.ErrInvalidOptions, "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := inspect.InspectLocation(ctx, tc.setup(t), nil, inspect.Options{})
			if st != nil || !errors.Is(err, tc.sentinel) {
				t.Fatalf("want %v, got status %v err %v", tc.sentinel, st, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("message %q should mention %q", err, tc.mention)
			}
		})
	}
}

func TestRESTNeedsIdentifier(t *testing.T) {
	t.Parallel()
	_, err := inspect.InspectREST(context.Background(), inspect.RESTConfig{URI: "http://127.0.0.1:1", Identifier: "tbl"}, inspect.Options{})
	if !errors.Is(err, inspect.ErrInvalidOptions) {
		t.Fatalf("want ErrInvalidOptions, got %v", err)
	}
}
