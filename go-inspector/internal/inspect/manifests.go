package inspect

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"golang.org/x/sync/errgroup"
)

// fileAgg holds the per-file aggregates of one or more manifests.
type fileAgg struct {
	dataFiles, dataBytes, records int64
	smallFiles, smallBytes        int64
	histogram                     Histogram
	posDeletes, eqDeletes, dvs    int64
	deleteRecords                 int64
	manifests, manifestBytes      int64
	// partitions counts live data files per canonical (spec id, tuple) key.
	partitions map[string]int64
}

func newFileAgg() *fileAgg { return &fileAgg{partitions: map[string]int64{}} }

// addEntry accounts one live manifest entry.
func (a *fileAgg) addEntry(df iceberg.DataFile, threshold int64) {
	switch df.ContentType() {
	case iceberg.EntryContentData:
		size := df.FileSizeBytes()
		a.dataFiles++
		a.dataBytes += size
		a.records += df.Count()
		if size < threshold {
			a.smallFiles++
			a.smallBytes += size
		}
		a.histogram.add(size)
		a.partitions[PartitionKey(df.SpecID(), df.Partition())]++
	case iceberg.EntryContentPosDeletes:
		if strings.EqualFold(string(df.FileFormat()), string(iceberg.PuffinFile)) {
			a.dvs++
		} else {
			a.posDeletes++
		}
		a.deleteRecords += df.Count()
	case iceberg.EntryContentEqDeletes:
		a.eqDeletes++
		a.deleteRecords += df.Count()
	}
}

// merge folds o into a.
func (a *fileAgg) merge(o *fileAgg) {
	a.dataFiles += o.dataFiles
	a.dataBytes += o.dataBytes
	a.records += o.records
	a.smallFiles += o.smallFiles
	a.smallBytes += o.smallBytes
	a.histogram.merge(o.histogram)
	a.posDeletes += o.posDeletes
	a.eqDeletes += o.eqDeletes
	a.dvs += o.dvs
	a.deleteRecords += o.deleteRecords
	a.manifests += o.manifests
	a.manifestBytes += o.manifestBytes
	for k, v := range o.partitions {
		a.partitions[k] += v
	}
}

// fill copies the aggregates into the contract fields.
func (a *fileAgg) fill(st *TableStatus) {
	st.DataFileCount = a.dataFiles
	st.DataFileBytes = a.dataBytes
	st.RecordCount = a.records
	st.SmallFileCount = a.smallFiles
	st.SmallFileBytes = a.smallBytes
	st.FileSizeHistogram = a.histogram
	st.PositionDeleteFileCount = a.posDeletes
	st.EqualityDeleteFileCount = a.eqDeletes
	st.DeletionVectorCount = a.dvs
	st.DeleteRecordCount = a.deleteRecords
	st.ManifestCount = a.manifests
	st.ManifestBytes = a.manifestBytes
	st.PartitionCount = int64(len(a.partitions))
	for _, n := range a.partitions {
		st.MaxFilesInPartition = max(st.MaxFilesInPartition, n)
	}
	if a.dataFiles > 0 {
		st.AvgDataFileBytes = a.dataBytes / a.dataFiles
	}
}

// aggregateManifests decodes every manifest with at most workers goroutines
// and returns the merged aggregates. The first failure cancels the rest.
func aggregateManifests(ctx context.Context, fs iceio.IO, manifests []iceberg.ManifestFile, threshold int64, workers int) (*fileAgg, error) {
	total := newFileAgg()
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, m := range manifests {
		g.Go(func() error {
			agg, err := readManifest(gctx, fs, m, threshold)
			if err != nil {
				return err
			}
			// Fold as each manifest finishes so per-manifest partition maps
			// are not all held at once on tables with thousands of manifests.
			mu.Lock()
			total.merge(agg)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return total, nil
}

// readManifest aggregates the live (ADDED or EXISTING) entries of one manifest.
func readManifest(ctx context.Context, fs iceio.IO, m iceberg.ManifestFile, threshold int64) (agg *fileAgg, err error) {
	path := m.FilePath()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %s: %w: %v", ErrManifest, path, ErrUnexpected, r)
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	agg = newFileAgg()
	agg.manifests, agg.manifestBytes = 1, m.Length()
	for entry, err := range m.Entries(fs, true) {
		if err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrManifest, path, err)
		}
		if entry.Status() == iceberg.EntryStatusDELETED {
			continue
		}
		agg.addEntry(entry.DataFile(), threshold)
	}
	return agg, ctx.Err()
}
