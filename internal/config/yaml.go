package config

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a configuration error naming the key path.
type Error struct {
	Path string // dotted key path, e.g. "cluster.raft.max_voters"; "" for the document
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "config: " + e.Msg
	}
	return "config: " + e.Path + ": " + e.Msg
}

// Errorf builds an *Error for a key path (for Validate methods too).
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// DecodeYAML decodes data into v (a pointer to a struct with yaml tags),
// leaving fields the document does not mention at their current values (so
// callers fill v with defaults first). Unknown keys, duplicate keys and
// values of the wrong type are errors that name the key path.
func DecodeYAML(data []byte, v any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return &Error{Msg: "not valid YAML: " + err.Error()}
	}
	if doc.Kind == 0 { // empty document: nothing to set
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return &Error{Msg: "DecodeYAML needs a pointer to a struct"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	return decode(root, rv.Elem(), "")
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func decode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		return &Error{Path: path, Msg: "YAML aliases are not accepted in configuration"}
	}
	pt := reflect.PointerTo(v.Type())
	if pt.Implements(yamlUnmarshaler) || pt.Implements(textUnmarshaler) {
		return leaf(n, v, path)
	}
	switch v.Kind() {
	case reflect.Struct:
		return decodeStruct(n, v, path)
	case reflect.Map:
		return decodeMap(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.Tag == "!!null" {
				v.Set(reflect.Zero(v.Type()))
				return nil
			}
			return &Error{Path: path, Msg: "want a list, got " + describe(n)}
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Pointer:
		if n.Tag == "!!null" {
			v.Set(reflect.Zero(v.Type()))
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return decode(n, v.Elem(), path)
	}
	return leaf(n, v, path)
}

func decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return nil
		}
		return &Error{Path: path, Msg: "want a mapping of keys, got " + describe(n)}
	}
	fields := map[string]int{}
	var names []string
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = i
		names = append(names, name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		p := join(path, key)
		if k.Kind != yaml.ScalarNode {
			return &Error{Path: path, Msg: "keys must be plain strings"}
		}
		if seen[key] {
			return &Error{Path: p, Msg: fmt.Sprintf("given twice (line %d)", k.Line)}
		}
		seen[key] = true
		idx, ok := fields[key]
		if !ok {
			return &Error{Path: p, Msg: fmt.Sprintf("unknown key (line %d); known keys here: %s", k.Line, strings.Join(names, ", "))}
		}
		if err := decode(val, v.Field(idx), p); err != nil {
			return err
		}
	}
	return nil
}

func decodeMap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return nil
		}
		return &Error{Path: path, Msg: "want a mapping, got " + describe(n)}
	}
	if v.Type().Key().Kind() != reflect.String {
		return &Error{Path: path, Msg: "unsupported map key type"}
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return &Error{Path: path, Msg: "keys must be plain strings"}
		}
		p := join(path, k.Value)
		if m.MapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key())).IsValid() {
			return &Error{Path: p, Msg: fmt.Sprintf("given twice (line %d)", k.Line)}
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := decode(val, elem, p); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
	return nil
}

func leaf(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.ScalarNode {
		return &Error{Path: path, Msg: "want a single value, got " + describe(n)}
	}
	// Integers follow the wire's number rule and durations Go's syntax,
	// parsed here rather than by yaml.v3 (which reads 0500 as octal, 0x1f4
	// as hex and 1_000 as 1000); the YAML type must match the Go kind.
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Type() == durationType {
			if n.Tag != "!!str" && n.Tag != "!!int" {
				return &Error{Path: path, Msg: "want a Go duration like 500ms, 2s or 1m30s, got " + describe(n)}
			}
		} else if n.Tag != "!!int" && n.Tag != "!!float" || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			return &Error{Path: path, Msg: "want an integer in plain decimal (like 500), got " + describe(n)}
		}
		return setScalar(n, v, path)
	case reflect.Bool:
		if n.Tag != "!!bool" {
			return &Error{Path: path, Msg: "want true or false, got " + describe(n)}
		}
	case reflect.String:
		if n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" {
			return &Error{Path: path, Msg: "want a string, got " + describe(n)}
		}
	}
	tmp := reflect.New(v.Type())
	if err := n.Decode(tmp.Interface()); err != nil {
		msg := err.Error()
		if te := (*yaml.TypeError)(nil); errors.As(err, &te) && len(te.Errors) > 0 {
			msg = te.Errors[0]
		}
		return &Error{Path: path, Msg: fmt.Sprintf("bad value %s: %s", describe(n), stripLine(msg))}
	}
	v.Set(tmp.Elem())
	return nil
}

// setScalar sets a number or duration from the node's text with setText.
func setScalar(n *yaml.Node, v reflect.Value, path string) error {
	tmp := reflect.New(v.Type()).Elem()
	if err := setText(tmp, n.Value); err != nil {
		if ne := (*numberError)(nil); errors.As(err, &ne) && ne.notInt {
			return &Error{Path: path, Msg: ne.msg + ", got " + describe(n)}
		}
		return &Error{Path: path, Msg: fmt.Sprintf("bad value %s: %v", describe(n), err)}
	}
	v.Set(tmp)
	return nil
}

func stripLine(msg string) string {
	if strings.HasPrefix(msg, "line ") {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			return rest
		}
	}
	return msg
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return fmt.Sprintf("a mapping (line %d)", n.Line)
	case yaml.SequenceNode:
		return fmt.Sprintf("a list (line %d)", n.Line)
	}
	return fmt.Sprintf("%q (line %d)", n.Value, n.Line)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
