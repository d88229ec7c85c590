// Package router is pdlb's request path: the client-facing fasthttp server
// and its route table, request checks (method, size, JSON shape), body
// parsing and bootstrap injection, backend selection, and the attempts and
// retries around proxy.Proxy.Do (pd.go reads top to bottom). It never dials
// a backend itself, and it does not assemble pdlb: cmd/pdlb/service builds
// a Router from a config and applies reloads through Router.Apply.
package router
