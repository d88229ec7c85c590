package mock

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// serveGenerate answers SGLang's native POST /generate.
func (e *Engine) serveGenerate(ctx *fasthttp.RequestCtx) {
	if e.serveFastGenerate(ctx) {
		return
	}
	if e.gate(ctx, pathGenerate) {
		return
	}
	start := time.Now()
	r, err := e.parseGenerate(ctx.PostBody())
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, openAIError(err.Error(), "Bad Request", 400))
		return
	}
	a := e.admit(ctx, r)
	if a == nil {
		return
	}
	e.stats.outputTokens.Add(int64(r.MaxTokens * r.Items))
	if r.Stream {
		steps := max(r.MaxTokens, 1)
		e.stream(ctx, a, steps, func(b []byte, step int, finish finishKind) []byte {
			tokens := min(step+1, r.MaxTokens)
			if finish == finishAbort {
				tokens = min(step, r.MaxTokens)
			}
			for i := 0; i < r.Items; i++ {
				b = append(b, "data: "...)
				b = e.appendGenerateItem(b, r, i, tokens, finish, time.Since(start))
				b = append(b, '\n', '\n')
			}
			return b
		})
		return
	}
	defer e.finish(a)
	if !e.decodeNonStream(ctx, a, r) {
		return
	}
	var b []byte
	if r.Batch {
		b = append(b, '[')
	}
	for i := 0; i < r.Items; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.appendGenerateItem(b, r, i, r.MaxTokens, finishLength, time.Since(start))
	}
	if r.Batch {
		b = append(b, ']')
	}
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// appendGenerateItem appends one item's answer after `tokens` output tokens:
// {"text", "output_ids", "meta_info": {...}} (+ "index" in batch streams).
// Text and output_ids are cumulative, as SGLang streams them by default.
func (e *Engine) appendGenerateItem(b []byte, r *Request, item, tokens int, finish finishKind, elapsed time.Duration) []byte {
	ids := e.outputIDs(r, item)
	b = append(b, `{"text":"`...)
	if e.opts.ChainedOutput {
		b = appendChainedText(b, ids[:tokens])
	} else {
		b = appendOutputText(b, tokens) // vocabulary words need no escaping
	}
	b = append(b, `","output_ids":[`...)
	for k := 0; k < tokens; k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int64(ids[k]))
	}
	b = append(b, `],"meta_info":{"id":`...)
	if r.Batch {
		b = appendString(b, r.Rid+"_"+strconv.Itoa(item))
	} else {
		b = appendString(b, r.Rid)
	}
	b = append(b, `,"finish_reason":`...)
	b = appendFinishReason(b, finish, tokens)
	b = append(b, `,"prompt_tokens":`...)
	b = appendInt(b, int64(r.promptTokens(item)))
	b = append(b, `,"weight_version":"default","completion_tokens":`...)
	b = appendInt(b, int64(tokens))
	b = append(b, `,"cached_tokens":`...)
	b = appendInt(b, int64(r.cachedTokens(item)))
	b = append(b, `,"e2e_latency":`...)
	b = appendFloat(b, elapsed.Seconds())
	if r.ReturnLogprob {
		b = append(b, `,"input_token_logprobs":`...)
		b = e.appendInputLogprobs(b, r, item)
		b = append(b, `,"output_token_logprobs":[`...)
		for k := 0; k < tokens; k++ {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendLogprob(b, OutputLogprob, ids[k])
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	if r.Batch && r.Stream {
		b = append(b, `,"index":`...)
		b = appendInt(b, int64(item))
	}
	return append(b, '}')
}

// appendInputLogprobs appends the item's input_token_logprobs: a prefill
// scores every prompt token, a decode only the token it starts from (the
// prefill's first output), so a correct merge is prefill's list, then decode's.
func (e *Engine) appendInputLogprobs(b []byte, r *Request, item int) []byte {
	if e.opts.Role == RolePrefill {
		var ids []int32
		if item < len(r.prompts) {
			ids = r.prompts[item]
		}
		return appendLogprobs(b, PrefillInputLogprob, ids)
	}
	first := [1]int32{e.outputIDs(r, item)[0]}
	return appendLogprobs(b, DecodeInputLogprob, first[:])
}

// outputIDs returns the item's output ids (at least one, r.MaxTokens in
// all), computed once per request.
func (e *Engine) outputIDs(r *Request, item int) []int32 {
	if r.outputs == nil {
		r.outputs = make([][]int32, r.Items)
	}
	if ids := r.outputs[item]; ids != nil {
		return ids
	}
	n := max(r.MaxTokens, 1)
	ids := make([]int32, 0, n)
	if e.opts.ChainedOutput {
		var prompt []int32
		if item < len(r.prompts) {
			prompt = r.prompts[item]
		}
		ids = chainedIDs(ids, prompt, n)
	} else {
		for k := 0; k < n; k++ {
			ids = append(ids, outputID(k))
		}
	}
	r.outputs[item] = ids
	return ids
}

// appendFinishReason appends SGLang's finish_reason: null while generating,
// {"type":"length","length":N} at the end, {"type":"abort",...} when aborted.
func appendFinishReason(b []byte, finish finishKind, tokens int) []byte {
	switch finish {
	case finishLength:
		b = append(b, `{"type":"length","length":`...)
		b = appendInt(b, int64(tokens))
		return append(b, '}')
	case finishAbort:
		return append(b, `{"type":"abort","message":"Abort in the middle of generation.","status_code":400}`...)
	}
	return append(b, "null"...)
}
