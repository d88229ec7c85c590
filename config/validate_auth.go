package config

import "strings"

// checkUpstreamAuth refuses a key that cannot travel in a header line:
// a control character (a newline would end the header, and what follows
// would be a header of the key's author's choosing), or space around it
// (servers trim it, so the engine would compare another key).
func (c *Config) checkUpstreamAuth() *Error {
	for _, k := range []struct{ key, val string }{
		{"upstream_auth.api_key", c.UpstreamAuth.APIKey},
		{"upstream_auth.admin_api_key", c.UpstreamAuth.AdminAPIKey},
	} {
		if strings.TrimSpace(k.val) != k.val {
			return errorf(k.key, "starts or ends with white space, which an engine never sees: remove it")
		}
		for _, r := range k.val {
			if r < 0x20 || r == 0x7f {
				return errorf(k.key, "holds a control character (a key travels in an HTTP header line)")
			}
			if r > 0x7e {
				// SGLang reads header values as latin-1: the bytes of a
				// UTF-8 key never equal its own copy of the key.
				return errorf(k.key, "holds a character beyond ASCII, which an engine never matches")
			}
		}
	}
	return nil
}
