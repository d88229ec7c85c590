package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrHelp is returned by ParseServeArgs for -h or --help.
var ErrHelp = errors.New("help requested")

// ServeUsage documents the arguments ParseServeArgs accepts.
const ServeUsage = `pdlb serve [flags]
  -c, --config FILE          YAML config file (default: the embedded config.yaml)
  --prefill URL [PORT|none]  prefill engine, optional bootstrap port (repeatable)
  --decode URL               decode engine (repeatable)
  --host H, --port N         client listener (server.host, server.port)
  --log-level L              trace, debug, info, warn, error
  --log-format F             json, console
  --bootstrap-mode M         embedded, external or off
  --advertise-host H         host engines reach the embedded registry on
  --set key=value            any other key, e.g. --set limits.max_body_bytes=1048576
  --pprof ADDR               serve net/http/pprof on ADDR
Flags also take the --flag=value form.`

// ServeArgs is what `pdlb serve` was told on the command line.
type ServeArgs struct {
	ConfigFile string
	PprofAddr  string
	Prefill    []Prefill
	Decode     []Decode
	// Overrides maps dotted keys to values, for Source.Overrides.
	Overrides map[string]any
}

// Source returns the parts of a Source the command line decides; the caller
// adds Data (when ConfigFile is empty) and Env.
func (a ServeArgs) Source() Source {
	return Source{File: a.ConfigFile, Prefill: a.Prefill, Decode: a.Decode, Overrides: a.Overrides}
}

// keyFlags are the SGLang-style shorthands for single keys.
var keyFlags = map[string]string{
	"--host":           "server.host",
	"--port":           "server.port",
	"--log-level":      "log.level",
	"--log-format":     "log.format",
	"--bootstrap-mode": "bootstrap.mode",
	"--advertise-host": "bootstrap.advertise_host",
}

// valueFlags are the other flags; each takes a value.
var valueFlags = map[string]bool{
	"-c": true, "--config": true, "--pprof": true,
	"--prefill": true, "--decode": true, "--port": true, "--set": true,
}

// ParseServeArgs parses SGLang-style serve arguments. It is hand-written
// because `--prefill URL [PORT]` takes an optional positional value, which
// the flag package cannot express.
func ParseServeArgs(args []string) (ServeArgs, error) {
	out := ServeArgs{Overrides: map[string]any{}}
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		if !strings.HasPrefix(name, "-") {
			return ServeArgs{}, errorf(args[i], "unexpected argument")
		}
		// value returns the flag's value: after "=" or the next argument.
		value := func() (string, *Error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) || looksLikeFlag(args[i+1]) {
				return "", errorf(name, "missing value")
			}
			i++
			return args[i], nil
		}
		if name == "-h" || name == "--help" {
			return ServeArgs{}, ErrHelp
		}
		if _, short := keyFlags[name]; !short && !valueFlags[name] {
			return ServeArgs{}, errorf(name, "unknown flag")
		}
		v, err := value()
		if err != nil {
			return ServeArgs{}, err
		}
		switch name {
		case "-c", "--config":
			out.ConfigFile = v
		case "--pprof":
			out.PprofAddr = v
		case "--decode":
			out.Decode = append(out.Decode, Decode{URL: v})
		case "--prefill":
			p := Prefill{URL: v}
			if i+1 < len(args) {
				if port, ok := optionalPort(args[i+1]); ok {
					p.BootstrapPort = port
					i++
				}
			}
			out.Prefill = append(out.Prefill, p)
		case "--port":
			n, err := strconv.Atoi(v)
			if err != nil {
				return ServeArgs{}, errorf(name, fmt.Sprintf("%q is not a port number", v))
			}
			out.Overrides["server.port"] = n
		case "--set":
			key, sv, ok := strings.Cut(v, "=")
			if !ok || key == "" {
				return ServeArgs{}, errorf(name, fmt.Sprintf("want key=value, got %q", v))
			}
			if _, known := leafKeys[key]; !known {
				return ServeArgs{}, errorf(name, "unknown key "+key)
			}
			// Kept as text: Load parses it by the key's type, so "0123"
			// stays a string for api_key and becomes 123 for a count.
			out.Overrides[key] = sv
		default:
			out.Overrides[keyFlags[name]] = v
		}
	}
	return out, nil
}

// optionalPort reads the optional argument after --prefill URL: an integer
// port, or "none" for a null bootstrap port (as SGLang's router accepts).
func optionalPort(arg string) (*int, bool) {
	if arg == "none" {
		return nil, true
	}
	n, err := strconv.Atoi(arg)
	if err != nil {
		return nil, false
	}
	return &n, true
}

// looksLikeFlag tells a flag from a value; "-" alone is a value.
func looksLikeFlag(s string) bool {
	return len(s) > 1 && s[0] == '-'
}
