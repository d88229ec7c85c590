package proxy

import (
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
)

// The logprob merge puts the prefill's meta_info.input_token_logprobs in
// front of the decode's, as SGLang's load balancers do: the decode only
// scores the tokens it saw after the KV handoff. It splices bytes; nothing
// is re-encoded, so every other byte of the decode's answer is untouched.

const logprobPath = "meta_info.input_token_logprobs"

// b2s views b as a string without copying; the string must not outlive b.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// arrayInner returns the elements of a JSON array's raw text ("[a,b]" → "a,b").
func arrayInner(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	return raw[1 : len(raw)-1]
}

// prefillLogprobs extracts the prefill's input_token_logprobs elements
// (for one object, or the i-th item of a batch answer when i >= 0).
func prefillLogprobs(doc []byte, i int) (string, bool) {
	path := logprobPath
	if i >= 0 {
		path = strconv.Itoa(i) + "." + logprobPath
	}
	r := gjson.Get(b2s(doc), path)
	if !r.IsArray() {
		return "", false
	}
	return arrayInner(r.Raw), true
}

// appendMergedObject appends doc to dst with the array at path prefixed by
// the elements in prefix. doc is appended unchanged when it has no such array.
func appendMergedObject(dst, doc []byte, path, prefix string) []byte {
	r := gjson.Get(b2s(doc), path)
	if !r.IsArray() || r.Index <= 0 {
		return append(dst, doc...)
	}
	dst = append(dst, doc[:r.Index]...)
	dst = appendJoinedArray(dst, prefix, arrayInner(r.Raw))
	return append(dst, doc[r.Index+len(r.Raw):]...)
}

func appendJoinedArray(dst []byte, a, b string) []byte {
	dst = append(dst, '[')
	dst = append(dst, a...)
	if hasElements(a) && hasElements(b) {
		dst = append(dst, ',')
	}
	dst = append(dst, b...)
	return append(dst, ']')
}

func hasElements(inner string) bool {
	for i := 0; i < len(inner); i++ {
		switch inner[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return true
		}
	}
	return false
}

// mergeNonStream merges a whole prefill answer into a whole decode answer;
// batch answers (JSON arrays) are merged item by item.
func mergeNonStream(dst, decode, prefill []byte) []byte {
	d := gjson.Parse(b2s(decode))
	if !d.IsArray() {
		prefix, ok := prefillLogprobs(prefill, -1)
		if !ok {
			return append(dst, decode...)
		}
		return appendMergedObject(dst, decode, logprobPath, prefix)
	}
	n := int(gjson.Get(b2s(decode), "#").Int())
	last := 0
	for i := 0; i < n; i++ {
		prefix, ok := prefillLogprobs(prefill, i)
		if !ok {
			continue
		}
		r := gjson.Get(b2s(decode), strconv.Itoa(i)+"."+logprobPath)
		if !r.IsArray() || r.Index <= last {
			continue
		}
		dst = append(dst, decode[last:r.Index]...)
		dst = appendJoinedArray(dst, prefix, arrayInner(r.Raw))
		last = r.Index + len(r.Raw)
	}
	return append(dst, decode[last:]...)
}
