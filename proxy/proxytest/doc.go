// Package proxytest holds what pdlb's test suites share: real loopback
// engines that record what they receive, HTTP client helpers, and the list
// of goroutines the leak checks ignore. It is imported by tests only.
package proxytest
