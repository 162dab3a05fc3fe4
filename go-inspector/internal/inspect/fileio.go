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
	return r.readFileInto(ctx, location, nil)
}

// readFileInto is readFile reusing buf's storage for a local file when it is
// large enough (a worker reads many manifests of similar size).
func (r *reader) readFileInto(ctx context.Context, location string, buf []byte) ([]byte, error) {
	if p, ok := localPath(location); ok {
		return readLocal(p, buf)
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

func readLocal(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := info.Size()
	if int64(cap(buf)) < size+1 {
		buf = make([]byte, 0, size+512)
	}
	buf = buf[:0]
	// Read to EOF rather than trusting the size: the file may change underneath.
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
}
