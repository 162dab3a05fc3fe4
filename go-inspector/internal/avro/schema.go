// Package avro reads Avro object container files (the format of Iceberg
// manifest lists and manifests) without reflection: the writer schema from the
// file header is compiled into a tree of Nodes, and callers decode only the
// fields they need, skipping the rest by the binary encoding's rules.
package avro

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Kind is an Avro type.
type Kind uint8

// The Avro types.
const (
	Null Kind = iota
	Boolean
	Int
	Long
	Float
	Double
	Bytes
	String
	Record
	Enum
	Array
	Map
	Union
	Fixed
)

var primitives = map[string]Kind{
	"null": Null, "boolean": Boolean, "int": Int, "long": Long, "float": Float,
	"double": Double, "bytes": Bytes, "string": String,
}

// Field is one field of a record.
type Field struct {
	Name string
	// ID is the Iceberg "field-id" attribute, -1 when absent.
	ID   int
	Type *Node
}

// Node is one compiled schema node. Named types referenced more than once
// share one Node, so the tree may be a graph (recursive schemas are allowed).
type Node struct {
	Kind     Kind
	Name     string  // full name of a record, enum or fixed
	Fields   []Field // Record
	Items    *Node   // Array
	Values   *Node   // Map
	Branches []*Node // Union
	Size     int     // Fixed
	Symbols  int     // Enum: number of symbols
	// Logical is the logicalType attribute ("decimal", "uuid", "date", ...), Scale its scale.
	Logical string
	Scale   int
	// varints is, for a record of int/long/enum fields only (e.g. the
	// key/value pairs of Iceberg's column-count maps), how many varints one
	// value is; Skip then steps over them without decoding. 0 otherwise.
	varints int
}

// Field returns the named field's index in a record, or -1.
func (n *Node) Field(name string) int {
	for i, f := range n.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// NonNull returns the node itself, or for a union of null and one other type
// (Iceberg's optional field) that other type; ok is false for other unions.
func (n *Node) NonNull() (node *Node, ok bool) {
	if n.Kind != Union {
		return n, true
	}
	var other *Node
	for _, b := range n.Branches {
		if b.Kind == Null {
			continue
		}
		if other != nil {
			return nil, false
		}
		other = b
	}
	return other, other != nil
}

// ParseSchema compiles an Avro schema in its JSON form.
func ParseSchema(text []byte) (*Node, error) {
	var raw any
	if err := json.Unmarshal(text, &raw); err != nil {
		return nil, fmt.Errorf("avro schema is not JSON: %w", err)
	}
	p := parser{named: map[string]*Node{}, open: map[*Node]bool{}}
	return p.parse(raw, "")
}

type parser struct {
	named map[string]*Node
	open  map[*Node]bool // records whose fields are being parsed
}

func (p *parser) parse(raw any, namespace string) (*Node, error) {
	switch v := raw.(type) {
	case string:
		return p.byName(v, namespace)
	case []any:
		u := &Node{Kind: Union}
		for _, b := range v {
			n, err := p.parse(b, namespace)
			if err != nil {
				return nil, err
			}
			u.Branches = append(u.Branches, n)
		}
		if len(u.Branches) == 0 {
			return nil, fmt.Errorf("avro schema: empty union")
		}
		return u, nil
	case map[string]any:
		return p.complex(v, namespace)
	default:
		return nil, fmt.Errorf("avro schema: unexpected node %v", raw)
	}
}

func (p *parser) byName(name, namespace string) (*Node, error) {
	if k, ok := primitives[name]; ok {
		return &Node{Kind: k}, nil
	}
	n, ok := p.named[fullName(name, namespace)]
	if !ok {
		n, ok = p.named[name]
	}
	if ok {
		if p.open[n] {
			// Manifests never nest a record in itself; refusing keeps Skip finite.
			return nil, fmt.Errorf("avro schema: recursive type %q is not supported", name)
		}
		return n, nil
	}
	return nil, fmt.Errorf("avro schema: unknown type %q", name)
}

func fullName(name, namespace string) string {
	if strings.Contains(name, ".") || namespace == "" {
		return name
	}
	return namespace + "." + name
}

func (p *parser) complex(m map[string]any, namespace string) (*Node, error) {
	typ, _ := m["type"].(string)
	logical, _ := m["logicalType"].(string)
	scale, _ := m["scale"].(float64)
	if t, ok := m["type"]; ok && typ == "" {
		// {"type": {...}} or {"type": [...]}: a wrapped schema.
		return p.parse(t, namespace)
	}
	if k, ok := primitives[typ]; ok {
		return &Node{Kind: k, Logical: logical, Scale: int(scale)}, nil
	}
	switch typ {
	case "record", "error", "enum", "fixed":
		name, _ := m["name"].(string)
		if ns, ok := m["namespace"].(string); ok && !strings.Contains(name, ".") {
			namespace = ns
		}
		full := fullName(name, namespace)
		if i := strings.LastIndex(full, "."); i >= 0 {
			namespace = full[:i]
		}
		n := &Node{Name: full, Logical: logical, Scale: int(scale)}
		if full != "" {
			p.named[full] = n
		}
		switch typ {
		case "enum":
			syms, _ := m["symbols"].([]any)
			n.Kind, n.Symbols = Enum, len(syms)
		case "fixed":
			size, ok := m["size"].(float64)
			if !ok || size < 0 {
				return nil, fmt.Errorf("avro schema: fixed %q without a valid size", full)
			}
			n.Kind, n.Size = Fixed, int(size)
		default:
			n.Kind = Record
			p.open[n] = true
			defer delete(p.open, n)
			fields, _ := m["fields"].([]any)
			for _, rf := range fields {
				fm, ok := rf.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("avro schema: record %q has a malformed field", full)
				}
				fname, _ := fm["name"].(string)
				ft, err := p.parse(fm["type"], namespace)
				if err != nil {
					return nil, fmt.Errorf("field %q: %w", fname, err)
				}
				id := -1
				if fid, ok := fm["field-id"].(float64); ok {
					id = int(fid)
				}
				n.Fields = append(n.Fields, Field{Name: fname, ID: id, Type: ft})
			}
			for _, f := range n.Fields {
				if k := f.Type.Kind; k != Int && k != Long && k != Enum {
					n.varints = 0
					break
				}
				n.varints++
			}
		}
		return n, nil
	case "array":
		items, err := p.parse(m["items"], namespace)
		if err != nil {
			return nil, err
		}
		return &Node{Kind: Array, Items: items, Logical: logical}, nil
	case "map":
		values, err := p.parse(m["values"], namespace)
		if err != nil {
			return nil, err
		}
		return &Node{Kind: Map, Values: values, Logical: logical}, nil
	}
	return nil, fmt.Errorf("avro schema: unknown type %q", typ)
}
