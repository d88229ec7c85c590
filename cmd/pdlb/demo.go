package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"pdlb"
	"pdlb/bench/mock"
	"pdlb/cmd/pdlb/service"
	"pdlb/config"
)

// The demo's prefill has two DP ranks, so the DP-rank rules are exercised
// end to end; demoRegisterWait bounds the wait for its registration.
const (
	demoPrefillDP    = 2
	demoRegisterWait = 15 * time.Second
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
	svc, err := service.New(cfg, log)
	if err != nil {
		return err
	}
	// pdlb first, so the embedded registry listens when the prefill
	// registers; the prefill's registration retries would cover the race.
	if err := svc.Start(); err != nil {
		return err
	}
	start := func(rawURL string, o mock.Options) (*mock.Engine, error) {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, err
		}
		o.TokenDelay = 20 * time.Millisecond
		e, err := startMock(o, u.Host, log)
		if err != nil {
			return nil, err
		}
		engines = append(engines, e)
		return e, nil
	}
	var prefills []*mock.Engine
	for _, p := range cfg.Prefill {
		o := mock.Options{Role: mock.RolePrefill, DP: demoPrefillDP}
		if cfg.Bootstrap.Mode == "embedded" {
			port := config.DefaultBootstrapPort
			if p.BootstrapPort != nil {
				port = *p.BootstrapPort
			}
			o.Bootstrap = "http://" + net.JoinHostPort(cfg.Bootstrap.AdvertiseHost, strconv.Itoa(port))
			o.BootstrapToken = cfg.Bootstrap.AuthToken
		}
		e, err := start(p.URL, o)
		if err != nil {
			return err
		}
		if o.Bootstrap != "" {
			prefills = append(prefills, e)
		}
	}
	for _, d := range cfg.Decode {
		o := mock.Options{Role: mock.RoleDecode, Lookup: cfg.Bootstrap.Mode == "embedded",
			LookupAttempts: cfg.Bootstrap.LookupAttempts, LookupInterval: cfg.Bootstrap.LookupInterval}
		if _, err := start(d.URL, o); err != nil {
			return err
		}
	}
	// The curl line below must work at once: wait for the registrations.
	deadline := time.NewTimer(demoRegisterWait)
	defer deadline.Stop()
wait:
	for _, e := range prefills {
		select {
		case <-e.Registered():
		case <-deadline.C:
			log.Warn().Dur("waited", demoRegisterWait).Msg("demo: prefill not registered yet; requests get 503 until it is")
			break wait
		}
	}
	fmt.Printf("\npdlb demo is running. Try:\n\n  curl localhost:%d/generate -d '{\"text\":\"hi\"}'\n  curl -N localhost:%d/generate -d '{\"text\":\"hi\",\"stream\":true}'\n\nCtrl-C stops all.\n\n",
		cfg.Server.Port, cfg.Server.Port)
	waitForSignal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return svc.Shutdown(ctx)
}
