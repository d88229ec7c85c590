package load

import "github.com/tidwall/gjson"

// usage is what one answer says about its tokens.
type usage struct {
	completion int64
	prompt     int64 // 0 when the answer does not say
	cached     int64
	hasCached  bool // the answer carried a cached-token count (0 included)
}

// answerUsage reads the token counts of an SGLang answer (meta_info.completion_tokens,
// prompt_tokens, cached_tokens) or, when it has no meta_info, an OpenAI one
// (usage.completion_tokens, prompt_tokens, prompt_tokens_details.cached_tokens). Each
// object is found once and walked once: every answer pays this on the generator's path.
func answerUsage(b []byte) usage {
	var u usage
	if meta := gjson.GetBytes(b, "meta_info"); meta.IsObject() {
		meta.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "completion_tokens":
				u.completion = v.Int()
			case "prompt_tokens":
				u.prompt = v.Int()
			case "cached_tokens":
				u.cached, u.hasCached = v.Int(), true
			}
			return true
		})
		return u
	}
	gjson.GetBytes(b, "usage").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "completion_tokens":
			u.completion = v.Int()
		case "prompt_tokens":
			u.prompt = v.Int()
		case "prompt_tokens_details":
			if c := v.Get("cached_tokens"); c.Exists() {
				u.cached, u.hasCached = c.Int(), true
			}
		}
		return true
	})
	return u
}
