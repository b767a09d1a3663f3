package config

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
)

// Key is one config key that has a flag: --Path VALUE.
type Key struct {
	Path    string // "clock.delta_ms"
	Section string // the first path element for a nested key ("clock"), "" for a top-level one
	Type    string // what the value looks like: "N", "-N", "DURATION", "TEXT", "A,B,...", "" (bool)
	Help    string // the field's help tag, or the Help map's entry
	Default string // the value in the defaults, "" when empty or zero
}

// KeyFlags makes every leaf key of a config struct a flag (SPEC §6):
// --clock.delta_ms 500, --cluster.raft.snapshot_interval 30s,
// --clock.agent_addrs a:1,b:2, --clock.dev_reference. Flags that were set
// are applied over the decoded file in command-line order by Apply, with
// the same rules as the file (numbers in plain decimal). Fields tagged
// flag:"-" (inline secrets) and maps get no flag: secrets never come from
// flags.
type KeyFlags struct {
	keys []Key
	set  []setting
}

type setting struct{ path, value string }

// BindOptions tunes BindKeys.
type BindOptions struct {
	// Skip leaves out keys that the command sets with a flag of its own.
	Skip func(path string) bool
	// Help gives help texts for keys whose struct has no help tags.
	Help map[string]string
}

// BindKeys defines one flag on fs per leaf key of defaults (a struct),
// named by the yaml tags' path.
func BindKeys(fs *flag.FlagSet, defaults any, o BindOptions) *KeyFlags {
	k := &KeyFlags{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" || f.Tag.Get("flag") == "-" {
				continue
			}
			path, fv := prefix+name, v.Field(i)
			switch {
			case f.Type == durationType:
			case f.Type.Kind() == reflect.Struct:
				walk(fv, path+".")
				continue
			case f.Type.Kind() == reflect.Map, f.Type.Kind() == reflect.Pointer:
				continue
			}
			if o.Skip != nil && o.Skip(path) {
				continue
			}
			key := Key{Path: path, Type: typeWord(f.Type), Help: f.Tag.Get("help"), Default: show(fv)}
			if key.Help == "" {
				key.Help = o.Help[path]
			}
			if sec, _, ok := strings.Cut(path, "."); ok {
				key.Section = sec
			}
			k.keys = append(k.keys, key)
			add := func(s string) error {
				k.set = append(k.set, setting{path: path, value: s})
				return nil
			}
			usage := key.Help
			if usage == "" {
				usage = "sets " + path
			}
			if f.Type.Kind() == reflect.Bool {
				fs.BoolFunc(path, usage, add)
			} else {
				fs.Func(path, usage, add)
			}
		}
	}
	walk(reflect.ValueOf(defaults), "")
	return k
}

// Keys lists the bound keys in struct order (for --help).
func (k *KeyFlags) Keys() []Key { return k.keys }

// Set reports whether the flag of path was given.
func (k *KeyFlags) Set(path string) bool {
	for _, s := range k.set {
		if s.path == path {
			return true
		}
	}
	return false
}

// FlagError is a flag whose value has the wrong form. Its text names the
// flag and the expected form, nothing of the parser.
type FlagError struct {
	Flag  string // without dashes: "clock.delta_ms"
	Value string
	Msg   string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Msg)
}

// Apply sets the given flags, in command-line order, on cfg (a pointer to
// the struct given to BindKeys). The error is a *FlagError.
func (k *KeyFlags) Apply(cfg any) error {
	root := reflect.ValueOf(cfg)
	if root.Kind() != reflect.Pointer || root.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Apply needs a pointer to a struct, got %T", cfg)
	}
	for _, s := range k.set {
		v, ok := field(root.Elem(), s.path)
		if !ok {
			return &FlagError{Flag: s.path, Value: s.value, Msg: "no such key"}
		}
		if err := setText(v, s.value); err != nil {
			return &FlagError{Flag: s.path, Value: s.value, Msg: err.Error()}
		}
	}
	return nil
}

// field finds the struct field of a dotted yaml path.
func field(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		t := v.Type()
		found := false
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag == name && t.Field(i).IsExported() {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// splitList reads a comma-separated flag value; blanks around items and
// empty items are dropped.
func splitList(s string) []string {
	var list []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			list = append(list, item)
		}
	}
	return list
}

func typeWord(t reflect.Type) string {
	if t == durationType {
		return "DURATION"
	}
	switch t.Kind() {
	case reflect.Bool:
		return ""
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "N"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "N"
	case reflect.Slice:
		return "A,B,..."
	}
	return "TEXT"
}

// show renders a default for --help; zero values show as "".
func show(v reflect.Value) string {
	if v.IsZero() {
		return ""
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// DescribeFlagError rewrites an error of flag.FlagSet.Parse so that it
// names the flag as written (--name) and the expected form only, without
// the parser's wording ("parse error", strconv's messages).
func DescribeFlagError(err error) string {
	msg := err.Error()
	for _, p := range []struct{ prefix, sep, want string }{
		{"invalid boolean value ", " for -", "want true or false"},
		{"invalid value ", " for flag -", ""},
	} {
		rest, ok := strings.CutPrefix(msg, p.prefix)
		if !ok {
			continue
		}
		val, rest, ok := strings.Cut(rest, p.sep)
		if !ok {
			break
		}
		name, why, _ := strings.Cut(rest, ": ")
		if p.want != "" {
			why = p.want
		}
		return "--" + name + " " + val + ": " + why
	}
	for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return strings.TrimSuffix(p, "-") + "--" + strings.TrimPrefix(rest, "-")
		}
	}
	return msg
}
