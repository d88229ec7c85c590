package bootstrap

import (
	"errors"
	"fmt"
)

var (
	// ErrRegistrationFailed wraps the error a Registrar returns when every
	// attempt failed (only with FailFast; see RegistrarOptions.FailFast).
	ErrRegistrationFailed = errors.New("bootstrap registration failed")
	// ErrNotReady means the prefill instance has not registered all its ranks
	// (or its info could not be fetched) within the allowed time.
	ErrNotReady = errors.New("prefill not fully registered")
	// ErrUnknownPrefill means the address is not a namespace of the Registry
	// or not polled by the Poller.
	ErrUnknownPrefill = errors.New("unknown prefill bootstrap address")
	// ErrRankNotFound means the registry answered 404 for a rank lookup.
	ErrRankNotFound = errors.New("bootstrap rank not found")
)

// fieldError is a client mistake in a request body or query; the handlers
// turn it into a 400 whose text names Field, so an operator can fix the
// sender without reading pdlb's source.
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Msg) }

func badField(field, format string, args ...any) *fieldError {
	return &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// moveError refuses a re-registration that would move a rank to another
// host in a registry where nothing vouches for the writer (see writer);
// the handlers turn it into a 409 saying what would allow the move.
type moveError struct {
	key      rankKey
	from, to RankInfo
}

func (e *moveError) Error() string {
	return fmt.Sprintf("rank dp=%d cp=%d tp=%d pp=%d is registered at %s; moving it to %s needs a write "+
		"authenticated with bootstrap.auth_token or coming from bootstrap.allowed_sources, "+
		"or a reset first (DELETE /route from the registry's own machine, or a pdlb restart)",
		e.key.dp, e.key.cp, e.key.tp, e.key.pp, e.from.addr(), e.to.addr())
}

// msgError carries a fixed message and a sentinel to match with errors.Is,
// without the sentinel's text being appended to what users read.
type msgError struct {
	msg string
	err error
}

func (e *msgError) Error() string { return e.msg }
func (e *msgError) Unwrap() error { return e.err }

// rootCause follows the wrap chain to its innermost error: fasthttp and net
// wrap "connection refused" in two or three layers of addresses and op names,
// and SGLang's log lines show only the cause (§4), which is what an operator
// needs to see first.
func rootCause(err error) error {
	for err != nil {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
	return nil
}

// clip bounds how much of a peer's text ends up in our messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
