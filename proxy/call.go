package proxy

import (
	"time"

	"github.com/valyala/fasthttp"
)

// CallResult is a backend's answer to a plain request.
type CallResult struct {
	Status      int
	ContentType []byte
	Body        []byte
}

// Call sends one plain request (info, broadcast and health routes: not the
// PD path, so no leg machinery) and reads the whole answer.
func (b *Backend) Call(method, path string, body []byte, timeout time.Duration) (CallResult, error) {
	return b.call(method, path, body, timeout, b.auth.authorization(path))
}

// CallAsAdmin is Call with upstream_auth's admin key (api_key when none),
// for an admin route an operator asked for on pdlb's admin listener: the
// key a client of the serving listener is never lent.
func (b *Backend) CallAsAdmin(method, path string, body []byte, timeout time.Duration) (CallResult, error) {
	return b.call(method, path, body, timeout, b.auth.adminAuthorization())
}

func (b *Backend) call(method, path string, body []byte, timeout time.Duration, auth string) (CallResult, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(b.URL + path)
	if auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, auth)
	}
	if body != nil {
		req.Header.SetContentTypeBytes(contentTypeJSON)
		req.SetBodyRaw(body)
	}
	if err := b.plain.DoTimeout(req, resp, timeout); err != nil {
		if herr := b.refused.Swap(nil); herr != nil {
			err = herr
		}
		return CallResult{}, &UpstreamError{Backend: b, Kind: callKind(err), Err: err}
	}
	return CallResult{
		Status:      resp.StatusCode(),
		ContentType: append([]byte(nil), resp.Header.ContentType()...),
		Body:        append([]byte(nil), resp.Body()...),
	}, nil
}

var contentTypeJSON = []byte("application/json")

func callKind(err error) Kind {
	if err == fasthttp.ErrTimeout {
		return KindTimeout
	}
	return KindConnect
}
