package mock

import (
	"github.com/valyala/fasthttp"
)

// serveOpenAI answers /v1/chat/completions and /v1/completions in the shape
// SGLang's OpenAI layer uses (protocol.py), plain and streamed.
func (e *Engine) serveOpenAI(ctx *fasthttp.RequestCtx, path string) {
	if e.serveFastOpenAI(ctx, path) {
		return
	}
	if e.gate(ctx, path) {
		return
	}
	r, err := e.parseOpenAI(path, ctx.PostBody())
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, openAIError(err.Error(), "Bad Request", 400))
		return
	}
	a := e.admit(ctx, r)
	if a == nil {
		return
	}
	e.stats.outputTokens.Add(int64(r.MaxTokens * r.Items))
	model := r.model
	if model == "" {
		model = e.opts.Model
	}
	created := e.opts.Clock().Unix()
	chat := path == pathChat
	if r.Stream {
		// Chat: a role event, one event per token, a finish event; completions:
		// one event per token, the last carrying finish_reason.
		steps := r.MaxTokens
		if chat {
			steps += 2
		}
		steps = max(steps, 1)
		e.stream(ctx, a, steps, func(b []byte, step int, finish finishKind) []byte {
			for i := 0; i < r.Items; i++ {
				b = append(b, "data: "...)
				b = e.appendChunk(b, r, model, created, chat, i, step, finish)
				b = append(b, '\n', '\n')
			}
			if finish != finishNone && r.includeUsage {
				b = append(b, "data: "...)
				b = appendChunkHead(b, r, model, created, chat)
				b = append(b, `"choices":[],"usage":`...)
				b = appendUsage(b, r)
				b = append(b, "}\n\n"...)
			}
			return b
		})
		return
	}
	defer e.finish(a)
	if !e.decodeNonStream(ctx, a, r) {
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, e.appendCompletion(nil, r, model, created, chat))
}

// appendCompletion appends a whole (non-stream) OpenAI answer.
func (e *Engine) appendCompletion(b []byte, r *Request, model string, created int64, chat bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.Rid)
	if chat {
		b = append(b, `,"object":"chat.completion","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = appendInt(b, created)
	b = append(b, `,"model":`...)
	b = appendString(b, model)
	b = append(b, `,"choices":[`...)
	for i := 0; i < r.Items; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, int64(i))
		if chat {
			b = append(b, `,"message":{"role":"assistant","content":"`...)
			b = appendOutputText(b, r.MaxTokens)
			b = append(b, `","reasoning_content":null,"tool_calls":null}`...)
		} else {
			b = append(b, `,"text":"`...)
			b = appendOutputText(b, r.MaxTokens)
			b = append(b, '"')
		}
		b = append(b, `,"logprobs":null,"finish_reason":"length","matched_stop":null}`...)
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, r)
	return append(b, '}')
}

// appendChunkHead appends `{"id":…,"object":…,"created":…,"model":…,`.
func appendChunkHead(b []byte, r *Request, model string, created int64, chat bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.Rid)
	if chat {
		b = append(b, `,"object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = appendInt(b, created)
	b = append(b, `,"model":`...)
	b = appendString(b, model)
	return append(b, ',')
}

// appendChunk appends one stream chunk for choice i at step.
func (e *Engine) appendChunk(b []byte, r *Request, model string, created int64, chat bool, i, step int, finish finishKind) []byte {
	b = appendChunkHead(b, r, model, created, chat)
	b = append(b, `"choices":[{"index":`...)
	b = appendInt(b, int64(i))
	token := step // completions: step k carries token k
	if chat {
		token = step - 1 // chat: step 0 is the role event
	}
	piece := ""
	if token >= 0 && token < r.MaxTokens && finish != finishAbort {
		piece = outputPiece(token)
	}
	if chat {
		switch {
		case step == 0:
			b = append(b, `,"delta":{"role":"assistant","content":""}`...)
		case piece != "":
			b = append(b, `,"delta":{"content":`...)
			b = appendString(b, piece)
			b = append(b, '}')
		default:
			b = append(b, `,"delta":{}`...)
		}
	} else {
		b = append(b, `,"text":`...)
		b = appendString(b, piece)
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	switch finish {
	case finishLength:
		b = append(b, `"length"`...)
	case finishAbort:
		b = append(b, `"abort"`...)
	default:
		b = append(b, "null"...)
	}
	return append(b, `,"matched_stop":null}],"usage":null}`...)
}

// appendUsage appends {"prompt_tokens","total_tokens","completion_tokens",
// "prompt_tokens_details"}. As SGLang's UsageProcessor, it counts each
// prompt once however many choices (n) it has, and gives
// prompt_tokens_details as {"cached_tokens": N} when N > 0 (SGLang with
// --enable-cache-report), else null.
func appendUsage(b []byte, r *Request) []byte {
	prompt, cached := 0, 0
	for p := range r.prompts {
		prompt += len(r.prompts[p])
		cached += r.cachedTokens(p * max(r.n, 1))
	}
	completion := r.MaxTokens * r.Items
	b = append(b, `{"prompt_tokens":`...)
	b = appendInt(b, int64(prompt))
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, int64(prompt+completion))
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, int64(completion))
	if cached == 0 {
		return append(b, `,"prompt_tokens_details":null}`...)
	}
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, int64(cached))
	return append(b, "}}"...)
}
