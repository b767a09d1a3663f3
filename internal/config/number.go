package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
)

// The number rule of every integer in a config file or a flag is the wire's
// (SPEC §1.2 `number`): "0" or a non-zero digit followed by digits. No sign,
// no leading zero, no base prefix (0x, 0o, 0b), no underscore, no exponent,
// so an operator always gets the value written (YAML 1.1 would read 0500 as
// octal 320). Fields of a signed Go type may also take one leading '-'
// before a non-zero number ("-0" is refused); their Validate rules still
// apply. Only cluster.raft.priority is meaningfully signed today.

// formHint is the expected form, said once wherever a number is refused.
const formHint = "want plain decimal digits (like 500): no sign, leading zero, base prefix (0x, 0o, 0b), underscore or exponent"

// numberError is why a text is not a number of the field's type. notInt
// marks a text that is not an integer at all (a word, a fraction), as
// opposed to an integer written in another form or out of range.
type numberError struct {
	notInt bool
	msg    string
}

func (e *numberError) Error() string { return e.msg }

// canonicalDigits reports whether s is "0" or a non-zero digit followed by
// digits.
func canonicalDigits(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// looksNumeric reports whether s is some integer-ish spelling (signs,
// prefixes, underscores, digits), so the message can say "another form"
// rather than "not an integer".
func looksNumeric(s string) bool {
	if s == "" {
		return false
	}
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '+' || c == '-' || c == '_' || c == 'x' || c == 'X' || c == 'o' || c == 'O' || c == 'b' || c == 'B' ||
			c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return digits > 0
}

// ParseUint parses s under the number rule into an unsigned integer of
// bits bits (8, 16, 32 or 64). The error says the expected form and range.
func ParseUint(s string, bits int) (uint64, error) {
	if !canonicalDigits(s) {
		if looksNumeric(s) {
			return 0, &numberError{msg: formHint}
		}
		return 0, &numberError{notInt: true, msg: "want an integer in plain decimal (like 500)"}
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, &numberError{msg: fmt.Sprintf("outside 0..=%d", uint64(math.MaxUint64)>>(64-bits))}
	}
	return v, nil
}

// ParseInt is ParseUint for a signed field: one leading '-' is allowed
// before a non-zero number.
func ParseInt(s string, bits int) (int64, error) {
	lo, hi := int64(math.MinInt64)>>(64-bits), int64(math.MaxInt64)>>(64-bits)
	body := s
	if len(s) > 1 && s[0] == '-' {
		body = s[1:]
		if body == "0" {
			return 0, &numberError{msg: formHint + ` ("-0" is 0)`}
		}
	}
	u, err := ParseUint(body, 64)
	if err != nil {
		if ne := (*numberError)(nil); errors.As(err, &ne) && !ne.notInt {
			ne.msg = fmt.Sprintf("%s, or a '-' before them; within %d..=%d", ne.msg, lo, hi)
		}
		return 0, err
	}
	if body != s { // negative
		if u > uint64(-(lo+1))+1 {
			return 0, &numberError{msg: fmt.Sprintf("outside %d..=%d", lo, hi)}
		}
		return int64(-u), nil // u ≤ 2^63: -u wraps to the right value
	}
	if u > uint64(hi) {
		return 0, &numberError{msg: fmt.Sprintf("outside %d..=%d", lo, hi)}
	}
	return int64(u), nil
}

var durationType = reflect.TypeFor[time.Duration]()

// setText sets v (a string, bool, integer, duration or []string field)
// from s the way a flag gives it: integers under the number rule,
// booleans true or false, durations in Go's syntax (500ms, 2s, 1m30s),
// lists comma-separated.
func setText(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return &numberError{msg: "want a Go duration like 500ms, 2s or 1m30s"}
		}
		v.SetInt(int64(d))
		return nil
	case v.CanAddr() && v.Addr().Type().Implements(textUnmarshaler):
		return v.Addr().Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		switch s {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			return &numberError{notInt: true, msg: "want true or false"}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := ParseUint(s, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(u)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := ParseInt(s, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(i)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("unsupported list type %s", v.Type())
		}
		v.Set(reflect.ValueOf(splitList(s)).Convert(v.Type()))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}
