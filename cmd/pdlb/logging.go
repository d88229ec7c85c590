package main

import (
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

// Log buffers: lines collect in one; a full one (or, every logFlushEvery,
// a non-empty one) is queued for the writer goroutine.
const (
	logBufSize = 64 << 10
	logQueue   = 8
)

// flushingWriter buffers log lines and hands full buffers to a writer
// goroutine, so a request that logs never waits on the log file itself: a
// slow disk or a full pipe holds up the writer alone, until logQueue
// buffers are waiting; then logging waits too (nothing is dropped). Lines
// are never split (zerolog writes whole lines) and keep their order.
type flushingWriter struct {
	out io.Writer

	mu     sync.Mutex
	buf    []byte
	closed bool
	queue  chan []byte // full buffers, in order; closed by Close
	free   chan []byte // written buffers, for reuse

	stop     chan struct{}
	tickDone chan struct{}
	done     chan struct{}
}

func newFlushingWriter(w io.Writer, every time.Duration) *flushingWriter {
	f := &flushingWriter{
		out:   w,
		buf:   make([]byte, 0, logBufSize),
		queue: make(chan []byte, logQueue),
		free:  make(chan []byte, logQueue+1),
		stop:  make(chan struct{}), tickDone: make(chan struct{}), done: make(chan struct{}),
	}
	go f.write()
	go f.tick(every)
	return f
}

func (f *flushingWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.out.Write(p)
	}
	if len(f.buf) > 0 && len(f.buf)+len(p) > cap(f.buf) {
		f.handOffLocked()
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// handOffLocked queues the current buffer and starts a fresh one. It runs
// under f.mu, so buffers are queued in the order their lines were written;
// the writer goroutine never takes f.mu, so a full queue cannot deadlock.
func (f *flushingWriter) handOffLocked() {
	f.queue <- f.buf
	select {
	case b := <-f.free:
		f.buf = b[:0]
	default:
		f.buf = make([]byte, 0, logBufSize)
	}
}

// write is the only goroutine that touches out (until Close).
func (f *flushingWriter) write() {
	defer close(f.done)
	for b := range f.queue {
		f.out.Write(b)
		select {
		case f.free <- b:
		default:
		}
	}
}

// tick queues what has collected every interval, so lines appear promptly
// at low load too.
func (f *flushingWriter) tick(every time.Duration) {
	defer close(f.tickDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.mu.Lock()
			if len(f.buf) > 0 && !f.closed {
				f.handOffLocked()
			}
			f.mu.Unlock()
		case <-f.stop:
			return
		}
	}
}

// Close writes out everything buffered; later lines are written directly.
func (f *flushingWriter) Close() {
	select {
	case <-f.stop:
		<-f.done
		return
	default:
		close(f.stop)
	}
	<-f.tickDone
	f.mu.Lock()
	if len(f.buf) > 0 {
		f.handOffLocked()
	}
	f.closed = true
	close(f.queue)
	<-f.done // under f.mu: a line written after Close waits, and stays in order
	f.mu.Unlock()
}
