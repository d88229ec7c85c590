// Package pdlb holds the files the binary embeds from the repository root.
// It exists because go:embed cannot reach a parent folder, and config.yaml
// lives at the root where operators look for it. The code lives in the
// subfolders: config, router, proxy, bootstrap, bench and cmd/pdlb.
package pdlb

import _ "embed"

// DefaultConfigYAML is config.yaml: the default configuration (it runs the
// demo) and the reference for every key.
//
//go:embed config.yaml
var DefaultConfigYAML []byte
