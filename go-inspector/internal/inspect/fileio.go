package inspect

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	iceio "github.com/apache/iceberg-go/io"
)

// reader reads whole files named by the locations found in table metadata.
// Local locations (no scheme, or file:) are read with the os package; the
// others go through iceberg-go's IO (S3, GCS, Azure), created on first use.
type reader struct {
	remote func() (iceio.IO, error)
}

// newReader reads remote locations through an IO created by load.
func newReader(load func(ctx context.Context) (iceio.IO, error)) *reader {
	return &reader{remote: sync.OnceValues(func() (iceio.IO, error) {
		return load(context.Background())
	})}
}

// localPath returns the file system path of a local location and true, or
// false for a location with another scheme. file://host/p reads host/p, as
// PyIceberg does, so "file://warehouse/t/metadata/x.avro" is relative to the
// working directory; file:///abs and file:/abs are absolute.
func localPath(location string) (string, bool) {
	i := strings.Index(location, ":")
	if i < 0 || strings.ContainsAny(location[:i], "/\\") {
		return location, true // no scheme
	}
	if i == 1 {
		return location, true // a Windows drive letter
	}
	if !strings.EqualFold(location[:i], "file") {
		return "", false
	}
	rest := location[i+1:]
	if strings.HasPrefix(rest, "//") {
		return rest[2:], true
	}
	return rest, true
}

// readFile returns the whole content of the file at location.
func (r *reader) readFile(ctx context.Context, location string) ([]byte, error) {
	if p, ok := localPath(location); ok {
		return os.ReadFile(p)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fs, err := r.remote()
	if err != nil {
		return nil, err
	}
	if rf, ok := fs.(iceio.ReadFileIO); ok {
		return rf.ReadFile(location)
	}
	f, err := fs.Open(location)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", location, err)
	}
	return data, nil
}
