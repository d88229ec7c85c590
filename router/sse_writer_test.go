package router

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestChunkWriterFraming: the head goes out with the first chunk, each
// event is exactly one chunk ending in its blank line, and the body ends
// with the last chunk — as an HTTP client reads it.
func TestChunkWriterFraming(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			raw <- nil
			return
		}
		b, _ := io.ReadAll(c)
		raw <- b
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	w := acquireChunkWriter(conn, streamHead("req-1"))
	if n, err := w.SendEvent([]byte(`data: {"text":"a"}`)); err != nil || n != 20 {
		t.Fatalf("SendEvent = %d, %v", n, err)
	}
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	releaseChunkWriter(w)
	conn.Close()
	b := <-raw
	head := string(streamHead("req-1"))
	want := head + "14\r\ndata: {\"text\":\"a\"}\n\n\r\n" + "e\r\ndata: [DONE]\n\n\r\n" + "0\r\n\r\n"
	if string(b) != want {
		t.Fatalf("wire bytes:\n%q\nwant\n%q", b, want)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n" || resp.Header.Get("X-Request-ID") != "req-1" {
		t.Fatalf("client read %q, %v, headers %v", body, err, resp.Header)
	}
}

// TestChunkWriterHeadWithoutEvents: a stream that ends before any event
// still sends its head and a well-formed empty body.
func TestChunkWriterHeadWithoutEvents(t *testing.T) {
	c1, c2 := net.Pipe()
	go func() {
		w := acquireChunkWriter(c1, streamHead(""))
		w.close()
		releaseChunkWriter(w)
		c1.Close()
	}()
	b, _ := io.ReadAll(c2)
	if want := string(streamHead("")) + "0\r\n\r\n"; string(b) != want {
		t.Fatalf("wire bytes %q, want %q", b, want)
	}
}
