package avro

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt reports binary data that does not follow the Avro encoding.
var ErrCorrupt = errors.New("corrupt avro data")

// Decoder reads Avro binary values from a byte slice. Errors are sticky: after
// the first one every read returns zero values and Err reports it, so callers
// check once per record rather than after every value.
type Decoder struct {
	buf []byte
	pos int
	err error
}

// NewDecoder decodes buf from its start.
func NewDecoder(buf []byte) *Decoder { return &Decoder{buf: buf} }

// Reset points the decoder at buf and clears any error.
func (d *Decoder) Reset(buf []byte) { d.buf, d.pos, d.err = buf, 0, nil }

// Err returns the first error met, if any.
func (d *Decoder) Err() error { return d.err }

// Pos returns the offset of the next byte to read.
func (d *Decoder) Pos() int { return d.pos }

// Remaining returns how many bytes are left.
func (d *Decoder) Remaining() int { return len(d.buf) - d.pos }

// Slice returns buf[from:to] (for capturing the encoding of a skipped value).
func (d *Decoder) Slice(from, to int) []byte { return d.buf[from:to] }

func (d *Decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w at byte %d: %s", ErrCorrupt, d.pos, fmt.Sprintf(format, args...))
	}
	d.pos = len(d.buf)
}

// Long reads a zig-zag varint long.
func (d *Decoder) Long() int64 {
	var u uint64
	var shift uint
	for i := 0; i < 10; i++ {
		if d.pos >= len(d.buf) {
			d.fail("truncated varint")
			return 0
		}
		b := d.buf[d.pos]
		d.pos++
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return int64(u>>1) ^ -int64(u&1)
		}
		shift += 7
	}
	d.fail("varint longer than 10 bytes")
	return 0
}

// skipVarints steps over n varints without decoding them.
func (d *Decoder) skipVarints(n int) {
	buf, pos := d.buf, d.pos
	for ; n > 0; n-- {
		start := pos
		for pos < len(buf) && buf[pos] >= 0x80 {
			pos++
		}
		if pos >= len(buf) || pos-start >= 10 {
			d.pos = pos
			d.fail("truncated or overlong varint")
			return
		}
		pos++
	}
	d.pos = pos
}

// Int reads a zig-zag varint int (accepted in the long range, then checked).
func (d *Decoder) Int() int32 {
	v := d.Long()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int %d out of range", v)
		return 0
	}
	return int32(v)
}

// Bool reads a boolean.
func (d *Decoder) Bool() bool {
	b := d.fixed(1)
	return len(b) == 1 && b[0] != 0
}

// Float reads a 4-byte little-endian IEEE float.
func (d *Decoder) Float() float32 {
	b := d.fixed(4)
	if len(b) < 4 {
		return 0
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b))
}

// Double reads an 8-byte little-endian IEEE double.
func (d *Decoder) Double() float64 {
	b := d.fixed(8)
	if len(b) < 8 {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// Bytes reads length-prefixed bytes; the result aliases the decoder's buffer.
func (d *Decoder) Bytes() []byte {
	n := d.Long()
	if n < 0 {
		d.fail("negative length %d", n)
		return nil
	}
	return d.fixed(n)
}

// fixed reads n raw bytes, aliasing the buffer.
func (d *Decoder) fixed(n int64) []byte {
	if n > int64(len(d.buf)-d.pos) {
		d.fail("%d bytes wanted, %d left", n, len(d.buf)-d.pos)
		return nil
	}
	b := d.buf[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b
}

// Fixed reads a fixed of n bytes, aliasing the buffer.
func (d *Decoder) Fixed(n int) []byte { return d.fixed(int64(n)) }

// Branch reads a union's branch index and returns the branch node.
func (d *Decoder) Branch(u *Node) *Node {
	i := d.Long()
	if i < 0 || i >= int64(len(u.Branches)) {
		d.fail("union branch %d out of range", i)
		return nil
	}
	return u.Branches[i]
}

// Skip reads past one value of type n.
func (d *Decoder) Skip(n *Node) {
	switch n.Kind {
	case Null:
	case Boolean:
		d.fixed(1)
	case Int, Long, Enum:
		d.Long()
	case Float:
		d.fixed(4)
	case Double:
		d.fixed(8)
	case Bytes, String:
		d.Bytes()
	case Fixed:
		d.fixed(int64(n.Size))
	case Record:
		if n.varints > 0 {
			d.skipVarints(n.varints)
			return
		}
		for i := range n.Fields {
			if d.err != nil {
				return
			}
			d.Skip(n.Fields[i].Type)
		}
	case Union:
		if b := d.Branch(n); b != nil {
			d.Skip(b)
		}
	case Array:
		d.skipBlocks(n.Items, nil)
	case Map:
		d.skipBlocks(&stringNode, n.Values)
	}
}

var stringNode = Node{Kind: String}

// skipBlocks skips an array (value == nil) or map in Avro's blocked encoding;
// a negative count is followed by the block's byte size, which is skipped whole.
func (d *Decoder) skipBlocks(first, second *Node) {
	for d.err == nil {
		count := d.Long()
		if count == 0 {
			return
		}
		if count < 0 {
			size := d.Long()
			if size < 0 {
				d.fail("negative block size %d", size)
				return
			}
			d.fixed(size)
			continue
		}
		if zeroSize(first) && (second == nil || zeroSize(second)) {
			continue // nothing to read, however large the count
		}
		if count > int64(d.Remaining()) {
			d.fail("block of %d items in %d bytes", count, d.Remaining())
			return
		}
		for i := int64(0); i < count && d.err == nil; i++ {
			d.Skip(first)
			if second != nil {
				d.Skip(second)
			}
		}
	}
}

// zeroSize reports whether every value of n is encoded in zero bytes.
func zeroSize(n *Node) bool {
	switch n.Kind {
	case Null:
		return true
	case Fixed:
		return n.Size == 0
	case Record:
		for _, f := range n.Fields {
			if !zeroSize(f.Type) {
				return false
			}
		}
		return true
	}
	return false
}
