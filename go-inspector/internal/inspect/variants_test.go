package inspect

// Metadata variants derived from the real tables Apache Iceberg Java wrote
// (tests/data/tables-external): each test copies a table, rewrites only its
// metadata JSON the way another writer or format version would have written
// it, and checks that the inspection equals the original table's.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/icepack-dev/icepack/go-inspector/internal/testtables"
)

// copyTable copies the table of the metadata file rel (relative to the shared
// folder) into a temporary folder at the same relative path and makes that
// folder the working directory, since the table's own paths are relative.
func copyTable(t *testing.T, rel string) {
	t.Helper()
	tableRel := filepath.Dir(filepath.Dir(rel))
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, tableRel), os.DirFS(filepath.Join(testtables.Dir(t), tableRel))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(tmp)
}

// rewrite writes the metadata rel, changed by edit, as a sibling file name.
func rewrite(t *testing.T, rel, name string, edit func(m map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // snapshot ids must survive unchanged
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(rel), name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func currentSnapshot(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	for _, s := range m["snapshots"].([]any) {
		snap := s.(map[string]any)
		if snap["snapshot-id"] == m["current-snapshot-id"] {
			return snap
		}
	}
	t.Fatal("no current snapshot")
	return nil
}

func mustInspect(t *testing.T, location string) *TableStatus {
	t.Helper()
	st, err := InspectLocation(context.Background(), location, nil, Options{})
	if err != nil {
		t.Fatalf("inspect %s: %v", location, err)
	}
	return st
}

// sameContract compares two statuses on every contract field except the run
// fields and those named in except.
func sameContract(t *testing.T, got, want *TableStatus, except ...string) {
	t.Helper()
	asMap := func(st *TableStatus) map[string]any {
		raw, _ := json.Marshal(st)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		for _, k := range append([]string{"inspected_at", "inspect_ms", "metadata_location"}, except...) {
			delete(m, k)
		}
		return m
	}
	g, w := asMap(got), asMap(want)
	for k, v := range w {
		if gv, _ := json.Marshal(g[k]); string(gv) != mustJSON(v) {
			t.Errorf("%s = %s, want %s", k, gv, mustJSON(v))
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRowLineageV3 reads the table as format v3 with row lineage in the
// shapes writers produce: Iceberg 1.10 (next-row-id, first-row-id and
// added-rows on every snapshot), Iceberg 1.8 ("row-lineage": true,
// first-row-id without added-rows) and a v3 table written without lineage (no
// next-row-id). iceberg-go's metadata parser rejected the last one with
// "invalid metadata: next-row-id is required for v3 tables".
func TestRowLineageV3(t *testing.T) {
	rel := testtables.MyTablePartitioned
	copyTable(t, rel)
	want := mustInspect(t, rel)
	variants := map[string]func(m map[string]any){
		"java-1.10": func(m map[string]any) {
			next := int64(0)
			for _, s := range m["snapshots"].([]any) {
				snap := s.(map[string]any)
				snap["first-row-id"], snap["added-rows"] = next, 3
				next += 3
			}
			m["next-row-id"] = next
		},
		"java-1.8-row-lineage": func(m map[string]any) {
			m["row-lineage"], m["next-row-id"] = true, 100
			for i, s := range m["snapshots"].([]any) {
				s.(map[string]any)["first-row-id"] = 10 * i
			}
		},
		"no-next-row-id": func(m map[string]any) {},
	}
	for name, edit := range variants {
		t.Run(name, func(t *testing.T) {
			path := rewrite(t, rel, "v3-"+name+".metadata.json", func(m map[string]any) {
				m["format-version"] = 3
				edit(m)
			})
			got := mustInspect(t, path)
			if got.FormatVersion != 3 {
				t.Errorf("format_version = %d", got.FormatVersion)
			}
			sameContract(t, got, want, "format_version")
		})
	}
}

// TestRelativeFileURIManifestList points the current snapshot at its manifest
// list through a relative file:// URI ("file://data/persistent/..."), which
// PyIceberg reads as the path netloc+path relative to the working directory.
// How the case is derived: the shared table's manifest-list is relative
// ("data/persistent/..."); prefixing "file://" gives the relative URI.
func TestRelativeFileURIManifestList(t *testing.T) {
	rel := testtables.MyTable
	copyTable(t, rel)
	want := mustInspect(t, rel)
	path := rewrite(t, rel, "v8-file-uri.metadata.json", func(m map[string]any) {
		snap := currentSnapshot(t, m)
		list := snap["manifest-list"].(string)
		if strings.Contains(list, "://") {
			t.Fatalf("expected a relative manifest list, got %s", list)
		}
		snap["manifest-list"] = "file://" + list
	})
	sameContract(t, mustInspect(t, path), want)
}

// TestInlineV1Manifests rewrites the table as a v1 table whose current
// snapshot lists its manifests inline ("manifests") instead of a manifest
// list: the spec id then comes from each manifest's header and
// manifest_length from the file size, which the list recorded identically.
func TestInlineV1Manifests(t *testing.T) {
	rel := testtables.MyTablePartitioned
	copyTable(t, rel)
	want := mustInspect(t, rel)
	path := rewrite(t, rel, "v1-inline.metadata.json", func(m map[string]any) {
		m["format-version"] = 1
		snap := currentSnapshot(t, m)
		data, err := os.ReadFile(snap["manifest-list"].(string))
		if err != nil {
			t.Fatal(err)
		}
		refs, err := readManifestList(data)
		if err != nil {
			t.Fatal(err)
		}
		var paths []any
		for _, r := range refs {
			paths = append(paths, r.path)
		}
		delete(snap, "manifest-list")
		snap["manifests"] = paths
	})
	got := mustInspect(t, path)
	if got.FormatVersion != 1 || got.ManifestCount == 0 {
		t.Errorf("format_version %d, manifest_count %d", got.FormatVersion, got.ManifestCount)
	}
	// A v1 inline manifest has no sequence number, so every entry's is 0: the table's
	// equality deletes are then no younger than its data and apply to nothing (v1 has no
	// delete files; the rewrite only exercises reading inline manifests).
	sameContract(t, got, want, "format_version", "equality_delete_file_count", "delete_record_count")
	if got.EqualityDeleteFileCount != 0 {
		t.Errorf("equality_delete_file_count = %d, want 0", got.EqualityDeleteFileCount)
	}
}

// TestGzipMetadata reads gzip-compressed copies of the metadata under both
// names in use: *.gz.metadata.json (Iceberg's) and *.metadata.json.gz.
func TestGzipMetadata(t *testing.T) {
	rel := testtables.MyTable
	copyTable(t, rel)
	want := mustInspect(t, rel)
	raw, err := os.ReadFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	for _, name := range []string{"v8.gz.metadata.json", "v8.metadata.json.gz"} {
		path := filepath.Join(filepath.Dir(rel), name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		sameContract(t, mustInspect(t, path), want)
	}
}

// TestUnreadableFilesNameTheCause corrupts one file of a copied table at a
// time: the inspection fails with the sentinel of the file's role and names
// the file, never a panic.
func TestUnreadableFilesNameTheCause(t *testing.T) {
	rel := testtables.MyTable
	copyTable(t, rel)
	meta := testtables.ReadMetadata(t, rel)
	list := meta.Current().ManifestList
	data, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := readManifestList(data)
	if err != nil || len(refs) == 0 {
		t.Fatalf("manifest list: %v", err)
	}
	manifest := refs[0].path
	original, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(filepath.Dir(rel), "v9.gz.metadata.json")
	cases := []struct {
		name, location string
		corrupt        func()
		sentinel       error
		mention        string
	}{
		{"gzip that is not", gz, func() { os.WriteFile(gz, []byte{0x1f, 0x8b, 'n', 'o'}, 0o644) }, ErrMetadata, "gzip"},
		{"metadata of an unknown version", rel, func() {
			rewrite(t, rel, filepath.Base(rel), func(m map[string]any) { m["format-version"] = 9 })
		}, ErrMetadata, "format-version 9"},
		{"garbage manifest", testtables.MyTable, func() {
			os.WriteFile(manifest, []byte("not avro"), 0o644)
		}, ErrManifest, filepath.Base(manifest)},
		{"truncated manifest", testtables.MyTable, func() {
			os.WriteFile(manifest, original[:len(original)-40], 0o644)
		}, ErrManifest, filepath.Base(manifest)},
		{"v2 snapshot without a manifest list", rel, func() {
			rewrite(t, rel, filepath.Base(rel), func(m map[string]any) { delete(currentSnapshot(t, m), "manifest-list") })
		}, ErrManifestList, "has no manifest-list"},
		{"garbage manifest list", testtables.MyTable, func() {
			os.WriteFile(list, []byte("Obj\x01garbage"), 0o644)
		}, ErrManifestList, filepath.Base(list)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			copyTable(t, rel)
			tc.corrupt()
			_, err := InspectLocation(context.Background(), tc.location, nil, Options{})
			if !errors.Is(err, tc.sentinel) || errors.Is(err, ErrUnexpected) {
				t.Fatalf("want %v, got %v", tc.sentinel, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("message %q should mention %q", err, tc.mention)
			}
		})
	}
}
