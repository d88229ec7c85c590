package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// sseServer answers every request with a chunked SSE stream of n events
// (one chunk each, as engines send them) and then data: [DONE].
func sseServer(tb testing.TB, n int, event string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if skipRequest(bufio.NewReader(c)) != nil {
					return
				}
				bw := bufio.NewWriterSize(c, 64<<10)
				bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				chunk := "data: " + event + "\n\n"
				framed := []byte(strconv.FormatInt(int64(len(chunk)), 16) + "\r\n" + chunk + "\r\n")
				for i := 0; i < n; i++ {
					bw.Write(framed)
				}
				done := "data: [DONE]\n\n"
				bw.WriteString(strconv.FormatInt(int64(len(done)), 16) + "\r\n" + done + "\r\n0\r\n\r\n")
				bw.Flush()
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// BenchmarkSSERelay measures relaying one streamed event (read from the
// decode, framed, written and flushed to the client) in steady state: one
// op is one event, so allocs/op shows any allocation per event.
func BenchmarkSSERelay(b *testing.B) {
	for _, c := range []struct {
		name             string
		merge, resumable bool
	}{{"plain", false, false}, {"logprob-merge", true, false}, {"resumable", false, true}} {
		merge := c.merge
		b.Run(c.name, func(b *testing.B) {
			event := `{"text":"the quick brown fox","output_ids":[1000,1001,1002,1003],"meta_info":{"id":"x","input_token_logprobs":[[-0.5,1,null]],"completion_tokens":4}}`
			url := sseServer(b, b.N, event)
			p, _ := NewBackend(url, Prefill, time.Second)
			d, _ := NewBackend(url, Decode, time.Second)
			px := New(config.Timeouts{Connect: time.Second, PrefillFirstByte: time.Minute, DecodeFirstByte: time.Minute, DecodeIdle: time.Minute, Request: time.Hour}, zerolog.Nop())
			pt, _ := p.Acquire()
			dt, _ := d.Acquire()
			b.ReportAllocs()
			b.ResetTimer()
			ans, err := px.Do(&Exchange{Prefill: pt, Decode: dt, Path: "/generate", PrefillBody: []byte(`{}`), DecodeBody: []byte(`{}`),
				Stream: true, MergeLogprobs: merge, Resumable: c.resumable, Deadline: time.Now().Add(time.Hour)})
			if err != nil {
				b.Fatal(err)
			}
			w := bufio.NewWriter(io.Discard)
			res := ans.Stream.Relay(w, nil, 0)
			b.StopTimer()
			if res.Err != nil || res.Events != b.N+1 {
				b.Fatalf("relayed %d events, err %v", res.Events, res.Err)
			}
		})
	}
}
