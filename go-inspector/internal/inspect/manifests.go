package inspect

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/icepack-dev/icepack/go-inspector/internal/avro"
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
	// dataMins is, per partition key, the oldest data sequence number of a
	// live data file there and how many files have it; deletes groups live
	// delete files by kind, sequence number and partition key (applicable.go).
	dataMins map[string]seqCount
	deletes  map[deleteGroup]seqCount
}

func newFileAgg() *fileAgg {
	return &fileAgg{partitions: map[string]int64{}, dataMins: map[string]seqCount{},
		deletes: map[deleteGroup]seqCount{}}
}

// addData accounts one live data file.
func (a *fileAgg) addData(size, records, threshold int64) {
	a.dataFiles++
	a.dataBytes += size
	a.records += records
	if size < threshold {
		a.smallFiles++
		a.smallBytes += size
	}
	a.histogram.add(size)
}

// addDelete accounts one live delete file (content 1 or 2).
func (a *fileAgg) addDelete(content, records int64, format []byte) {
	switch {
	case content == 2:
		a.eqDeletes++
	case isPuffin(format):
		a.dvs++
	default:
		a.posDeletes++
	}
	a.deleteRecords += records
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
	for k, v := range o.dataMins {
		a.addMin(k, v.a, v.b)
	}
	for k, v := range o.deletes {
		a.addGroup(k, v.a, v.b)
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
	live := a.applicable()
	st.PositionDeleteFileCount = live.position
	st.EqualityDeleteFileCount = live.equality
	st.DeletionVectorCount = live.vectors
	st.DeleteRecordCount = live.records
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

// aggregateManifests decodes every manifest with at most workers goroutines,
// each folding into its own aggregate, and returns them merged. The first
// failure stops the others.
func aggregateManifests(ctx context.Context, rd *reader, refs []manifestRef, threshold int64, workers int) (*fileAgg, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers = max(1, min(workers, len(refs)))
	aggs := make([]*fileAgg, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		agg := newFileAgg()
		aggs[w] = agg
		wg.Go(func() {
			sc := &scanner{agg: agg, threshold: threshold, byRaw: map[string]int64{},
				minRaw: map[string]seqCount{}, delRaw: map[rawGroup]seqCount{},
				plans: map[*avro.Node]*entryPlan{}}
			for {
				i := next.Add(1) - 1
				if i >= int64(len(refs)) || ctx.Err() != nil {
					return
				}
				if err := sc.read(ctx, rd, refs[i]); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	total := aggs[0]
	for _, a := range aggs[1:] {
		total.merge(a)
	}
	return total, nil
}

// scanner reads manifests into one aggregate; it is used by one goroutine.
type scanner struct {
	agg       *fileAgg
	threshold int64
	byRaw     map[string]int64      // live data files per partition encoding, per manifest
	minRaw    map[string]seqCount   // oldest data sequence number per partition encoding
	delRaw    map[rawGroup]seqCount // delete files and records per group, per manifest
	e         entry
	reuse     avro.Reuse
	plans     map[*avro.Node]*entryPlan
	buf       []byte // the last file read, its storage reused for the next
}

// read aggregates the live (ADDED or EXISTING) entries of one manifest.
func (s *scanner) read(ctx context.Context, rd *reader, ref manifestRef) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %s: %w: %v", ErrManifest, ref.path, ErrUnexpected, r)
		}
	}()
	data, err := rd.readFileInto(ctx, ref.path, s.buf)
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrManifest, ref.path, err)
	}
	s.buf = data
	if err := s.scan(data, ref); err != nil {
		return fmt.Errorf("%w %s: %w", ErrManifest, ref.path, err)
	}
	return nil
}

// scan decodes one manifest file's bytes.
func (s *scanner) scan(data []byte, ref manifestRef) error {
	f, err := avro.Open(data, &s.reuse)
	if err != nil {
		return err
	}
	plan, ok := s.plans[f.Schema]
	if !ok {
		if plan, err = compileEntryPlan(f.Schema); err != nil {
			return err
		}
		s.plans[f.Schema] = plan
	}
	specID, length := ref.specID, ref.length
	if !ref.hasSpec { // a v1 inline manifest: its header and size say what a list would
		length = int64(len(data))
		if raw, ok := f.Meta["partition-spec-id"]; ok {
			v, err := strconv.ParseInt(raw, 10, 32)
			if err != nil {
				return fmt.Errorf("header partition-spec-id %q is not an int", raw)
			}
			specID = int32(v)
		}
	}
	clear(s.byRaw)
	clear(s.minRaw)
	clear(s.delRaw)
	agg, e := s.agg, &s.e
	err = f.Blocks(func(count int64, d *avro.Decoder) error {
		for range count {
			plan.decode(d, e)
			if err := d.Err(); err != nil {
				return err
			}
			if !validFormat(e.format) {
				return fmt.Errorf("unknown file format %q", e.format)
			}
			switch e.status {
			case 2: // DELETED
				continue
			case 0, 1:
			default:
				return fmt.Errorf("unknown entry status %d", e.status)
			}
			seq := e.seq
			if !e.hasSeq {
				seq = ref.seq
			}
			switch e.content {
			case 0:
				agg.addData(e.size, e.records, s.threshold)
				s.byRaw[string(e.partition)]++
				addMinTo(s.minRaw, string(e.partition), seq, 1)
			case 1, 2:
				agg.addDelete(e.content, e.records, e.format)
				g := rawGroup{kind: deleteKind(e.content, e.format), seq: seq, raw: string(e.partition)}
				c := s.delRaw[g]
				s.delRaw[g] = seqCount{c.a + 1, c.b + e.records}
			default:
				return fmt.Errorf("unknown data file content %d", e.content)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for raw, n := range s.byRaw {
		key, err := partitionKey(specID, plan.partition, []byte(raw))
		if err != nil {
			return fmt.Errorf("partition value: %w", err)
		}
		agg.partitions[key] += n
	}
	for raw, m := range s.minRaw {
		key, err := partitionKey(specID, plan.partition, []byte(raw))
		if err != nil {
			return fmt.Errorf("partition value: %w", err)
		}
		agg.addMin(key, m.a, m.b)
	}
	for g, c := range s.delRaw {
		key, err := partitionKey(specID, plan.partition, []byte(g.raw))
		if err != nil {
			return fmt.Errorf("partition value: %w", err)
		}
		agg.addGroup(deleteGroup{kind: g.kind, seq: g.seq, partition: key}, c.a, c.b)
	}
	agg.manifests++
	agg.manifestBytes += length
	return nil
}
