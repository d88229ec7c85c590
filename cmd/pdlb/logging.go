package main

import (
	"os"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// newLogger builds the process logger from log.level and log.format.
func newLogger(c config.Log) zerolog.Logger {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	zerolog.DurationFieldUnit = time.Millisecond
	zerolog.TimeFieldFormat = time.RFC3339Nano
	if c.Format == "console" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).Level(level).With().Timestamp().Logger()
	}
	return zerolog.New(os.Stderr).Level(level).With().Timestamp().Logger()
}
