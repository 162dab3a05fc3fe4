package inspect

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
)

// StatisticsFreshness says which snapshot a table's statistics (or partition
// statistics) describe and how far the table has moved since; the same rules
// as icepack_core.inspection.statistics (see docs/table-status.md).
type StatisticsFreshness struct {
	Files           int64        `json:"files"`
	SnapshotID      *json.Number `json:"snapshot_id"`
	FileBytes       int64        `json:"file_bytes"`
	SnapshotsBehind *int64       `json:"snapshots_behind"`
	AddedRecords    *int64       `json:"added_records"`
	AddedDataFiles  *int64       `json:"added_data_files"`
}

// statsRef is one usable statistics entry: its snapshot (canonical decimal)
// and file size.
type statsRef struct {
	snapshot string
	bytes    int64
}

var summaryDigits = regexp.MustCompile(`^[0-9]{1,18}$`)

// decodeLoose decodes raw with numbers kept as json.Number; nil when it is not JSON.
func decodeLoose(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return v
}

// integerID returns the canonical decimal of an integer JSON number, or "".
func integerID(v any) string {
	n, ok := v.(json.Number)
	if !ok {
		return ""
	}
	id, err := snapshotID(n)
	if err != nil {
		return ""
	}
	return string(id)
}

// statsRefs reads a statistics or partition-statistics list leniently: an
// entry without an integer snapshot-id is skipped, a bad size counts 0.
func statsRefs(raw json.RawMessage) []statsRef {
	list, ok := decodeLoose(raw).([]any)
	if !ok {
		return nil
	}
	var refs []statsRef
	for _, item := range list {
		entry, ok := item.(map[string]any)
		if !ok {
			continue
		}
		sid := integerID(entry["snapshot-id"])
		if sid == "" {
			continue
		}
		var size int64
		if n, ok := entry["file-size-in-bytes"].(json.Number); ok {
			if v, err := n.Int64(); err == nil && v >= 0 {
				size = v
			}
		}
		refs = append(refs, statsRef{sid, size})
	}
	return refs
}

// summaryCount is a summary count written as ASCII digits (at most 18); else 0.
func summaryCount(v any) int64 {
	s, ok := v.(string)
	if !ok || !summaryDigits.MatchString(s) {
		return 0
	}
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}

func saturatingAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// freshness walks the current lineage to the nearest snapshot with an entry.
func (m *tableMeta) freshness(raw json.RawMessage) StatisticsFreshness {
	refs := statsRefs(raw)
	out := StatisticsFreshness{Files: int64(len(refs))}
	bySnapshot := map[string]statsRef{}
	for _, r := range refs {
		if _, seen := bySnapshot[r.snapshot]; !seen {
			bySnapshot[r.snapshot] = r
		}
	}
	links := map[string]*snapshotMeta{}
	for i := range m.Snapshots {
		id, _ := snapshotID(m.Snapshots[i].SnapshotID)
		if _, seen := links[string(id)]; !seen {
			links[string(id)] = &m.Snapshots[i]
		}
	}
	cur := m.current()
	if cur == nil {
		return out
	}
	node, _ := snapshotID(cur.SnapshotID)
	var behind, records, files int64
	seen := map[string]bool{}
	for {
		snap, listed := links[string(node)]
		if !listed || seen[string(node)] {
			return out
		}
		if r, ok := bySnapshot[string(node)]; ok {
			id := node
			out.SnapshotID, out.FileBytes = &id, r.bytes
			out.SnapshotsBehind, out.AddedRecords, out.AddedDataFiles = &behind, &records, &files
			return out
		}
		seen[string(node)] = true
		behind++
		summary, _ := decodeLoose(snap.Summary).(map[string]any)
		if op, _ := summary["operation"].(string); op != "replace" {
			records = saturatingAdd(records, summaryCount(summary["added-records"]))
			files = saturatingAdd(files, summaryCount(summary["added-data-files"]))
		}
		parent := integerID(decodeLoose(snap.ParentSnapshotID))
		if parent == "" {
			return out
		}
		node = json.Number(parent)
	}
}

// fillStatistics sets the table and partition statistics freshness.
func (m *tableMeta) fillStatistics(st *TableStatus) {
	st.TableStatistics = m.freshness(m.Statistics)
	st.PartitionStatistics = m.freshness(m.PartitionStatistics)
}
