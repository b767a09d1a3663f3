package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxBody is the largest request body accepted (larger: 413).
const MaxBody = 64 << 10

// kind is what a JSON field must hold.
type kind int

const (
	kString kind = iota
	kInt         // an integer literal: no fraction, no exponent
	kUint        // a non-negative integer literal
)

type fieldSpec struct {
	name     string
	kind     kind
	required bool
	str      *string
	i64      *int64
	u64      *uint64
}

// decodeStrict decodes one JSON object into the given fields. Unknown
// fields, duplicate fields, wrong types, null, fractions, exponents,
// nested values, missing required fields and trailing data are errors whose
// message names the field.
func decodeStrict(body []byte, fields ...fieldSpec) error {
	_, err := decodeSeen(body, fields)
	return err
}

// decodeSeen is decodeStrict, also returning the fields given.
func decodeSeen(body []byte, fields []fieldSpec) (map[string]bool, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("body is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("body must be a JSON object, not %s", describe(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("body is not JSON: %v", err)
		}
		key, _ := tok.(string)
		var f *fieldSpec
		for i := range fields {
			if fields[i].name == key {
				f = &fields[i]
			}
		}
		if f == nil {
			return nil, fmt.Errorf("unknown field %q; this request takes %s", key, names(fields))
		}
		if seen[key] {
			return nil, fmt.Errorf("field %q is given twice", key)
		}
		seen[key] = true
		val, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("field %q: not JSON: %v", key, err)
		}
		if err := f.set(val); err != nil {
			return nil, fmt.Errorf("field %q: %v", key, err)
		}
	}
	if err := closeObject(dec); err != nil {
		return nil, err
	}
	for _, f := range fields {
		if f.required && !seen[f.name] {
			return nil, fmt.Errorf("field %q is required", f.name)
		}
	}
	return seen, nil
}

func (f *fieldSpec) set(val json.Token) error {
	switch f.kind {
	case kString:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", describe(val))
		}
		*f.str = s
		return nil
	}
	num, ok := val.(json.Number)
	if !ok {
		return fmt.Errorf("want an integer, got %s", describe(val))
	}
	s := string(num)
	if strings.ContainsAny(s, ".eE") {
		return fmt.Errorf("want an integer, got %s (fractions and exponents are refused)", s)
	}
	if f.kind == kInt {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("integer %s is out of range", s)
		}
		*f.i64 = v
		return nil
	}
	if strings.HasPrefix(s, "-") {
		return fmt.Errorf("want a non-negative integer, got %s", s)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("integer %s is out of range", s)
	}
	*f.u64 = v
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		if v == '[' {
			return "an array"
		}
		return fmt.Sprintf("%q", string(v))
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + string(v)
	case bool:
		return fmt.Sprintf("%v", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func names(fields []fieldSpec) string {
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(f.name))
	}
	return b.String()
}

// closeObject reads a body's closing brace and requires nothing after it.
func closeObject(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil { // the closing brace
		return fmt.Errorf("body is not JSON: %v", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("data after the JSON object: %v", err)
		}
		return fmt.Errorf("data after the JSON object: %s", describe(tok))
	}
	return nil
}
