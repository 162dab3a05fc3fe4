package inspect

import "strings"

// Which live delete files can still apply, by the rule Iceberg's readers use
// (DeleteFileIndex), the same as the Python inspector's delete_applicability:
// an equality delete of data sequence number S matches data files of data
// sequence number < S in its partition (every data file when its spec is
// unpartitioned); a position delete or deletion vector matches data files of
// data sequence number <= S in its partition. A delete file that matches none
// (it outlived the rows it deleted, e.g. after a compaction of an
// unpartitioned table) is not counted. Past maxGroups delete groups every
// live delete file is counted (the fallback, as in Python).

const maxGroups = 100_000

const (
	kindEquality byte = 'e'
	kindPosition byte = 'p'
	kindVector   byte = 'd'
)

// seqCount is a pair: (sequence number, files) for a minimum, (files,
// records) for a delete group.
type seqCount struct{ a, b int64 }

// deleteGroup keys delete files by kind, data sequence number and partition key.
type deleteGroup struct {
	kind      byte
	seq       int64
	partition string
}

// rawGroup is a deleteGroup before its partition encoding is rendered.
type rawGroup struct {
	kind byte
	seq  int64
	raw  string
}

func deleteKind(content int64, format []byte) byte {
	switch {
	case content == 2:
		return kindEquality
	case isPuffin(format):
		return kindVector
	default:
		return kindPosition
	}
}

// addMinTo folds n files of data sequence number seq into m's entry for key.
func addMinTo(m map[string]seqCount, key string, seq, n int64) {
	found, ok := m[key]
	switch {
	case !ok || seq < found.a:
		m[key] = seqCount{seq, n}
	case seq == found.a:
		m[key] = seqCount{seq, found.b + n}
	}
}

func (a *fileAgg) addMin(key string, seq, n int64) { addMinTo(a.dataMins, key, seq, n) }

func (a *fileAgg) addGroup(g deleteGroup, files, records int64) {
	c := a.deletes[g]
	a.deletes[g] = seqCount{c.a + files, c.b + records}
}

// isGlobal reports a partition key of an unpartitioned spec (no values).
func isGlobal(key string) bool { return !strings.Contains(key, "|") }

type applicableCounts struct{ equality, position, vectors, records int64 }

// applies is the rule for one delete file against a scope's oldest data file.
func applies(kind byte, deleteSeq, dataMin int64, hasData bool) bool {
	if !hasData {
		return false
	}
	if kind == kindEquality {
		return dataMin < deleteSeq
	}
	return dataMin <= deleteSeq
}

func (a *fileAgg) applicable() applicableCounts {
	if len(a.deletes) > maxGroups {
		return applicableCounts{a.eqDeletes, a.posDeletes, a.dvs, a.deleteRecords}
	}
	var lowest int64
	hasData := false
	for _, m := range a.dataMins {
		if !hasData || m.a < lowest {
			lowest, hasData = m.a, true
		}
	}
	var out applicableCounts
	for g, c := range a.deletes {
		scope, ok := lowest, hasData
		if g.kind != kindEquality || !isGlobal(g.partition) {
			m, found := a.dataMins[g.partition]
			scope, ok = m.a, found
		}
		if !applies(g.kind, g.seq, scope, ok) {
			continue
		}
		switch g.kind {
		case kindEquality:
			out.equality += c.a
		case kindPosition:
			out.position += c.a
		default:
			out.vectors += c.a
		}
		out.records += c.b
	}
	return out
}
