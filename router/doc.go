// Package router is pdlb's client-facing side: the fasthttp server and its
// route table, request checks (method, size, JSON shape), body parsing and
// bootstrap injection, backend selection, and the retry loop around
// proxy.Proxy.Do. It never dials a backend itself.
package router
