package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment variable pdlb reads.
const EnvPrefix = "PDLB_"

// EnvConfigFile is reserved for cmd/pdlb to name the config file; Load
// skips it instead of reporting it as an unknown key.
const EnvConfigFile = EnvPrefix + "CONFIG"

// Source is everything a configuration is built from, in precedence order:
// defaults < File or Data < Env < Overrides; Prefill/Decode replace the
// file's lists when non-empty.
type Source struct {
	// File is a YAML file path. Set at most one of File and Data; with
	// neither, the config is the defaults plus the later layers.
	File string
	// Data is YAML bytes, e.g. the embedded config.yaml.
	Data []byte
	// Env holds environment entries in os.Environ() form. Only PDLB_* entries
	// are read; nil means none (tests stay independent of the process env).
	Env []string
	// Overrides maps dotted keys ("server.port") to values. Strings are parsed
	// according to the key's type, as environment values are.
	Overrides map[string]any
	// Prefill and Decode, from the command line, replace the file's lists when non-empty.
	Prefill []Prefill
	Decode  []Decode
}

// Load builds a Config from src. It reports unknown keys and values of the
// wrong type as *Error naming the key; it does not run Validate, so callers
// that need a partial config (bench, mock) can still load one.
func Load(src Source) (*Config, error) {
	k := koanf.New(".")

	switch {
	case src.File != "" && src.Data != nil:
		return nil, errorf("", "both a config file and config bytes given")
	case src.File != "":
		if err := k.Load(file.Provider(src.File), yaml.Parser()); err != nil {
			return nil, errorf("", fmt.Sprintf("load %s: %v", src.File, err))
		}
	case src.Data != nil:
		if err := k.Load(rawbytes.Provider(src.Data), yaml.Parser()); err != nil {
			return nil, errorf("", fmt.Sprintf("parse YAML: %v", err))
		}
	}

	// The file's keys are checked before env and overrides are merged so
	// that an error points at the file, not at a layer that merely exists.
	if err := findUnknown(k.Raw(), reflect.TypeFor[Config](), ""); err != nil {
		return nil, err
	}

	env, err := envLayer(src.Env)
	if err != nil {
		return nil, err
	}
	if err := k.Load(confmap.Provider(env, "."), nil); err != nil {
		return nil, errorf("", err.Error())
	}

	over, err := overrideLayer(src.Overrides)
	if err != nil {
		return nil, err
	}
	if err := k.Load(confmap.Provider(over, "."), nil); err != nil {
		return nil, errorf("", err.Error())
	}

	// Decoding onto Default() keeps every key the layers did not set.
	cfg := Default()
	if err := decode(k, &cfg); err != nil {
		return nil, err
	}
	if len(src.Prefill) > 0 {
		cfg.Prefill = append([]Prefill(nil), src.Prefill...)
	}
	if len(src.Decode) > 0 {
		cfg.Decode = append([]Decode(nil), src.Decode...)
	}
	return &cfg, nil
}

// envLayer turns PDLB_* entries into typed values keyed by dotted key.
func envLayer(environ []string) (map[string]any, error) {
	out := map[string]any{}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfigFile {
			continue
		}
		key, ok := envKeys[strings.ToLower(strings.TrimPrefix(name, EnvPrefix))]
		if !ok {
			return nil, errorf(name, "unknown environment variable (no config key "+
				strings.ToLower(strings.TrimPrefix(name, EnvPrefix))+")")
		}
		v, err := parseAs(leafKeys[key], val)
		if err != nil {
			return nil, errorf(key, fmt.Sprintf("%s (from %s)", err, name))
		}
		out[key] = v
	}
	return out, nil
}

// overrideLayer checks override keys and parses string values by key type.
func overrideLayer(over map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(over))
	for key, v := range over {
		t, ok := leafKeys[key]
		if !ok {
			return nil, errorf(key, "unknown key")
		}
		if s, isStr := v.(string); isStr {
			parsed, err := parseAs(t, s)
			if err != nil {
				return nil, errorf(key, err.Error())
			}
			v = parsed
		}
		out[key] = v
	}
	return out, nil
}

var durationType = reflect.TypeFor[time.Duration]()

// parsePairs reads "a=1, b=2" ("" is the empty map) into a map.
func parsePairs(s string) (map[string]any, error) {
	out := map[string]any{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		if name = strings.TrimSpace(name); !ok || name == "" {
			return nil, fmt.Errorf("%q is not name=value", item)
		}
		out[name] = strings.TrimSpace(val)
	}
	return out, nil
}

// parseAs reads a textual value (env var, --set) as the key's Go type, so
// "0123" stays a string for api_key and "9000" becomes an int for a port.
// A list of strings is comma-separated ("10.0.0.0/16, 10.1.0.5"; "" is the
// empty list): its items (CIDRs) never contain a comma. A map of strings
// (tracing.headers) is "name=value" pairs, comma-separated, as
// OTEL_EXPORTER_OTLP_HEADERS writes them.
func parseAs(t reflect.Type, s string) (any, error) {
	if t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String {
		return parsePairs(s)
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String {
		items := []string{}
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		return items, nil
	}
	if t == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (want e.g. \"5s\")", s)
		}
		return d, nil
	}
	switch t.Kind() {
	case reflect.String:
		return s, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", s)
		}
		return b, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		return n, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("%q is not a non-negative integer", s)
		}
		return n, nil
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", s)
		}
		return f, nil
	}
	return nil, fmt.Errorf("cannot be set from text")
}

// decode unmarshals the merged tree strictly: unknown keys are errors and
// no weak typing, so `port: true` or `read_timeout: 60` (60ns) are refused
// instead of silently meaning something else.
func decode(k *koanf.Koanf, cfg *Config) error {
	err := k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook:  strictHook,
			ErrorUnused: true,
			TagName:     "koanf",
		},
	})
	if err == nil {
		return nil
	}
	var de *mapstructure.DecodeError
	if errors.As(err, &de) {
		return errorf(keyFromDecoder(de.Name()), de.Unwrap().Error())
	}
	return errorf("", err.Error())
}

// keyFromDecoder drops the leading dot mapstructure puts on top-level names.
func keyFromDecoder(name string) string {
	return strings.TrimPrefix(name, ".")
}

// strictHook converts or rejects leaf values before mapstructure sees them.
func strictHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType {
		switch v := data.(type) {
		case time.Duration:
			return v, nil
		case string:
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%q is not a duration (want e.g. \"5s\")", v)
			}
			return d, nil
		case int, int64, uint64, float64:
			if reflect.ValueOf(v).IsZero() {
				return time.Duration(0), nil
			}
			return nil, fmt.Errorf("%v needs a unit (e.g. \"%vs\")", v, v)
		}
		return nil, fmt.Errorf("want a duration like \"5s\", got %T", data)
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return checkInteger(to, data)
	case reflect.Float32, reflect.Float64:
		switch data.(type) {
		case int, int64, uint64, float64, float32:
			return data, nil
		}
		return nil, fmt.Errorf("want a number, got %s", describe(data))
	case reflect.Bool:
		if _, ok := data.(bool); !ok {
			return nil, fmt.Errorf("want true or false, got %s", describe(data))
		}
	case reflect.String:
		switch data.(type) {
		case string:
		case map[string]any, []any, nil:
			return nil, fmt.Errorf("want a string, got %s", describe(data))
		default:
			return nil, fmt.Errorf("want a string, got %s (quote it)", describe(data))
		}
	}
	return data, nil
}

// checkInteger refuses fractions and values the target type cannot hold,
// which mapstructure would otherwise truncate or wrap.
func checkInteger(to reflect.Type, data any) (any, error) {
	var (
		n        int64
		u        uint64
		unsigned bool // the value is in u, not n (too big for int64)
	)
	switch v := data.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case uint64:
		if v > math.MaxInt64 {
			u, unsigned = v, true
		} else {
			n = int64(v)
		}
	case float64:
		if v != math.Trunc(v) || math.Abs(v) >= 1<<63 {
			return nil, fmt.Errorf("want an integer, got %v", v)
		}
		n = int64(v)
	default:
		return nil, fmt.Errorf("want an integer, got %s", describe(data))
	}
	z := reflect.New(to).Elem()
	var overflow bool
	switch to.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if unsigned {
			overflow = z.OverflowUint(u)
		} else {
			overflow = n < 0 || z.OverflowUint(uint64(n))
		}
	default:
		overflow = unsigned || z.OverflowInt(n)
	}
	if overflow {
		return nil, fmt.Errorf("%v out of range", data)
	}
	return data, nil
}

func describe(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%v", v)
}
