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

	"pdlb/config"
	"pdlb/router"
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
	cfg, _, err := loadConfig(src)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log)
	if sa.PprofAddr != "" {
		startPprof(sa.PprofAddr)
	}
	svc, err := router.NewService(cfg, log)
	if err != nil {
		return &exitError{2, err}
	}
	if err := svc.Start(); err != nil {
		return err
	}
	waitForSignal()
	log.Info().Dur("grace", cfg.Server.ShutdownGrace).Msg("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownGrace)
	defer cancel()
	return svc.Shutdown(ctx)
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
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
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
	return nil
}
