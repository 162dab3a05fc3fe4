package inspect

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/icepack-dev/icepack/go-inspector/internal/avro"
)

func TestHistogramBoundaries(t *testing.T) {
	t.Parallel()
	var h Histogram
	for _, size := range []int64{0, mib - 1, mib, 8*mib - 1, 8 * mib, 32 * mib, 128*mib - 1, 128 * mib, 512*mib - 1, 512 * mib, 5 << 40} {
		h.add(size)
	}
	want := Histogram{Under1MiB: 2, From1To8: 2, From8To32: 1, From32To128: 2, From128To512: 2, Over512: 2}
	if h != want {
		t.Errorf("histogram = %+v, want %+v", h, want)
	}
}

func TestStatusJSONHasAllHistogramKeysUnescaped(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(TableStatus{})
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(raw, &decoded); err != nil {
		t.Fatal(err)
	}
	hist, ok := decoded["file_size_histogram"].(map[string]any)
	if !ok || len(hist) != 6 {
		t.Fatalf("histogram = %v", decoded["file_size_histogram"])
	}
	for key := range (Histogram{}).Buckets() {
		if _, ok := hist[key]; !ok {
			t.Errorf("missing bucket %q", key)
		}
	}
	for _, nullable := range []string{"current_snapshot_id", "oldest_snapshot_at", "current_snapshot_at"} {
		if v, ok := decoded[nullable]; !ok || v != nil {
			t.Errorf("%s = %v, want null", nullable, v)
		}
	}
	contract := contractFields(t)
	for _, f := range contract {
		if _, ok := decoded[f]; !ok {
			t.Errorf("contract field %q missing from the JSON", f)
		}
	}
	if len(decoded) != len(contract) {
		t.Errorf("status has %d fields, the contract has %d: %v", len(decoded), len(contract), contract)
	}
}

// contractFields reads the field names from the contract table in
// docs/table-status.md (rows shaped like "| `name` ...").
func contractFields(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "table-status.md"))
	if err != nil {
		t.Skipf("contract document not found: %v", err)
	}
	var fields []string
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ := strings.Cut(rest, "`")
			fields = append(fields, name)
		}
	}
	if len(fields) < 30 {
		t.Fatalf("parsed only %d fields from the contract", len(fields))
	}
	return fields
}

func TestAverageAndPartitions(t *testing.T) {
	t.Parallel()
	a := newFileAgg()
	a.dataFiles, a.dataBytes = 3, 10
	a.partitions = map[string]int64{"0|1000=s:\"a\"": 2, "0|1000=null": 1}
	var st TableStatus
	a.fill(&st)
	if st.AvgDataFileBytes != 3 || st.PartitionCount != 2 || st.MaxFilesInPartition != 2 {
		t.Errorf("avg=%d partitions=%d max=%d", st.AvgDataFileBytes, st.PartitionCount, st.MaxFilesInPartition)
	}
	var empty TableStatus
	newFileAgg().fill(&empty)
	if empty.AvgDataFileBytes != 0 {
		t.Errorf("avg of no files = %d", empty.AvgDataFileBytes)
	}
}

// zz appends v in Avro's zig-zag varint encoding.
func zz(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func schema(t *testing.T, text string) *avro.Node {
	t.Helper()
	n, err := avro.ParseSchema([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func key(t *testing.T, spec int32, n *avro.Node, raw []byte) string {
	t.Helper()
	k, err := partitionKey(spec, n, raw)
	if err != nil {
		t.Fatalf("partitionKey: %v", err)
	}
	return k
}

// TestPartitionKeyIsCanonical checks that keys are equal exactly when
// PyIceberg's decoded values are: an int partition field promoted to long
// keeps its partitions, a decimal is its value whether stored as bytes or
// fixed, and a string "1", the int 1, null and "" never collide.
func TestPartitionKeyIsCanonical(t *testing.T) {
	t.Parallel()
	rec := `{"type":"record","name":"p","fields":[{"name":"a","type":["null","%s"]},{"name":"b","type":["null","%s"]}]}`
	strInt := schema(t, fmt.Sprintf(rec, "string", "int"))
	strLong := schema(t, fmt.Sprintf(rec, "string", "long"))
	intStr := schema(t, fmt.Sprintf(rec, "int", "string"))
	x3 := zz(zz(append(zz(zz(nil, 1), 1), 'x'), 1), 3)
	if key(t, 0, strInt, x3) != key(t, 0, strLong, x3) {
		t.Error("int and long values of one field must give one key")
	}
	one := zz(zz(nil, 1), 1)
	distinct := []string{
		key(t, 0, strInt, zz(append(zz(zz(nil, 1), 1), '1'), 0)),    // "1", null
		key(t, 0, intStr, append(one, zz(nil, 0)...)),               // 1, null
		key(t, 0, strInt, zz(zz(nil, 0), 0)),                        // null, null
		key(t, 0, strInt, append(zz(zz(nil, 1), 0), zz(nil, 0)...)), // "", null
		key(t, 1, strInt, zz(append(zz(zz(nil, 1), 1), '1'), 0)),    // spec 1
		key(t, 0, nil, nil), // unpartitioned
		key(t, 0, schema(t, `{"type":"record","name":"e","fields":[]}`), nil), // empty spec
	}
	seen := map[string]bool{}
	for _, k := range distinct[:6] {
		if seen[k] {
			t.Errorf("key collision: %q", k)
		}
		seen[k] = true
	}
	if distinct[5] != distinct[6] {
		t.Errorf("no partition field and an empty partition record differ: %q %q", distinct[5], distinct[6])
	}
	if !strings.HasPrefix(distinct[4], "1|") {
		t.Errorf("spec id missing from %q", distinct[4])
	}

	dec := func(typ string) *avro.Node {
		return schema(t, `{"type":"record","name":"d","fields":[{"name":"v","type":`+typ+`}]}`)
	}
	asBytes := dec(`{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}`)
	asFixed := dec(`{"type":"fixed","name":"f","size":4,"logicalType":"decimal","precision":9,"scale":2}`)
	if a, b := key(t, 0, asBytes, []byte{2, 0xff}), key(t, 0, asFixed, []byte{0xff, 0xff, 0xff, 0xff}); a != b {
		t.Errorf("-0.01 as bytes %q and as fixed %q differ", a, b)
	}
	if a, b := key(t, 0, asBytes, []byte{2, 0x01}), key(t, 0, asFixed, []byte{0, 0, 0, 1}); a != b {
		t.Errorf("0.01 as bytes %q and as fixed %q differ", a, b)
	}
	if _, err := partitionKey(0, strInt, []byte{4}); err == nil {
		t.Error("a union branch out of range must fail")
	}
}

func TestIdentityFromLocation(t *testing.T) {
	t.Parallel()
	cases := map[string][2]string{
		"s3://bucket/wh/db/events/metadata/00001-abc.metadata.json": {"db", "events"},
		"file:///tmp/wh/ns/t/metadata/v1.metadata.json":             {"ns", "t"},
		"t/metadata/v1.metadata.json":                               {"", "t"},
		"/tmp/v1.metadata.json":                                     {"", ""},
	}
	for loc, want := range cases {
		ns, tbl := IdentityFromLocation(loc)
		if ns != want[0] || tbl != want[1] {
			t.Errorf("%s -> (%q, %q), want %v", loc, ns, tbl, want)
		}
	}
}

func TestIOPropsFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8333"}
	got := IOProps(map[string]string{"s3.access-key-id": "k"}, "s3://warehouse/x/metadata/v1.metadata.json",
		func(k string) string { return env[k] })
	if got["s3.endpoint"] != "http://127.0.0.1:8333" || got["s3.region"] != "us-east-1" || got["s3.access-key-id"] != "k" {
		t.Errorf("props = %v", got)
	}
	explicit := IOProps(map[string]string{"s3.endpoint": "http://e", "s3.region": "eu-west-1"}, "s3://b/k",
		func(k string) string { return env[k] })
	if explicit["s3.endpoint"] != "http://e" || explicit["s3.region"] != "eu-west-1" {
		t.Errorf("explicit props overridden: %v", explicit)
	}
	local := IOProps(nil, "/tmp/x", func(k string) string { return env[k] })
	if len(local) != 0 {
		t.Errorf("local location got S3 props: %v", local)
	}
}

func TestFormatTimestamp(t *testing.T) {
	t.Parallel()
	if got := formatMillis(1758879681766); got != "2025-09-26T09:41:21.766Z" {
		t.Errorf("got %s", got)
	}
	if got := formatMillis(1758879681000); got != "2025-09-26T09:41:21.000Z" {
		t.Errorf("got %s", got)
	}
}

// TestLocalPath pins how locations map to the local file system: file://host/p
// is the relative path host/p (PyIceberg's netloc+path), other schemes are remote.
func TestLocalPath(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"data/t/metadata/snap.avro":        "data/t/metadata/snap.avro",
		"/abs/snap.avro":                   "/abs/snap.avro",
		"file:///abs/snap.avro":            "/abs/snap.avro",
		"file:/abs/snap.avro":              "/abs/snap.avro",
		"file://data/t/metadata/snap.avro": "data/t/metadata/snap.avro",
		"FILE:///abs/x":                    "/abs/x",
		`C:\tables\x.avro`:                 `C:\tables\x.avro`,
		"dir:with/colon/x.avro":            "", // a scheme "dir": remote
		"rel/dir:colon/x.avro":             "rel/dir:colon/x.avro",
	}
	for in, want := range cases {
		got, ok := localPath(in)
		if want == "" {
			if ok {
				t.Errorf("%q: want remote, got local %q", in, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("%q: got %q %v, want %q", in, got, ok, want)
		}
	}
	for _, remote := range []string{"s3://bucket/k", "s3a://bucket/k", "gs://b/k", "abfs://c@a/k"} {
		if _, ok := localPath(remote); ok {
			t.Errorf("%q must be remote", remote)
		}
	}
}
