package mock

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// startEngine serves a new engine on a loopback port for the test's lifetime.
func startEngine(t *testing.T, opts Options) (*Engine, string) {
	t.Helper()
	e := New(opts, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Serve(ln) }()
	t.Cleanup(func() { _ = e.Shutdown() })
	return e, "http://" + ln.Addr().String()
}

// client returns an HTTP client with its own connection pool.
func client(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// do sends a request and returns status, body and response.
func do(t *testing.T, method, url, body string) (int, []byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client(t, 10*time.Second).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, b, resp
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	status, b, _ := do(t, http.MethodPost, url, body)
	return status, b
}

// decode unmarshals b into a generic value, failing the test on bad JSON.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return v
}

// events splits an SSE body framed exactly as `data: X\n\n` into the X's;
// anything else fails the test.
func events(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	rest := string(body)
	for rest != "" {
		if !strings.HasPrefix(rest, "data: ") {
			t.Fatalf("event does not start with 'data: ': %q", rest)
		}
		end := strings.Index(rest, "\n\n")
		if end < 0 {
			t.Fatalf("event not terminated by a blank line: %q", rest)
		}
		ev := rest[len("data: "):end]
		if strings.Contains(ev, "\n") {
			t.Fatalf("event spans lines: %q", ev)
		}
		out = append(out, ev)
		rest = rest[end+2:]
	}
	return out
}

// readEvent reads one `data: …\n\n` event from r.
func readEvent(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	blank, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	if blank != "\n" || !strings.HasPrefix(line, "data: ") {
		return line + blank, io.ErrUnexpectedEOF
	}
	return strings.TrimSuffix(strings.TrimPrefix(line, "data: "), "\n"), nil
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// path walks a decoded JSON value by object keys and array indexes.
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
