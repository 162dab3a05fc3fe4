package inspect

import (
	"math/rand/v2"
	"testing"
)

type testFile struct {
	kind      byte // 0 for data
	partition string
	seq       int64
}

// oracle is Iceberg's DeleteFileIndex rule, pair by pair.
func oracle(del testFile, files []testFile) bool {
	for _, d := range files {
		if d.kind != 0 {
			continue
		}
		if del.kind == kindEquality {
			if (isGlobal(del.partition) || d.partition == del.partition) && d.seq < del.seq {
				return true
			}
		} else if d.partition == del.partition && d.seq <= del.seq {
			return true
		}
	}
	return false
}

// TestApplicableMatchesTheRule folds random manifests of data and delete files
// (partition keys as partitionKey renders them: "0" unpartitioned, "1|s..."
// partitioned) and compares the counted delete files with the oracle.
func TestApplicableMatchesTheRule(t *testing.T) {
	t.Parallel()
	parts := []string{"0", `1|s"a"`, `1|s"b"`, `2|s"a"`}
	kinds := []byte{0, 0, kindEquality, kindPosition, kindVector}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		total := newFileAgg()
		var files []testFile
		for range rng.IntN(5) {
			agg := newFileAgg()
			for range rng.IntN(6) {
				f := testFile{kinds[rng.IntN(len(kinds))], parts[rng.IntN(len(parts))], rng.Int64N(6)}
				files = append(files, f)
				if f.kind == 0 {
					agg.addMin(f.partition, f.seq, 1)
				} else {
					agg.addGroup(deleteGroup{f.kind, f.seq, f.partition}, 1, 1)
				}
			}
			total.merge(agg)
		}
		var want applicableCounts
		for _, f := range files {
			if f.kind == 0 || !oracle(f, files) {
				continue
			}
			switch f.kind {
			case kindEquality:
				want.equality++
			case kindPosition:
				want.position++
			default:
				want.vectors++
			}
			want.records++
		}
		if got := total.applicable(); got != want {
			t.Fatalf("round %d: %+v counted, want %+v (files %+v)", round, got, want, files)
		}
	}
}
