package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRestartedBackendPooledConnections: after an engine restarts, every
// pooled keep-alive connection to it is dead; the next request must still
// succeed (the dead pool is dropped and one fresh dial is tried), not fail
// on the second dead connection.
func TestRestartedBackendPooledConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var serverSide []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			serverSide = append(serverSide, c)
			mu.Unlock()
			go answerJSON(c)
		}
	}()
	b, err := NewBackend("http://"+ln.Addr().String(), Decode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 3 {
		c, err := b.up.dial(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		b.up.put(c)
	}
	// The engine restarts: it closes every connection it had.
	waitConns := time.Now().Add(time.Second)
	for {
		mu.Lock()
		n := len(serverSide)
		mu.Unlock()
		if n == 3 || time.Now().After(waitConns) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	for _, c := range serverSide {
		c.Close()
	}
	mu.Unlock()
	time.Sleep(20 * time.Millisecond) // let the FINs arrive

	l := &leg{b: b}
	defer l.reset()
	if uerr := l.start("/generate", []byte(`{}`), "", nil, time.Now().Add(2*time.Second)); uerr != nil {
		t.Fatalf("request after the engine restarted: %v", uerr)
	}
	if l.status() != 200 {
		t.Fatalf("status %d", l.status())
	}
}

// answerJSON answers every request on c with a small JSON body.
func answerJSON(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for skipRequest(br) == nil {
		if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")); err != nil {
			return
		}
	}
}

// skipRequest reads one request (headers and a Content-Length body) from br.
func skipRequest(br *bufio.Reader) error {
	length := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if len(line) > 16 && (line[:16] == "Content-Length: " || line[:16] == "content-length: ") {
			length, _ = strconv.Atoi(line[16 : len(line)-2])
		}
		if line == "\r\n" {
			break
		}
	}
	_, err := io.CopyN(io.Discard, br, int64(length))
	return err
}
