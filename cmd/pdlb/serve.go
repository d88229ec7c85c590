package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the admin-only pprof listener
	"os"
	"os/signal"
	"syscall"

	"pdlb/cmd/pdlb/service"
	"pdlb/config"
)

// loadConfig runs Load+Validate; a bad config is exit code 2 with one line.
func loadConfig(src config.Source) (*config.Config, *config.Loader, error) {
	src.Env = os.Environ()
	l := &config.Loader{Source: src}
	cfg, err := l.Load()
	if err != nil {
		return nil, nil, &exitError{2, err}
	}
	return cfg, l, nil
}

func serve(args []string) error {
	sa, err := config.ParseServeArgs(args)
	if errors.Is(err, config.ErrHelp) {
		fmt.Print(config.ServeUsage)
		return nil
	}
	if err != nil {
		return &exitError{2, err}
	}
	src := sa.Source()
	if src.File == "" {
		src.File = os.Getenv(config.EnvConfigFile)
	}
	cfg, loader, err := loadConfig(src)
	if err != nil {
		return err
	}
	log, flushLog := newLogger(cfg.Log)
	defer flushLog()
	if sa.PprofAddr != "" {
		startPprof(sa.PprofAddr)
	}
	svc, err := service.New(cfg, log)
	if err != nil {
		return &exitError{2, err}
	}
	if err := svc.Start(); err != nil {
		return err
	}
	reload := func(next *config.Config, err error) {
		if err != nil {
			log.Error().Err(err).Msg("reload rejected; keeping the running configuration")
			return
		}
		if err := svc.Apply(next); err != nil {
			log.Error().Err(err).Msg("reload failed; keeping the running configuration")
		}
	}
	if loader.Source.File != "" {
		stop, err := loader.Watch(reload)
		if err != nil {
			log.Warn().Err(err).Msg("config file watch not available; SIGHUP still reloads")
		} else {
			defer stop()
		}
	}
	for sig := waitForSignal(); sig == syscall.SIGHUP; sig = waitForSignal() {
		log.Info().Msg("SIGHUP: reloading configuration")
		reload(loader.Load())
	}
	grace := svc.Config().Server.ShutdownGrace
	log.Info().Dur("grace", grace).Msg("shutting down: draining in-flight requests")
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("grace period over; closing the remaining connections")
	}
	return nil
}

// startPprof exposes net/http/pprof on its own address (never the serving port).
func startPprof(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pdlb: pprof:", err)
		return
	}
	go http.Serve(ln, http.DefaultServeMux)
}

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(ch)
	return <-ch
}

func checkConfig(args []string) error {
	if len(args) != 1 {
		return &exitError{2, errors.New("usage: pdlb check-config FILE")}
	}
	cfg, _, err := loadConfig(config.Source{File: args[0]})
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok (%d prefill, %d decode, bootstrap %s)\n", args[0], len(cfg.Prefill), len(cfg.Decode), cfg.Bootstrap.Mode)
	if len(cfg.Prefill) == 0 || len(cfg.Decode) == 0 {
		fmt.Println("note: pdlb will not be ready until a prefill and a decode join (admin API, cluster.etcd or discovery)")
	}
	return nil
}
