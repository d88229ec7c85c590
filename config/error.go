package config

import "strings"

// Error is every configuration problem pdlb reports: unknown keys and bad
// types from Load, bad values from Validate, bad flags from ParseServeArgs.
// Key names the offending key in dotted form ("server.port",
// "prefill[1].url"), a flag ("--port") or an environment variable.
type Error struct {
	Key     string
	Problem string
}

// Error renders the problem as one line, because operators read it in a
// terminal or a log line; embedded newlines (YAML parser messages have
// them) are folded.
func (e *Error) Error() string {
	p := strings.Join(strings.Fields(e.Problem), " ")
	if e.Key == "" {
		return "config: " + p
	}
	return "config: " + e.Key + ": " + p
}

func errorf(key, problem string) *Error {
	return &Error{Key: key, Problem: problem}
}
