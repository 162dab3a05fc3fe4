package inspect

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/icepack-dev/icepack/go-inspector/internal/avro"
)

// manifestRef is one manifest of a snapshot: what the manifest list says of it.
type manifestRef struct {
	path   string
	length int64
	// specID is the list's partition_spec_id; hasSpec is false for v1 inline
	// manifests, whose spec id comes from the manifest's own header.
	specID  int32
	hasSpec bool
	// seq is the manifest's sequence number (0 in a v1 list): the data
	// sequence number its entries without one inherit.
	seq int64
}

// readManifestList decodes manifest_path, manifest_length,
// partition_spec_id (0 when a v1 list omits it) and sequence_number (0 when
// omitted) from a manifest list file, skipping every other field.
func readManifestList(data []byte) ([]manifestRef, error) {
	f, err := avro.Open(data, nil)
	if err != nil {
		return nil, err
	}
	rec := f.Schema
	if rec.Kind != avro.Record {
		return nil, fmt.Errorf("manifest list schema is not a record")
	}
	pathIdx, lengthIdx, specIdx := rec.Field("manifest_path"), rec.Field("manifest_length"), rec.Field("partition_spec_id")
	seqIdx := rec.Field("sequence_number")
	if pathIdx < 0 || lengthIdx < 0 {
		return nil, fmt.Errorf("manifest list schema lacks manifest_path or manifest_length")
	}
	if err := expect(rec, pathIdx, avro.String, avro.Bytes); err != nil {
		return nil, err
	}
	if err := expect(rec, lengthIdx, avro.Long, avro.Int); err != nil {
		return nil, err
	}
	for _, idx := range []int{specIdx, seqIdx} {
		if idx >= 0 {
			if err := expect(rec, idx, avro.Int, avro.Long); err != nil {
				return nil, err
			}
		}
	}
	var refs []manifestRef
	err = f.Blocks(func(count int64, d *avro.Decoder) error {
		for range count {
			var m manifestRef
			m.hasSpec = true
			for i, fd := range rec.Fields {
				switch i {
				case pathIdx:
					b, _ := readBytes(d, fd.Type)
					m.path = string(b)
				case lengthIdx:
					m.length, _ = readNumber(d, fd.Type)
				case specIdx:
					v, _ := readNumber(d, fd.Type)
					m.specID = int32(v)
				case seqIdx:
					m.seq, _ = readNumber(d, fd.Type)
				default:
					d.Skip(fd.Type)
				}
			}
			if d.Err() != nil {
				return d.Err()
			}
			refs = append(refs, m)
		}
		return nil
	})
	return refs, err
}

// expect checks that field i of rec is (optionally null or) one of kinds.
func expect(rec *avro.Node, i int, kinds ...avro.Kind) error {
	f := rec.Fields[i]
	n, ok := f.Type.NonNull()
	if ok {
		for _, k := range kinds {
			if n.Kind == k {
				return nil
			}
		}
	}
	return fmt.Errorf("field %s of %s has an unexpected Avro type", f.Name, rec.Name)
}

// readNumber reads an int or long, possibly inside a union; null reads as 0, false.
func readNumber(d *avro.Decoder, n *avro.Node) (int64, bool) {
	if n.Kind == avro.Union {
		if n = d.Branch(n); n == nil {
			return 0, false
		}
	}
	switch n.Kind {
	case avro.Int, avro.Long:
		return d.Long(), true
	default:
		d.Skip(n)
		return 0, false
	}
}

// readBytes reads a string or bytes, possibly inside a union (aliasing the block).
func readBytes(d *avro.Decoder, n *avro.Node) ([]byte, bool) {
	if n.Kind == avro.Union {
		if n = d.Branch(n); n == nil {
			return nil, false
		}
	}
	switch n.Kind {
	case avro.String, avro.Bytes:
		return d.Bytes(), true
	default:
		d.Skip(n)
		return nil, false
	}
}

// What the entry scan does with each field of manifest_entry and data_file.
const (
	actSkip uint8 = iota
	actStatus
	actSeq
	actDataFile
	actContent
	actFormat
	actPartition
	actRecords
	actSize
)

// entryPlan is a manifest's writer schema compiled for the projection the
// contract needs: status, the data sequence number, and of data_file content, file_format, partition
// (kept as raw bytes), record_count and file_size_in_bytes.
type entryPlan struct {
	entry     *avro.Node
	entryActs []uint8
	dataFile  *avro.Node // the data_file record (the field may be a union around it)
	fileActs  []uint8
	partition *avro.Node // nil when the schema has no partition field
}

func compileEntryPlan(schema *avro.Node) (*entryPlan, error) {
	if schema.Kind != avro.Record {
		return nil, fmt.Errorf("manifest entry schema is not a record")
	}
	p := &entryPlan{entry: schema, entryActs: make([]uint8, len(schema.Fields))}
	for i, f := range schema.Fields {
		switch f.Name {
		case "status":
			p.entryActs[i] = actStatus
			if err := expect(schema, i, avro.Int, avro.Long); err != nil {
				return nil, err
			}
		case "sequence_number":
			p.entryActs[i] = actSeq
			if err := expect(schema, i, avro.Long, avro.Int); err != nil {
				return nil, err
			}
		case "data_file":
			df, ok := f.Type.NonNull()
			if !ok || df.Kind != avro.Record {
				return nil, fmt.Errorf("data_file is not a record")
			}
			p.entryActs[i], p.dataFile = actDataFile, df
		}
	}
	if p.dataFile == nil || !hasAct(p.entryActs, actStatus) {
		return nil, fmt.Errorf("manifest entry schema lacks status or data_file")
	}
	df := p.dataFile
	p.fileActs = make([]uint8, len(df.Fields))
	for i, f := range df.Fields {
		var err error
		switch f.Name {
		case "content":
			p.fileActs[i], err = actContent, expect(df, i, avro.Int, avro.Long)
		case "file_format":
			p.fileActs[i], err = actFormat, expect(df, i, avro.String, avro.Bytes)
		case "record_count":
			p.fileActs[i], err = actRecords, expect(df, i, avro.Long, avro.Int)
		case "file_size_in_bytes":
			p.fileActs[i], err = actSize, expect(df, i, avro.Long, avro.Int)
		case "partition":
			part, ok := f.Type.NonNull()
			if !ok || part.Kind != avro.Record {
				return nil, fmt.Errorf("data_file.partition is not a record")
			}
			p.fileActs[i], p.partition = actPartition, f.Type
		}
		if err != nil {
			return nil, err
		}
	}
	for _, want := range []uint8{actFormat, actRecords, actSize} {
		if !hasAct(p.fileActs, want) {
			return nil, fmt.Errorf("data_file lacks file_format, record_count or file_size_in_bytes")
		}
	}
	return p, nil
}

func hasAct(acts []uint8, a uint8) bool {
	for _, x := range acts {
		if x == a {
			return true
		}
	}
	return false
}

// entry is the projection of one manifest entry; format and partition alias
// the decoded block.
type entry struct {
	status, content int64
	// seq is the data sequence number; hasSeq is false when the entry has none
	// (it then inherits its manifest's).
	seq           int64
	hasSeq        bool
	format        []byte
	partition     []byte
	records, size int64
}

// decode reads one manifest_entry object into e.
func (p *entryPlan) decode(d *avro.Decoder, e *entry) {
	*e = entry{}
	for i, f := range p.entry.Fields {
		switch p.entryActs[i] {
		case actStatus:
			e.status, _ = readNumber(d, f.Type)
		case actSeq:
			e.seq, e.hasSeq = readNumber(d, f.Type)
		case actDataFile:
			t := f.Type
			if t.Kind == avro.Union {
				if t = d.Branch(t); t == nil || t.Kind != avro.Record {
					return // a null data_file: the decoder error or check below reports it
				}
			}
			p.decodeDataFile(d, e)
		default:
			d.Skip(f.Type)
		}
	}
}

func (p *entryPlan) decodeDataFile(d *avro.Decoder, e *entry) {
	for i, f := range p.dataFile.Fields {
		switch p.fileActs[i] {
		case actContent:
			e.content, _ = readNumber(d, f.Type)
		case actFormat:
			e.format, _ = readBytes(d, f.Type)
		case actRecords:
			e.records, _ = readNumber(d, f.Type)
		case actSize:
			e.size, _ = readNumber(d, f.Type)
		case actPartition:
			start := d.Pos()
			d.Skip(f.Type)
			e.partition = d.Slice(start, d.Pos())
		default:
			d.Skip(f.Type)
		}
	}
}

// validFormat reports whether name is a file format Iceberg defines
// (PyIceberg's FileFormat enum rejects any other, failing the inspection).
func validFormat(name []byte) bool {
	switch strings.ToUpper(string(name)) {
	case "AVRO", "PARQUET", "ORC", "PUFFIN":
		return true
	}
	return false
}

// isPuffin reports a deletion vector's file format.
func isPuffin(name []byte) bool { return strings.EqualFold(string(name), "PUFFIN") }

// partitionKey renders a partition tuple's Avro encoding (raw, of type node,
// possibly a union around the record) canonically: the spec id, then each
// field's value in order, tagged by kind so that values of different types
// never collide. Values equal for PyIceberg render equally: int and long
// alike (type promotion), float and double as the same float64, bytes and
// fixed alike, decimals by unscaled value and scale.
func partitionKey(specID int32, node *avro.Node, raw []byte) (string, error) {
	var b strings.Builder
	b.WriteString(strconv.Itoa(int(specID)))
	if node == nil {
		return b.String(), nil
	}
	d := avro.NewDecoder(raw)
	if node.Kind == avro.Union {
		if node = d.Branch(node); node == nil {
			return "", d.Err()
		}
	}
	if node.Kind == avro.Record {
		for _, f := range node.Fields {
			b.WriteByte('|')
			renderValue(&b, d, f.Type)
		}
	}
	if err := d.Err(); err != nil {
		return "", err
	}
	return b.String(), nil
}

func renderValue(b *strings.Builder, d *avro.Decoder, n *avro.Node) {
	if n.Kind == avro.Union {
		if n = d.Branch(n); n == nil {
			return
		}
	}
	switch n.Kind {
	case avro.Null:
		b.WriteString("n")
	case avro.Boolean:
		b.WriteString("z" + strconv.FormatBool(d.Bool()))
	case avro.Int, avro.Long:
		b.WriteString("i" + strconv.FormatInt(d.Long(), 10))
	case avro.Float:
		b.WriteString("f" + strconv.FormatFloat(float64(d.Float()), 'g', -1, 64))
	case avro.Double:
		b.WriteString("f" + strconv.FormatFloat(d.Double(), 'g', -1, 64))
	case avro.String:
		b.WriteString("s" + strconv.Quote(string(d.Bytes())))
	case avro.Bytes, avro.Fixed:
		var raw []byte
		if n.Kind == avro.Fixed {
			raw = d.Fixed(n.Size)
		} else {
			raw = d.Bytes()
		}
		if n.Logical == "decimal" {
			b.WriteString("d" + decimalString(raw) + "e" + strconv.Itoa(n.Scale))
		} else {
			b.WriteString("b" + fmt.Sprintf("%x", raw))
		}
	default:
		// Iceberg partition values are primitives; anything else is keyed by its encoding.
		start := d.Pos()
		d.Skip(n)
		b.WriteString("r" + fmt.Sprintf("%x", d.Slice(start, d.Pos())))
	}
}

// decimalString renders a big-endian two's-complement unscaled decimal value.
func decimalString(raw []byte) string {
	v := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	return v.String()
}
