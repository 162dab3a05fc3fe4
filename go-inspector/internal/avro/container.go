package avro

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

var magic = []byte{'O', 'b', 'j', 1}

// File is an Avro object container file held in memory.
type File struct {
	// Schema is the writer schema from the header.
	Schema *Node
	// Meta holds the header's metadata (avro.schema, avro.codec, and for Iceberg
	// e.g. partition-spec-id, format-version, content).
	Meta   map[string]string
	codec  string
	marker []byte
	rest   []byte // the data blocks
	state  *Reuse
}

// Reuse is what one goroutine keeps between the files it reads: compiled
// writer schemas by their text, so files written with one schema (all
// manifests of a table, usually) compile it once, and the decompressor and
// its output buffer. The zero value is ready; it is not safe for concurrent use.
type Reuse struct {
	byText   map[string]*Node
	inflater io.ReadCloser
	scratch  []byte
}

func (c *Reuse) parse(text string) (*Node, error) {
	if n, ok := c.byText[text]; ok {
		return n, nil
	}
	n, err := ParseSchema([]byte(text))
	if err != nil {
		return nil, err
	}
	if c.byText == nil {
		c.byText = map[string]*Node{}
	}
	c.byText[text] = n
	return n, nil
}

// Open parses the header of the container file in data (which it aliases),
// keeping state in reuse (nil: nothing is kept). The File must not be used
// after reuse serves another File.
func Open(data []byte, reuse *Reuse) (*File, error) {
	if reuse == nil {
		reuse = &Reuse{}
	}
	if !bytes.HasPrefix(data, magic) {
		return nil, fmt.Errorf("%w: not an Avro object container file", ErrCorrupt)
	}
	d := NewDecoder(data[len(magic):])
	meta := map[string]string{}
	for d.Err() == nil {
		count := d.Long()
		if count == 0 {
			break
		}
		if count < 0 {
			count = -count
			d.Long() // block size, not needed
		}
		for i := int64(0); i < count && d.Err() == nil; i++ {
			k := string(d.Bytes())
			meta[k] = string(d.Bytes())
		}
	}
	marker := d.Fixed(16)
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("avro header: %w", err)
	}
	codec := meta["avro.codec"]
	switch codec {
	case "", "null":
		codec = "null"
	case "deflate", "snappy", "zstandard":
	default:
		return nil, fmt.Errorf("%w: unsupported avro codec %q", ErrCorrupt, codec)
	}
	text, ok := meta["avro.schema"]
	if !ok {
		return nil, fmt.Errorf("%w: avro header has no schema", ErrCorrupt)
	}
	schema, err := reuse.parse(text)
	if err != nil {
		return nil, err
	}
	return &File{Schema: schema, Meta: meta, codec: codec, marker: marker, state: reuse,
		rest: data[len(magic)+d.Pos():]}, nil
}

// Blocks calls fn for each data block with the number of objects it holds
// and a decoder over its (decompressed) bytes. fn must read exactly count
// objects; a block with bytes left over is reported as corrupt. The decoder's
// buffer is reused after fn returns.
func (f *File) Blocks(fn func(count int64, d *Decoder) error) error {
	d := NewDecoder(f.rest)
	var block Decoder
	for d.Remaining() > 0 {
		count := d.Long()
		size := d.Long()
		if d.Err() == nil && (count < 0 || size < 0) {
			return fmt.Errorf("%w: block with %d objects in %d bytes", ErrCorrupt, count, size)
		}
		raw := d.fixed(size)
		sync := d.Fixed(16)
		if err := d.Err(); err != nil {
			return err
		}
		if !bytes.Equal(sync, f.marker) {
			return fmt.Errorf("%w: sync marker mismatch after a block", ErrCorrupt)
		}
		data, err := f.decompress(raw)
		if errors.Is(err, ErrBlockTooLarge) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%w: %s block: %w", ErrCorrupt, f.codec, err)
		}
		if count > int64(len(data)) && !zeroSize(f.Schema) {
			// Every object of such a schema takes at least one byte.
			return fmt.Errorf("%w: block claims %d objects in %d bytes", ErrCorrupt, count, len(data))
		}
		block.Reset(data)
		if err := fn(count, &block); err != nil {
			return err
		}
		if err := block.Err(); err != nil {
			return err
		}
		if block.Remaining() != 0 {
			return fmt.Errorf("%w: %d bytes left after a block's %d objects", ErrCorrupt, block.Remaining(), count)
		}
	}
	return nil
}

// DefaultMaxBlockBytes is the most bytes one compressed block may expand to
// unless SetMaxBlockBytes says otherwise (Icepack's ICEPACK_AVRO_MAX_BLOCK_BYTES).
const DefaultMaxBlockBytes = 64 << 20

// ErrBlockTooLarge reports a compressed block that expands (or, for snappy,
// declares it expands) beyond the cap; it wraps ErrCorrupt: the file is
// treated as damaged, and nothing beyond the cap is ever allocated.
var ErrBlockTooLarge = errors.New("block too large")

var maxBlockBytes atomic.Int64

func init() { maxBlockBytes.Store(DefaultMaxBlockBytes) }

// SetMaxBlockBytes sets the cap on a decompressed block for every file read
// afterwards (process-wide: one inspection per process). n must be positive.
func SetMaxBlockBytes(n int64) {
	if n <= 0 {
		panic(fmt.Sprintf("avro: max block bytes %d is not positive", n))
	}
	maxBlockBytes.Store(n)
}

// MaxBlockBytes is the cap in force.
func MaxBlockBytes() int64 { return maxBlockBytes.Load() }

func tooLarge(codec string, limit int64, how string) error {
	return fmt.Errorf("%w (%w): a %s block %s, more than the %d bytes any block may expand to (ICEPACK_AVRO_MAX_BLOCK_BYTES)",
		ErrCorrupt, ErrBlockTooLarge, codec, how, limit)
}

// zstdDecoders holds one shared decoder per cap (DecodeAll is safe for
// concurrent use, and refuses output beyond the decoder's max memory; the
// output is checked against the cap once more after decoding).
var zstdDecoders sync.Map // int64 -> *zstd.Decoder

func zstdDecoder(limit int64) (*zstd.Decoder, error) {
	if d, ok := zstdDecoders.Load(limit); ok {
		return d.(*zstd.Decoder), nil
	}
	// The decoder's max memory also caps a frame's window, which a small frame
	// may declare above a small cap: allow 8 MiB (zstd's default-level window)
	// and check the output against the cap after.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(uint64(max(limit, 8<<20))))
	if err != nil {
		return nil, err
	}
	actual, _ := zstdDecoders.LoadOrStore(limit, d)
	return actual.(*zstd.Decoder), nil
}

// readCapped appends r's bytes to buf until EOF or until buf holds limit bytes.
// Its capacity doubles but never past max (bytes.Buffer would reach twice the
// cap), so reading a block that is too large allocates about the cap.
func readCapped(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(int64(max(2*cap(buf), 64<<10)), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// decompress expands one block, never beyond MaxBlockBytes (ErrBlockTooLarge):
// deflate reads at most the cap plus one byte, snappy's declared length is
// checked before anything is allocated, zstd's decoder refuses larger output.
func (f *File) decompress(raw []byte) ([]byte, error) {
	st := f.state
	limit := MaxBlockBytes()
	switch f.codec {
	case "deflate":
		if st.inflater == nil {
			st.inflater = flate.NewReader(bytes.NewReader(raw))
		} else if err := st.inflater.(flate.Resetter).Reset(bytes.NewReader(raw), nil); err != nil {
			return nil, err
		}
		out, err := readCapped(st.inflater, st.scratch[:0], limit+1)
		if err != nil {
			return nil, err
		}
		if int64(len(out)) > limit {
			st.scratch = nil // do not keep a buffer of the cap's size for the next file
			return nil, tooLarge("deflate", limit, "expands")
		}
		st.scratch = out
		return out, nil
	case "snappy":
		// Avro's snappy blocks end with the CRC-32 of the uncompressed bytes.
		if len(raw) < 4 {
			return nil, fmt.Errorf("snappy block of %d bytes", len(raw))
		}
		n, err := snappy.DecodedLen(raw[:len(raw)-4])
		if err != nil {
			return nil, err
		}
		if int64(n) > limit {
			return nil, tooLarge("snappy", limit, fmt.Sprintf("declares %d bytes", n))
		}
		out, err := snappy.Decode(st.scratch[:cap(st.scratch)], raw[:len(raw)-4])
		if err != nil {
			return nil, err
		}
		st.scratch = out
		if crc32.ChecksumIEEE(out) != binary.BigEndian.Uint32(raw[len(raw)-4:]) {
			return nil, fmt.Errorf("snappy block checksum mismatch")
		}
		return out, nil
	case "zstandard":
		dec, err := zstdDecoder(limit)
		if err != nil {
			return nil, err
		}
		out, err := dec.DecodeAll(raw, st.scratch[:0])
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || int64(len(out)) > limit {
			st.scratch = nil
			return nil, tooLarge("zstandard", limit, "expands")
		}
		if err != nil {
			return nil, err
		}
		st.scratch = out
		return out, nil
	}
	return raw, nil
}
