package config

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The key schema is derived from Config's koanf tags by reflection so that
// the environment mapping, override checks and the unknown-key walk can
// never drift from the struct others compile against.

// leafKeys maps every settable key ("server.port") to its Go type. Lists of
// structs (prefill, decode) are not leaves: they come from the file or from
// Source.Prefill/Decode, never from one env var or override. A list of
// strings (bootstrap.allowed_sources) is one leaf, written comma-separated
// in text (see parseAs).
var leafKeys = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			key := prefix + f.Tag.Get("koanf")
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, key+".")
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() != reflect.String:
				// lists of structs are not single keys
			default:
				m[key] = f.Type
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return m
}()

// envKeys maps the underscore form of each leaf key ("limits_max_body_bytes")
// back to the key. Comparing whole names is the only reliable mapping
// because key names themselves contain underscores.
var envKeys = func() map[string]string {
	m := make(map[string]string, len(leafKeys))
	for k := range leafKeys {
		m[strings.ReplaceAll(k, ".", "_")] = k
	}
	return m
}()

// fieldByTag finds the struct field whose koanf tag is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("koanf") == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// tagsOf lists the koanf tags of a struct type, for "valid keys" hints.
func tagsOf(t reflect.Type) []string {
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		out = append(out, t.Field(i).Tag.Get("koanf"))
	}
	return out
}

// findUnknown walks a raw config tree against type t and returns the first
// key (in sorted order, so the answer is stable) that t does not have.
// Values of the wrong shape are left for the decoder to report.
func findUnknown(raw map[string]any, t reflect.Type, path string) *Error {
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		key := joinKey(path, name)
		f, ok := fieldByTag(t, name)
		if !ok {
			return errorf(key, "unknown key (valid here: "+strings.Join(tagsOf(t), ", ")+")")
		}
		switch v := raw[name].(type) {
		case map[string]any:
			if f.Type.Kind() == reflect.Struct {
				if err := findUnknown(v, f.Type, key); err != nil {
					return err
				}
			}
		case []any:
			if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
				for i, item := range v {
					if m, ok := item.(map[string]any); ok {
						if err := findUnknown(m, f.Type.Elem(), key+"["+strconv.Itoa(i)+"]"); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func joinKey(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
