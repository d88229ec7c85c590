package main

import (
	"bufio"
	"io"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// newLogger builds the process logger from log.level and log.format. JSON
// logs go through a buffered writer flushed every logFlushEvery: one line
// per request would otherwise cost one write syscall per request, a few
// percent of pdlb's CPU at full load. flush must run before exit.
func newLogger(c config.Log) (log zerolog.Logger, flush func()) {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	zerolog.DurationFieldUnit = time.Millisecond
	zerolog.TimeFieldFormat = time.RFC3339Nano
	if c.Format == "console" {
		w := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}
		return zerolog.New(w).Level(level).With().Timestamp().Logger(), func() {}
	}
	bw := newFlushingWriter(os.Stderr, logFlushEvery)
	return zerolog.New(bw).Level(level).With().Timestamp().Logger(), bw.Close
}

const logFlushEvery = 100 * time.Millisecond

// flushingWriter buffers log lines and flushes them periodically; a line is
// never split (zerolog writes whole lines) and nothing is dropped.
type flushingWriter struct {
	mu   sync.Mutex
	bw   *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

func newFlushingWriter(w io.Writer, every time.Duration) *flushingWriter {
	f := &flushingWriter{bw: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				f.flush()
			case <-f.stop:
				f.flush()
				return
			}
		}
	}()
	return f
}

func (f *flushingWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bw.Write(p)
}

func (f *flushingWriter) flush() {
	f.mu.Lock()
	f.bw.Flush()
	f.mu.Unlock()
}

// Close flushes what is buffered and stops the flusher.
func (f *flushingWriter) Close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}
