package router

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

func TestHeaderTooLargeIs431(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) { c.Server.MaxHeaderBytes = 4096 })
	resp, b := proxytest.RawRequest(t, l.URL, "POST /generate HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8192)+"\r\nContent-Length: 2\r\n\r\n{}")
	var e proxytest.ErrorBody
	if resp.StatusCode != 431 || json.Unmarshal([]byte(b), &e) != nil || e.Error.Code != 431 {
		t.Fatalf("got %d %s", resp.StatusCode, b)
	}
	if p.Count()+d.Count() != 0 {
		t.Fatal("reached a backend")
	}
}

func TestSlowClientIsCutByReadTimeout(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) { c.Server.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Half a request, then nothing: pdlb must not wait forever.
	conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"te"))
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	io.ReadAll(conn) // returns when pdlb answers and/or closes
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("slow client held the connection for %v with a 300ms read timeout", el)
	}
	if p.Count()+d.Count() != 0 {
		t.Fatal("a half-sent request reached a backend")
	}
}

func TestOneLogLinePerRequest(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"ok":1}`))
	var buf proxytest.SyncBuffer
	l := startLBWithLog(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, zerolog.New(&buf))
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	var line map[string]any
	for _, raw := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil && m["message"] == "request" {
			if line != nil {
				t.Fatalf("two request lines: %s", buf.Bytes())
			}
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no request line in %s", buf.Bytes())
	}
	for _, k := range []string{"method", "path", "status", "prefill", "decode", "room", "duration", "bytes", "request_id"} {
		if _, ok := line[k]; !ok {
			t.Errorf("request line lacks %q: %v", k, line)
		}
	}
	if line["level"] != "info" || line["prefill"] != p.URL || line["decode"] != d.URL || line["status"] != float64(200) {
		t.Errorf("request line %v", line)
	}
}
