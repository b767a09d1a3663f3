package main

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node"
	"go.yaml.in/yaml/v3"
)

// keyFlags makes every config key a flag (SPEC §6): --clock.delta_ms 500,
// --cluster.raft.snapshot_threshold 100000, --clock.agent_addrs a:1,b:2.
// Set flags are applied over the file as a YAML overlay, so they get the
// same strict decoding and key-path errors. Inline secrets (fields tagged
// flag:"-") and maps have no flag: secrets never come from flags.
type keyFlags struct {
	set []setting
}

type setting struct {
	path  string
	kind  reflect.Kind
	value string
}

func bindKeyFlags(fs *flag.FlagSet) *keyFlags {
	k := &keyFlags{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || f.Tag.Get("flag") == "-" {
				continue
			}
			path := prefix + name
			ft := f.Type
			switch {
			case ft == reflect.TypeFor[time.Duration]():
			case ft.Kind() == reflect.Struct:
				walk(ft, path+".")
				continue
			case ft.Kind() == reflect.Map:
				continue
			}
			kind := ft.Kind()
			usage := fmt.Sprintf("sets %s (%s)", path, ft)
			add := func(s string) error {
				k.set = append(k.set, setting{path: path, kind: kind, value: s})
				return nil
			}
			if kind == reflect.Bool {
				fs.BoolFunc(path, usage, add)
			} else {
				fs.Func(path, usage, add)
			}
		}
	}
	walk(reflect.TypeFor[node.Config](), "")
	return k
}

// apply decodes the set flags, in order, over cfg.
func (k *keyFlags) apply(cfg *node.Config) error {
	for _, s := range k.set {
		var val any
		switch s.kind {
		case reflect.String:
			val = s.value
		case reflect.Slice:
			var list []string
			for _, v := range strings.Split(s.value, ",") {
				if v = strings.TrimSpace(v); v != "" {
					list = append(list, v)
				}
			}
			val = list
		default: // numbers, bools, durations: let YAML resolve and type-check
			val = &yaml.Node{Kind: yaml.ScalarNode, Value: s.value}
		}
		doc := val
		parts := strings.Split(s.path, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			doc = map[string]any{parts[i]: doc}
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return config.Errorf(s.path, "%v", err)
		}
		if err := config.DecodeYAML(b, cfg); err != nil {
			return fmt.Errorf("--%s: %w", s.path, err)
		}
	}
	return nil
}
