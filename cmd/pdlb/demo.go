package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"pdlb"
	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/router"
)

// demo runs mock engines on the backend URLs of the embedded config.yaml and
// pdlb in front of them, in one process; Ctrl-C stops all.
func demo(args []string) error {
	if len(args) > 0 {
		return &exitError{2, errors.New("usage: pdlb demo (configure with PDLB_* variables)")}
	}
	cfg, _, err := loadConfig(config.Source{Data: pdlb.DefaultConfigYAML})
	if err != nil {
		return err
	}
	log, flushLog := newLogger(cfg.Log)
	defer flushLog()
	var engines []*mock.Engine
	defer func() {
		for _, e := range engines {
			e.Shutdown()
		}
	}()
	start := func(rawURL, role string) error {
		u, err := url.Parse(rawURL)
		if err != nil {
			return err
		}
		e, err := startMock(mock.Options{Role: role, TokenDelay: 20 * time.Millisecond}, u.Host, log.With().Str("mock", role).Logger())
		if err != nil {
			return err
		}
		engines = append(engines, e)
		return nil
	}
	for _, p := range cfg.Prefill {
		if err := start(p.URL, mock.RolePrefill); err != nil {
			return err
		}
	}
	for _, d := range cfg.Decode {
		if err := start(d.URL, mock.RoleDecode); err != nil {
			return err
		}
	}
	svc, err := router.NewService(cfg, log)
	if err != nil {
		return err
	}
	if err := svc.Start(); err != nil {
		return err
	}
	fmt.Printf("\npdlb demo is running. Try:\n\n  curl localhost:%d/generate -d '{\"text\":\"hi\"}'\n  curl -N localhost:%d/generate -d '{\"text\":\"hi\",\"stream\":true}'\n\nCtrl-C stops all.\n\n",
		cfg.Server.Port, cfg.Server.Port)
	waitForSignal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return svc.Shutdown(ctx)
}
