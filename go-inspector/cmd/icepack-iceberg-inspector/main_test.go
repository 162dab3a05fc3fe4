package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/icepack-dev/icepack/go-inspector/internal/testtables"
)

func noEnv(string) string { return "" }

// invoke runs the CLI and checks that stdout holds exactly one JSON object.
func invoke(t *testing.T, args ...string) (code int, result map[string]any, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, noEnv)
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&result); err != nil {
		t.Fatalf("stdout is not one JSON object (%v): %q", err, out.String())
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value")
	}
	return code, result, errOut.String()
}

func wantError(t *testing.T, result map[string]any, mention string) {
	t.Helper()
	body, ok := result["error"].(map[string]any)
	if !ok || len(result) != 1 {
		t.Fatalf("want an error object only, got %v", result)
	}
	if body["code"] != "INSPECTION_FAILED" {
		t.Errorf("code = %v", body["code"])
	}
	if msg, _ := body["message"].(string); !strings.Contains(msg, mention) {
		t.Errorf("message %q should mention %q", msg, mention)
	}
}

func TestSuccessPrintsContract(t *testing.T) {
	t.Chdir(testtables.Dir(t))
	code, result, _ := invoke(t, "--metadata-location", testtables.MyTable, "--catalog", "ext",
		"--prop", "s3.region=eu-west-1")
	if code != 0 {
		t.Fatalf("exit %d: %v", code, result)
	}
	if result["inspector"] != "iceberg-go" || result["catalog"] != "ext" || result["table"] != "mytable" ||
		result["data_file_count"] != float64(2) {
		t.Errorf("unexpected status %v", result)
	}
	hist, _ := result["file_size_histogram"].(map[string]any)
	if len(hist) != 6 || hist["<1MiB"] != float64(2) {
		t.Errorf("histogram = %v", hist)
	}
}

func TestFailuresExitOneWithErrorObject(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "v1.metadata.json")
	if err := os.WriteFile(notJSON, []byte("<html>nope</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "v2.metadata.json")
	if err := os.WriteFile(truncated, []byte(`{"format-version": 2, "table-uuid": "96247900-66d`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{notJSON, truncated, filepath.Join(dir, "absent.metadata.json")} {
		code, result, stderr := invoke(t, "--metadata-location", path)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1", path, code)
		}
		wantError(t, result, filepath.Base(path))
		if !strings.Contains(stderr, "inspection failed") {
			t.Errorf("stderr should carry the diagnostic, got %q", stderr)
		}
	}
}

func TestMissingManifestListExitsOne(t *testing.T) {
	src := testtables.Dir(t)
	raw, err := os.ReadFile(filepath.Join(src, testtables.MyTable))
	if err != nil {
		t.Fatal(err)
	}
	// Point every snapshot's manifest list at a file that does not exist.
	rewritten := strings.ReplaceAll(string(raw), "/metadata/snap-", "/metadata/gone-snap-")
	path := filepath.Join(t.TempDir(), "v7.metadata.json")
	if err := os.WriteFile(path, []byte(rewritten), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(src)
	code, result, _ := invoke(t, "--metadata-location", path)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantError(t, result, "gone-snap-1916084761853986166")
}

func TestInvalidArgumentsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--no-such-flag"},
		{"--metadata-location", "x", "--rest-uri", "http://127.0.0.1:1"},
		{"--metadata-location", "x", "--prop", "novalue"},
		{"--rest-uri", "http://127.0.0.1:1", "--identifier", "justtable"},
		{"--metadata-location", "x", "--max-block-bytes", "0"},
		{"--metadata-location", "x", "--max-block-bytes", "-5"},
	} {
		code, result, _ := invoke(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		wantError(t, result, "invalid inspection options")
	}
}
