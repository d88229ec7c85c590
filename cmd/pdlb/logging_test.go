package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination that tests can read while it is written.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	gate chan struct{} // when set, each Write waits for it to be closed
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFlushingWriterKeepsEveryLineWholeAndInOrder: lines from many
// goroutines, far more than one buffer holds, all arrive once, unsplit, and
// each goroutine's lines in the order it wrote them.
func TestFlushingWriterKeepsEveryLineWholeAndInOrder(t *testing.T) {
	out := &lockedBuffer{}
	f := newFlushingWriter(out, 10*time.Millisecond)
	const writers, lines = 8, 5000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(f, `{"writer":%d,"line":%d,"pad":"%s"}`+"\n", w, i, strings.Repeat("x", 40))
			}
		})
	}
	wg.Wait()
	f.Close()
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines written, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		var w, i int
		if _, err := fmt.Sscanf(l, `{"writer":%d,"line":%d,`, &w, &i); err != nil || !strings.HasSuffix(l, `"}`) {
			t.Fatalf("split or garbled line %q", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d came before line %d", w, i, next[w])
		}
		next[w]++
	}
}

// TestFlushingWriterDoesNotWaitOnASlowDestination: while the destination
// blocks, lines still go into buffers (up to the queue) without waiting.
func TestFlushingWriterDoesNotWaitOnASlowDestination(t *testing.T) {
	out := &lockedBuffer{gate: make(chan struct{})}
	f := newFlushingWriter(out, time.Hour)
	line := []byte(strings.Repeat("y", 1023) + "\n")
	wrote := make(chan struct{})
	go func() {
		for range 4 * logBufSize / len(line) { // four buffers: fits the queue
			f.Write(line)
		}
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(2 * time.Second):
		close(out.gate)
		t.Fatal("logging waited on the blocked destination")
	}
	close(out.gate)
	f.Close()
	if n := strings.Count(out.String(), "\n"); n != 4*logBufSize/len(line) {
		t.Fatalf("%d lines written, want %d", n, 4*logBufSize/len(line))
	}
}

// TestFlushingWriterFlushesPeriodically: a lone line appears without Close.
func TestFlushingWriterFlushesPeriodically(t *testing.T) {
	out := &lockedBuffer{}
	f := newFlushingWriter(out, 10*time.Millisecond)
	defer f.Close()
	f.Write([]byte("one line\n"))
	deadline := time.Now().Add(2 * time.Second)
	for out.String() != "one line\n" {
		if time.Now().After(deadline) {
			t.Fatalf("not flushed: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// After Close, lines are written directly.
	f.Close()
	f.Write([]byte("after close\n"))
	if out.String() != "one line\nafter close\n" {
		t.Fatalf("after Close: %q", out.String())
	}
}
