package inspect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"time"

	iceio "github.com/apache/iceberg-go/io"
)

// Sentinel errors; every failure returned by this package wraps one of them,
// so callers match with errors.Is. All map to the contract's INSPECTION_FAILED.
var (
	// ErrInvalidOptions reports unusable caller input (empty location, bad identifier).
	ErrInvalidOptions = errors.New("invalid inspection options")
	// ErrMetadata reports a metadata JSON file that is missing or cannot be parsed.
	ErrMetadata = errors.New("cannot read table metadata")
	// ErrCatalog reports a catalog that cannot be reached or cannot load the table.
	ErrCatalog = errors.New("cannot load table from catalog")
	// ErrManifestList reports a manifest list that is missing or cannot be decoded.
	ErrManifestList = errors.New("cannot read manifest list")
	// ErrManifest reports a manifest that is missing or cannot be decoded.
	ErrManifest = errors.New("cannot read manifest")
	// ErrUnexpected reports a panic inside iceberg-go turned into an error.
	ErrUnexpected = errors.New("unexpected failure while inspecting")
)

// Options control one inspection. The zero value is usable.
type Options struct {
	// Catalog, Namespace and Table fill the identity fields only. Empty
	// Namespace/Table are derived from the metadata location when possible.
	Catalog   string
	Namespace string
	Table     string
	// SmallFileBytes overrides the small-file threshold when > 0; otherwise it
	// is write.target-file-size-bytes (default 512 MiB) divided by 8.
	SmallFileBytes int64
	// Workers bounds how many manifests are decoded at once; 0 means GOMAXPROCS*4.
	Workers int
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0) * 4
}

// InspectLocation reads the table whose metadata JSON file is at location (a
// local path, file:// or s3:// URI; plain or gzip-compressed) and computes its
// TableStatus. props are iceberg-go IO properties such as s3.endpoint or s3.region.
func InspectLocation(ctx context.Context, location string, props map[string]string, opts Options) (status *TableStatus, err error) {
	start := time.Now()
	defer recoverInto(&err)

	if location == "" {
		return nil, fmt.Errorf("%w: metadata location is empty", ErrInvalidOptions)
	}
	rd := newReader(iceio.LoadFSFunc(props, location))
	raw, err := rd.readFile(ctx, location)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrMetadata, location, err)
	}
	meta, err := parseMetadata(raw)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrMetadata, location, err)
	}
	if opts.Namespace == "" || opts.Table == "" {
		ns, name := IdentityFromLocation(location)
		if opts.Namespace == "" {
			opts.Namespace = ns
		}
		if opts.Table == "" {
			opts.Table = name
		}
	}
	return inspectMetadata(ctx, meta, location, rd, opts, start)
}

// IdentityFromLocation derives namespace and table name from a metadata
// location shaped like .../<namespace>/<table>/metadata/<file>. It returns
// empty strings for the parts it cannot find.
func IdentityFromLocation(location string) (namespace, tableName string) {
	if i := strings.Index(location, "://"); i >= 0 {
		location = location[i+3:]
	}
	parts := strings.Split(strings.TrimRight(location, "/"), "/")
	// parts[n-1] is the file, parts[n-2] should be "metadata".
	n := len(parts)
	if n < 3 || parts[n-2] != "metadata" {
		return "", ""
	}
	tableName = parts[n-3]
	if n >= 4 {
		namespace = parts[n-4]
	}
	return namespace, tableName
}

// inspectMetadata computes the status of parsed metadata; start is when the
// inspection began, so inspect_ms includes loading the metadata.
func inspectMetadata(ctx context.Context, meta *tableMeta, location string, rd *reader, opts Options, start time.Time) (*TableStatus, error) {
	st := &TableStatus{
		Catalog:          opts.Catalog,
		Namespace:        opts.Namespace,
		Table:            opts.Table,
		FormatVersion:    meta.FormatVersion,
		MetadataLocation: location,
		InspectedAt:      FormatTimestamp(start),
		Inspector:        InspectorName,
	}
	st.SmallFileThresholdBytes = smallFileThreshold(meta.Properties, opts)
	meta.fillHistory(st)

	if snap := meta.current(); snap != nil {
		id, _ := snapshotID(snap.SnapshotID)
		at := formatMillis(snap.TimestampMs)
		st.CurrentSnapshotID, st.CurrentSnapshotAt = &id, &at

		refs, err := snapshotManifests(ctx, rd, snap, meta.FormatVersion)
		if err != nil {
			return nil, err
		}
		agg, err := aggregateManifests(ctx, rd, refs, st.SmallFileThresholdBytes, opts.workers())
		if err != nil {
			return nil, err
		}
		agg.fill(st)
		st.ManifestCount = int64(len(refs))
		st.ManifestsRead = int64(len(refs))
	}
	st.InspectMs = time.Since(start).Milliseconds()
	opts.logger().Debug("inspected table", "metadata", st.MetadataLocation,
		"manifests", st.ManifestCount, "data_files", st.DataFileCount, "ms", st.InspectMs)
	return st, nil
}

// snapshotManifests lists a snapshot's manifests: from its manifest list, or
// for a v1 snapshot without one, from its inline "manifests" paths.
func snapshotManifests(ctx context.Context, rd *reader, snap *snapshotMeta, formatVersion int) ([]manifestRef, error) {
	if snap.ManifestList == "" && formatVersion >= 2 {
		return nil, fmt.Errorf("%w: snapshot %s of a v%d table has no manifest-list",
			ErrManifestList, snap.SnapshotID, formatVersion)
	}
	if snap.ManifestList == "" {
		refs := make([]manifestRef, len(snap.Manifests))
		for i, p := range snap.Manifests {
			refs[i] = manifestRef{path: p}
		}
		return refs, nil
	}
	data, err := rd.readFile(ctx, snap.ManifestList)
	if err == nil {
		var refs []manifestRef
		if refs, err = readManifestList(data); err == nil {
			return refs, nil
		}
	}
	return nil, fmt.Errorf("%w %s: %w", ErrManifestList, snap.ManifestList, err)
}

// smallFileThreshold applies the caller override, else the table property / 8.
func smallFileThreshold(props map[string]string, opts Options) int64 {
	if opts.SmallFileBytes > 0 {
		return opts.SmallFileBytes
	}
	target := DefaultTargetFileSizeBytes
	if raw, ok := props[TargetFileSizeProperty]; ok {
		v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || v <= 0 {
			opts.logger().Warn("ignoring unusable table property", "property", TargetFileSizeProperty, "value", raw)
		} else {
			target = v
		}
	}
	return target / 8
}

// recoverInto turns a panic in a dependency into an ErrUnexpected error.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", ErrUnexpected, r)
	}
}
