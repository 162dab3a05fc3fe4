package avro

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

func zz(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func str(b []byte, s string) []byte { return append(zz(b, int64(len(s))), s...) }

const testSchema = `{"type":"record","name":"r","fields":[
  {"name":"id","type":"long"},
  {"name":"tags","type":{"type":"map","values":"string"}},
  {"name":"name","type":["null","string"]}]}`

var marker = []byte("0123456789abcdef")

// container writes one block of objects (already encoded) with codec.
func container(t testing.TB, codec string, count int64, objects []byte) []byte {
	t.Helper()
	var block []byte
	switch codec {
	case "null":
		block = objects
	case "deflate":
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, flate.BestSpeed)
		w.Write(objects)
		w.Close()
		block = buf.Bytes()
	case "snappy":
		block = snappy.Encode(nil, objects)
		block = binary.BigEndian.AppendUint32(block, crc32.ChecksumIEEE(objects))
	case "zstandard":
		enc, _ := zstd.NewWriter(nil)
		block = enc.EncodeAll(objects, nil)
	default:
		block = objects
	}
	out := append([]byte{}, magic...)
	out = zz(out, 2)
	out = str(str(out, "avro.schema"), testSchema)
	out = str(str(out, "avro.codec"), codec)
	out = zz(out, 0)
	out = append(out, marker...)
	out = zz(zz(out, count), int64(len(block)))
	out = append(out, block...)
	return append(out, marker...)
}

// objects encodes n records {id: i, tags: {"k": "v"}, name: null or "x"}.
func objects(n int) []byte {
	var b []byte
	for i := range n {
		b = zz(b, int64(i))
		b = zz(b, 1)
		b = str(str(b, "k"), "v")
		b = zz(b, 0)
		if i%2 == 0 {
			b = zz(b, 0)
		} else {
			b = str(zz(b, 1), "x")
		}
	}
	return b
}

func readIDs(f *File) ([]int64, error) {
	var ids []int64
	name := f.Schema.Fields[2].Type
	err := f.Blocks(func(count int64, d *Decoder) error {
		for range count {
			ids = append(ids, d.Long())
			d.Skip(f.Schema.Fields[1].Type)
			d.Skip(name)
		}
		return nil
	})
	return ids, err
}

func TestCodecs(t *testing.T) {
	for _, codec := range []string{"null", "deflate", "snappy", "zstandard"} {
		t.Run(codec, func(t *testing.T) {
			f, err := Open(container(t, codec, 5, objects(5)), &Reuse{})
			if err != nil {
				t.Fatal(err)
			}
			ids, err := readIDs(f)
			if err != nil || len(ids) != 5 || ids[4] != 4 {
				t.Fatalf("ids %v err %v", ids, err)
			}
		})
	}
}

func TestCorruptFilesFailCleanly(t *testing.T) {
	good := container(t, "deflate", 3, objects(3))
	cases := map[string][]byte{
		"not avro":       []byte("PAR1 not an avro file"),
		"unknown codec":  container(t, "lzma", 3, objects(3)),
		"count too high": container(t, "null", 4, objects(3)),
		"count too low":  container(t, "null", 2, objects(3)),
		"bad sync":       append(append([]byte{}, good[:len(good)-1]...), 'X'),
		"truncated":      good[:len(good)-20],
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := Open(data, nil)
			if err == nil {
				_, err = readIDs(f)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("want ErrCorrupt, got %v", err)
			}
		})
	}
}

// TestEveryTruncationOfARealManifestFails cuts a manifest Apache Iceberg Java
// wrote at every length: each prefix must give an error (or, cut at a block
// boundary, fewer objects), never a panic or hang.
func TestEveryTruncationOfARealManifestFails(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "..", "..", "tests", "data", "tables-external",
		"data", "persistent", "equality_deletes", "warehouse", "mydb", "mytable", "metadata")
	manifests, _ := filepath.Glob(filepath.Join(dir, "*-m0.avro"))
	if len(manifests) == 0 {
		t.Fatalf("no manifests under %s", dir)
	}
	data, err := os.ReadFile(manifests[0])
	if err != nil {
		t.Fatal(err)
	}
	skipAll := func(f *File) (int64, error) {
		var objects int64
		err := f.Blocks(func(count int64, d *Decoder) error {
			for range count {
				d.Skip(f.Schema)
			}
			objects += count
			return nil
		})
		return objects, err
	}
	f, err := Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	total, err := skipAll(f)
	if err != nil || total == 0 {
		t.Fatalf("the whole file must read: %d objects, %v", total, err)
	}
	for n := range len(data) {
		f, err := Open(data[:n], nil)
		var objects int64
		if err == nil {
			objects, err = skipAll(f)
		}
		// A cut exactly after a block is a valid, shorter container (Avro has no end marker).
		if err == nil && objects >= total {
			t.Fatalf("a prefix of %d of %d bytes read all %d objects", n, len(data), total)
		}
	}
}

// withMaxBlockBytes sets the cap for one test.
func withMaxBlockBytes(t *testing.T, n int64) {
	t.Helper()
	old := MaxBlockBytes()
	SetMaxBlockBytes(n)
	t.Cleanup(func() { SetMaxBlockBytes(old) })
}

// A block expanding 64x beyond the cap (a decompression bomb) is refused as
// corrupt for every codec, and reading it allocates about the cap, not the
// block's expanded size.
func TestBlocksBeyondTheCapAreRefused(t *testing.T) {
	const limit = 1 << 20
	withMaxBlockBytes(t, limit)
	zeros := make([]byte, 64*limit)
	for _, codec := range []string{"deflate", "snappy", "zstandard"} {
		t.Run(codec, func(t *testing.T) {
			bomb := container(t, codec, 1, zeros)
			if codec == "snappy" {
				// Snappy expands at most ~21x; its bomb is a block declaring
				// 4 GiB, which the old reader allocated before decoding.
				bomb = container(t, "null", 1, snappyBomb(4<<30-1))
				bomb = bytes.Replace(bomb, []byte("\x08null"), []byte("\x0csnappy"), 1)
			}
			if len(bomb) >= limit {
				t.Fatalf("the %s bomb is %d bytes, not a bomb", codec, len(bomb))
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f, err := Open(bomb, &Reuse{})
			if err != nil {
				t.Fatal(err)
			}
			err = f.Blocks(func(int64, *Decoder) error { return nil })
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrBlockTooLarge) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrBlockTooLarge wrapping ErrCorrupt", err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*limit {
				t.Fatalf("refusing the %s bomb allocated %d bytes (cap %d)", codec, grew, limit)
			}
		})
	}
}

// Up to the cap, every codec reads exactly as before; one byte more is refused.
func TestBlocksUpToTheCapAreRead(t *testing.T) {
	objs := objects(50)
	for _, codec := range []string{"null", "deflate", "snappy", "zstandard"} {
		t.Run(codec, func(t *testing.T) {
			withMaxBlockBytes(t, int64(len(objs)))
			f, err := Open(container(t, codec, 50, objs), &Reuse{})
			if err != nil {
				t.Fatal(err)
			}
			if ids, err := readIDs(f); err != nil || len(ids) != 50 {
				t.Fatalf("ids %v err %v", ids, err)
			}
			if codec == "null" {
				return // an uncompressed block is bounded by the file itself
			}
			SetMaxBlockBytes(int64(len(objs) - 1))
			f, _ = Open(container(t, codec, 50, objs), &Reuse{})
			if _, err := readIDs(f); !errors.Is(err, ErrBlockTooLarge) {
				t.Fatalf("a block one byte over the cap: err = %v", err)
			}
		})
	}
}

// snappyBomb is an Avro snappy block (CRC-32 appended) declaring declared
// bytes and holding one literal byte followed by a copy repeating it: the
// stream is valid up to its end, where it falls short of its declared length.
func snappyBomb(declared uint64) []byte {
	var b []byte
	for declared >= 0x80 {
		b = append(b, byte(declared)|0x80)
		declared >>= 7
	}
	b = append(b, byte(declared))
	b = append(b, 0x00, 0) // literal of one byte: 0
	for range 1000 {
		b = append(b, 0xfe, 0x01, 0x00) // copy 64 bytes at offset 1 (tag 2: 2-byte offset)
	}
	return append(b, 0, 0, 0, 0)
}
