package mock

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Fast mode: plain answers built once at New and served without parsing the
// body, so the mock costs next to nothing per request while pdlb is measured.

type fastAnswers struct {
	generate, chat, completion []byte
}

func buildFastAnswers(opts Options) fastAnswers {
	if !opts.Fast {
		return fastAnswers{}
	}
	n := opts.OutputLen
	if opts.Role == RolePrefill {
		n = 1
	}
	r := &Request{Rid: "fast", MaxTokens: n, Items: 1, prompts: [][]int32{nil}, n: 1}
	e := &Engine{opts: opts}
	return fastAnswers{
		generate:   e.appendGenerateItem(nil, r, 0, n, finishLength, 0),
		chat:       e.appendCompletion(nil, r, opts.Model, 0, true),
		completion: e.appendCompletion(nil, r, opts.Model, 0, false),
	}
}

// fastEligible reports whether precomputed answers may stand in for the
// full path: nothing configured that needs the parsed request.
func (e *Engine) fastEligible() bool {
	return e.opts.Fast && !e.opts.ChainedOutput && e.opts.BeforeAnswer == nil && !e.opts.hasFaults() && e.opts.SlowStart == 0 && !e.kvActive() &&
		e.cache == nil && e.opts.KVTransfers == nil && e.opts.Seen == nil
}

// serveFastGenerate answers a plain /generate from precomputed bytes; false
// when the request needs the full path (stream, missing room, not fast).
func (e *Engine) serveFastGenerate(ctx *fasthttp.RequestCtx) bool {
	return e.serveFast(ctx, e.fast.generate)
}

// serveFastOpenAI is serveFastGenerate for the OpenAI routes.
func (e *Engine) serveFastOpenAI(ctx *fasthttp.RequestCtx, path string) bool {
	if path == pathChat {
		return e.serveFast(ctx, e.fast.chat)
	}
	return e.serveFast(ctx, e.fast.completion)
}

func (e *Engine) serveFast(ctx *fasthttp.RequestCtx, answer []byte) bool {
	if !e.fastEligible() {
		return false
	}
	body := ctx.PostBody()
	if v := valueOf(body, `"stream"`); len(v) > 0 && v[0] == 't' {
		return false
	}
	if v := valueOf(body, `"bootstrap_room"`); len(v) == 0 || v[0] == 'n' {
		return false // the full path words the 400
	}
	e.stats.outputTokens.Add(int64(e.opts.OutputLen))
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(answer)
	return true
}

// valueOf returns the bytes after the first occurrence of key and its colon
// (whitespace skipped), or nil. A byte scan, not a parser: good enough to
// find a top-level flag in the bodies a load generator sends.
func valueOf(body []byte, key string) []byte {
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return nil
	}
	rest := bytes.TrimLeft(body[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return nil
	}
	return bytes.TrimLeft(rest[1:], " \t\r\n")
}
