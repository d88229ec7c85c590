package router

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// secretServerArgs are the members of an engine's /server_info (its
// server_args) that hold credentials. SGLang answers that route only to a
// caller holding --api-key when one is set; pdlb asks with upstream_auth's
// key and answers anyone its own server.api_key lets in, so it nulls them,
// as newer SGLang's public form of server_args does.
var secretServerArgs = map[string]bool{"api_key": true, "admin_api_key": true, "ssl_keyfile_password": true}

// redactServerInfo returns body with every top-level secret member's value
// null, its members in their order; body itself when none holds a value.
func redactServerInfo(body []byte) []byte {
	obj := gjson.ParseBytes(body)
	if !obj.IsObject() {
		return body
	}
	found := false
	obj.ForEach(func(k, v gjson.Result) bool {
		found = secretServerArgs[k.String()] && v.Type != gjson.Null
		return !found
	})
	if !found {
		return body
	}
	var out bytes.Buffer
	out.WriteByte('{')
	obj.ForEach(func(k, v gjson.Result) bool {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		out.WriteString(k.Raw)
		out.WriteByte(':')
		if secretServerArgs[k.String()] {
			out.WriteString("null")
		} else {
			out.WriteString(v.Raw)
		}
		return true
	})
	out.WriteByte('}')
	return out.Bytes()
}
