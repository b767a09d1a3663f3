package validate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// exactKeys checks that every key of the decoded JSON value v is a field
// of t spelled exactly as its json tag: encoding/json (and so
// yaml.UnmarshalStrict) matches names case-insensitively, the API server
// does not ("clusterIp" is not "clusterIP").
func exactKeys(t reflect.Type, v any, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil // IntOrString, Quantity, Time: their own syntax
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // a type error is UnmarshalStrict's to report
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s: unknown field %q (names are case-sensitive)", strings.TrimPrefix(path+"."+k, "."), k)
			}
			if err := exactKeys(ft, obj[k], path+"."+k); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if arr, ok := v.([]any); ok {
			for i, e := range arr {
				if err := exactKeys(t.Elem(), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if obj, ok := v.(map[string]any); ok {
			for k, e := range obj {
				if err := exactKeys(t.Elem(), e, path+"."+k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// collectFields maps json names to field types, flattening inline and
// embedded structs as encoding/json does.
func collectFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if (f.Anonymous && name == "") || strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, into)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = f.Type
	}
}
