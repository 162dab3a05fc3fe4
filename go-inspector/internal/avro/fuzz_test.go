package avro

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// FuzzContainer feeds arbitrary bytes (seeded with real manifests and manifest
// lists Apache Iceberg Java wrote, and the test containers of each codec) to
// the container reader and skips every object by the writer schema: any input
// must end in an error or a clean read, never a panic or a hang. `go test`
// runs the seeds; `go test -fuzz FuzzContainer ./internal/avro` explores.
func FuzzContainer(f *testing.F) {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "..", "..", "tests", "data", "tables-external",
		"data", "persistent", "equality_deletes", "warehouse", "mydb", "mytable_partitioned", "metadata")
	files, _ := filepath.Glob(filepath.Join(dir, "*.avro"))
	if len(files) == 0 {
		f.Fatalf("no Avro files under %s", dir)
	}
	for _, p := range files[:min(len(files), 6)] {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, codec := range []string{"null", "deflate", "snappy", "zstandard"} {
		f.Add(container(f, codec, 3, objects(3)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Open(data, &Reuse{})
		if err != nil || zeroSize(file.Schema) {
			return // a zero-size schema may claim any count; the inspector never reads one
		}
		_ = file.Blocks(func(count int64, d *Decoder) error {
			for i := int64(0); i < count && d.Err() == nil; i++ {
				d.Skip(file.Schema)
			}
			return nil
		})
	})
}
