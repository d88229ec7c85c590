package mock

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Request is what the engine understood of one generation request. Hooks
// (Options.BeforeAnswer) receive it; its slices belong to the engine.
type Request struct {
	// Path is the route: "/generate", "/v1/chat/completions" or "/v1/completions".
	Path string
	// Body is the raw request body; valid only while the hook runs.
	Body []byte
	// Rid is the request id (the client's `rid`, else one the engine made up).
	// ItemRids are its items' (SGLang's naming), which /abort_request
	// takes; nil when the client sent none: then Rid.
	Rid      string
	ItemRids []string
	// Stream is true for `"stream": true`.
	Stream bool
	// Items is the number of answers: batch items (/generate), prompts × n (OpenAI); at least 1.
	Items int
	// Batch is true when /generate got a `text` list or an `input_ids` list of lists.
	Batch bool
	// BootstrapHosts, BootstrapPorts and BootstrapRooms hold the request's
	// bootstrap fields, one entry per item after SGLang's normalisation
	// (a scalar room r becomes r, r+1, …). A null or absent port is 0.
	BootstrapHosts []string
	BootstrapPorts []int
	BootstrapRooms []uint64
	// RoutedDPRank and PrefillDPRank are the request's routed_dp_rank and
	// disagg_prefill_dp_rank; nil when absent or null.
	RoutedDPRank, PrefillDPRank *int
	// ReturnLogprob is the truthiness of `return_logprob` (OpenAI: `logprobs`).
	ReturnLogprob bool
	// MaxTokens is the number of tokens to generate per item.
	MaxTokens int

	prompts      [][]int32 // token ids per prompt
	outputs      [][]int32 // output ids per item, made on first use (Engine.outputIDs)
	cached       []int     // per item: prompt tokens found in a KV cache (nil: none)
	best         []int     // per item: prefix any earlier request had (Options.Seen)
	hasRoom      bool
	includeUsage bool
	model        string
	n            int // OpenAI choices per prompt
}

// maxOutputTokens caps what one request may ask for, so a typo cannot pin the mock.
const maxOutputTokens = 1 << 16

// parseError is a malformed body: SGLang (FastAPI) answers 400.
type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }

// parseGenerate reads a /generate body (SGLang GenerateReqInput).
func (e *Engine) parseGenerate(body []byte) (*Request, error) {
	if !gjson.ValidBytes(body) {
		return nil, &parseError{"Invalid JSON body"}
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, &parseError{"Input should be a valid dictionary or object to extract fields from"}
	}
	r := &Request{Path: pathGenerate, Body: body}
	text, ids := root.Get("text"), root.Get("input_ids")
	switch {
	case text.IsArray():
		r.Batch = true
		for _, t := range text.Array() {
			r.prompts = append(r.prompts, tokenize(nil, t.String()))
		}
	case text.Exists() && text.Type != gjson.Null:
		r.prompts = append(r.prompts, tokenize(nil, text.String()))
	case ids.IsArray():
		items := ids.Array()
		if len(items) > 0 && items[0].IsArray() {
			r.Batch = true
			for _, it := range items {
				r.prompts = append(r.prompts, intList(it))
			}
		} else {
			r.prompts = append(r.prompts, intList(ids))
		}
	default:
		r.prompts = append(r.prompts, nil)
	}
	r.Items = max(len(r.prompts), 1)
	if len(r.prompts) == 0 {
		r.prompts = append(r.prompts, nil)
	}
	r.Stream = pydanticBool(lastMember(root, "stream"))
	r.ReturnLogprob = pydanticBool(lastMember(root, "return_logprob"))
	r.MaxTokens = e.maxTokens(root.Get("sampling_params.max_new_tokens"))
	r.Rid = firstString(root.Get("rid"))
	r.ItemRids = itemRids(root.Get("rid"), r.Items, r.Batch)
	e.readBootstrap(r, root)
	return r, nil
}

// parseOpenAI reads a /v1/chat/completions or /v1/completions body.
func (e *Engine) parseOpenAI(path string, body []byte) (*Request, error) {
	if !gjson.ValidBytes(body) {
		return nil, &parseError{"Invalid JSON body"}
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, &parseError{"Input should be a valid dictionary or object to extract fields from"}
	}
	r := &Request{Path: path, Body: body}
	if path == pathChat {
		r.prompts = append(r.prompts, chatTokens(root.Get("messages")))
		mt := root.Get("max_completion_tokens")
		if !mt.Exists() || mt.Type == gjson.Null {
			mt = root.Get("max_tokens")
		}
		r.MaxTokens = e.maxTokens(mt)
	} else {
		p := root.Get("prompt")
		switch {
		case p.IsArray():
			items := p.Array()
			switch {
			case len(items) > 0 && items[0].IsArray():
				for _, it := range items {
					r.prompts = append(r.prompts, intList(it))
				}
			case len(items) > 0 && items[0].Type == gjson.Number:
				r.prompts = append(r.prompts, intList(p))
			default:
				for _, it := range items {
					r.prompts = append(r.prompts, tokenize(nil, it.String()))
				}
			}
		default:
			r.prompts = append(r.prompts, tokenize(nil, p.String()))
		}
		if len(r.prompts) == 0 {
			r.prompts = append(r.prompts, nil)
		}
		r.MaxTokens = e.maxTokens(root.Get("max_tokens"))
	}
	r.n = 1
	if n := root.Get("n"); n.Type == gjson.Number && n.Int() > 1 {
		r.n = int(min(n.Int(), 128))
	}
	r.Items = len(r.prompts) * r.n
	r.Stream = pydanticBool(lastMember(root, "stream"))
	r.includeUsage = root.Get("stream_options.include_usage").Bool()
	r.ReturnLogprob = root.Get("logprobs").Bool()
	r.model = root.Get("model").String()
	r.Rid = firstString(root.Get("rid"))
	r.ItemRids = itemRids(root.Get("rid"), r.Items, r.Items > 1)
	e.readBootstrap(r, root)
	return r, nil
}

// chatTokens renders the messages in order as "<role>: <content>" words (a
// chat template's part that matters for prefixes: the same conversation so
// far is the same token prefix) and tokenizes them; content given as parts
// contributes its text parts.
func chatTokens(messages gjson.Result) []int32 {
	var ids []int32
	messages.ForEach(func(_, m gjson.Result) bool {
		ids = tokenize(ids, m.Get("role").String()+":")
		c := m.Get("content")
		if c.IsArray() {
			c.ForEach(func(_, part gjson.Result) bool {
				ids = tokenize(ids, part.Get("text").String())
				return true
			})
		} else {
			ids = tokenize(ids, c.String())
		}
		return true
	})
	return ids
}

// readBootstrap fills the bootstrap fields, normalised to one entry per item
// the way SGLang's _normalize_bootstrap_params does. Rooms are parsed from the
// raw bytes: they reach 2^63-1 and must never pass through a float64.
func (e *Engine) readBootstrap(r *Request, root gjson.Result) {
	room := root.Get("bootstrap_room")
	switch {
	case room.IsArray():
		r.hasRoom = true
		for _, v := range room.Array() {
			u, _ := strconv.ParseUint(v.Raw, 10, 64)
			r.BootstrapRooms = append(r.BootstrapRooms, u)
		}
	case room.Type == gjson.Number:
		r.hasRoom = true
		u, _ := strconv.ParseUint(room.Raw, 10, 64)
		for i := 0; i < r.Items; i++ {
			r.BootstrapRooms = append(r.BootstrapRooms, u+uint64(i))
		}
	}
	host := root.Get("bootstrap_host")
	if host.IsArray() {
		for _, v := range host.Array() {
			r.BootstrapHosts = append(r.BootstrapHosts, v.String())
		}
	} else if host.Type == gjson.String {
		for i := 0; i < r.Items; i++ {
			r.BootstrapHosts = append(r.BootstrapHosts, host.Str)
		}
	}
	r.RoutedDPRank = optInt(root.Get("routed_dp_rank"))
	r.PrefillDPRank = optInt(root.Get("disagg_prefill_dp_rank"))
	port := root.Get("bootstrap_port")
	if port.IsArray() {
		for _, v := range port.Array() {
			r.BootstrapPorts = append(r.BootstrapPorts, int(v.Int()))
		}
	} else if port.Exists() {
		for i := 0; i < r.Items; i++ {
			r.BootstrapPorts = append(r.BootstrapPorts, int(port.Int()))
		}
	}
}

// maxTokens is the request's output length: its own limit, else Options.OutputLen;
// a prefill engine always produces one token, as SGLang's does.
func (e *Engine) maxTokens(v gjson.Result) int {
	if e.opts.Role == RolePrefill {
		return 1
	}
	if v.Type == gjson.Number {
		return int(min(max(v.Int(), 0), maxOutputTokens))
	}
	return e.opts.OutputLen
}

// optInt reads an optional integer; anything but a number is "absent".
// lastMember is the last member named key of a JSON object: Python's json,
// which SGLang reads bodies with, keeps the last of duplicate keys (gjson's
// Get returns the first).
func lastMember(obj gjson.Result, key string) gjson.Result {
	var last gjson.Result
	obj.ForEach(func(k, v gjson.Result) bool {
		if k.Str == key {
			last = v
		}
		return true
	})
	return last
}

// pydanticBool reads a boolean field as SGLang's request models do
// (pydantic in lax mode): true, 1 and 1.0, and the strings "1", "t", "y",
// "on", "yes", "true" in any case, are true; a list (return_logprob per
// item) is true when any item is; anything else reads as false here
// (pydantic refuses what is neither, which pdlb refuses before).
func pydanticBool(v gjson.Result) bool {
	if v.IsArray() {
		anyTrue := false
		v.ForEach(func(_, item gjson.Result) bool { anyTrue = pydanticBool(item); return !anyTrue })
		return anyTrue
	}
	switch v.Type {
	case gjson.True:
		return true
	case gjson.Number:
		return v.Float() == 1
	case gjson.String:
		switch strings.ToLower(v.Str) {
		case "1", "t", "y", "on", "yes", "true":
			return true
		}
	}
	return false
}

func optInt(v gjson.Result) *int {
	if v.Type != gjson.Number {
		return nil
	}
	n := int(v.Int())
	return &n
}

func intList(v gjson.Result) []int32 {
	var ids []int32
	v.ForEach(func(_, x gjson.Result) bool {
		ids = append(ids, int32(x.Int()))
		return true
	})
	return ids
}

// itemRids names the items of a request as SGLang's _normalize_rid does:
// a list gives each item its own, one string on a batch becomes
// "<rid>_<i>"; nil when the client sent none.
func itemRids(v gjson.Result, items int, batch bool) []string {
	switch {
	case v.IsArray():
		var out []string
		for _, x := range v.Array() {
			out = append(out, x.String())
		}
		return out
	case v.Type != gjson.String:
		return nil
	case !batch:
		return []string{v.Str}
	}
	out := make([]string, items)
	for i := range out {
		out[i] = v.Str + "_" + strconv.Itoa(i)
	}
	return out
}

func firstString(v gjson.Result) string {
	if v.IsArray() {
		return v.Get("0").String()
	}
	if v.Type == gjson.String {
		return v.Str
	}
	return ""
}

// prompt is item i's prompt: OpenAI choices share their prompt.
func (r *Request) prompt(i int) []int32 {
	if r.n > 1 {
		i /= r.n
	}
	if i < len(r.prompts) {
		return r.prompts[i]
	}
	return nil
}

// promptTokens is the number of prompt tokens of item i.
func (r *Request) promptTokens(i int) int { return len(r.prompt(i)) }

// itemTokens is the number of prompt tokens over all items.
func (r *Request) itemTokens() int {
	t := 0
	for i := 0; i < r.Items; i++ {
		t += r.promptTokens(i)
	}
	return t
}

// cachedTokens is the number of item i's prompt tokens a KV cache held:
// SGLang's meta_info.cached_tokens.
func (r *Request) cachedTokens(i int) int {
	if i < len(r.cached) {
		return r.cached[i]
	}
	return 0
}

func (r *Request) setCached(i, n int) {
	if r.cached == nil {
		r.cached = make([]int, r.Items)
	}
	if i < len(r.cached) {
		r.cached[i] = n
	}
}

// totalPromptTokens is the number of prompt tokens the engine must prefill.
func (r *Request) totalPromptTokens() int {
	t := 0
	for _, p := range r.prompts {
		t += len(p)
	}
	return t
}
