package router

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
)

func TestRedactServerInfo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model_path":"m","api_key":"k1","tp_size":2,"admin_api_key":"a","x":{"api_key":"nested stays"}}`,
			`{"model_path":"m","api_key":null,"tp_size":2,"admin_api_key":null,"x":{"api_key":"nested stays"}}`},
		{`{"api_key":null,"admin_api_key":null}`, `{"api_key":null,"admin_api_key":null}`},
		{`{"ssl_keyfile_password":"p"}`, `{"ssl_keyfile_password":null}`},
		{`{"a":1}`, `{"a":1}`},
		{`[1,2]`, `[1,2]`},
		{`not json`, `not json`},
	} {
		if got := string(redactServerInfo([]byte(tc.in))); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	if redactServerInfo(nil) != nil {
		t.Error("nil body grew")
	}
}

// Whatever an engine answers, a valid JSON object comes out valid, with no
// secret member holding a value.
func FuzzRedactServerInfo(f *testing.F) {
	f.Add([]byte(`{"api_key":"k","b":[1,{"c":"d"}],"admin_api_key":"x"}`))
	f.Add([]byte(`{ "api_key" : "k" , "\u0061pi_key":"escaped" }`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out := redactServerInfo(body)
		if !json.Valid(body) || !gjson.ParseBytes(body).IsObject() {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%s became invalid: %s", body, out)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		for k := range secretServerArgs {
			if v, ok := m[k]; ok && v != nil {
				t.Fatalf("%s: %s still holds %v", out, k, v)
			}
		}
	})
}
