// Package pdlb holds what every part of pdlb shares, at the root where a
// reader looks first: the one error shape every listener answers with
// (errors.go), the one bearer-token check (auth.go), the injectable clock
// (clock.go), copy-on-write state for the request path (cow.go), and the
// files the binary embeds (config.yaml: go:embed cannot reach a parent
// folder). It
// imports no other pdlb package; everything may import it. The code lives
// in the subfolders: config, router, proxy, bootstrap, bench and cmd/pdlb.
package pdlb

import _ "embed"

// DefaultConfigYAML is config.yaml: the default configuration (it runs the
// demo) and the reference for every key.
//
//go:embed config.yaml
var DefaultConfigYAML []byte
