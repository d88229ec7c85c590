package router

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"pdlb/proxy/proxytest"
)

func TestLogprobMergeNonStream(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"meta_info":{"input_token_logprobs":[[-0.1,1,null],[-0.2,2,null]]}}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"x","meta_info":{"id":"d","input_token_logprobs":[[-0.3,3,null]],"output_token_logprobs":[[-1,9,null]]}}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	_, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","return_logprob":true}`)
	want := `{"text":"x","meta_info":{"id":"d","input_token_logprobs":[[-0.1,1,null],[-0.2,2,null],[-0.3,3,null]],"output_token_logprobs":[[-1,9,null]]}}`
	if body != want {
		t.Fatalf("\n got %s\nwant %s", body, want)
	}
	// Without return_logprob the decode answer is untouched.
	_, body = proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if !strings.Contains(body, `"input_token_logprobs":[[-0.3,3,null]]`) {
		t.Fatalf("merged without return_logprob: %s", body)
	}
}

func TestLogprobMergeBatch(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `[{"meta_info":{"input_token_logprobs":[[-0.1,1,null]]}},{"meta_info":{"input_token_logprobs":[[-0.2,2,null]]}}]`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `[{"meta_info":{"input_token_logprobs":[[-0.3,3,null]]}},{"meta_info":{"input_token_logprobs":[]}}]`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	_, body := proxytest.Post(t, l.URL+"/generate", `{"text":["a","b"],"return_logprob":true}`)
	want := `[{"meta_info":{"input_token_logprobs":[[-0.1,1,null],[-0.3,3,null]]}},{"meta_info":{"input_token_logprobs":[[-0.2,2,null]]}}]`
	if body != want {
		t.Fatalf("\n got %s\nwant %s", body, want)
	}
}

func TestLogprobMergeStream(t *testing.T) {
	// The prefill streams its first event and then keeps going: only the
	// first event may be read before the decode relay starts.
	p := proxytest.NewEngine(t, sseEngine([]string{`{"meta_info":{"input_token_logprobs":[[-0.1,1,null]]}}`, `{"late":true}`}, 0, false))
	d := proxytest.NewEngine(t, sseEngine([]string{
		`{"text":"a","meta_info":{"input_token_logprobs":[[-0.3,3,null]]}}`,
		`{"text":"ab","meta_info":{"input_token_logprobs":[]}}`,
	}, 0, false))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi","stream":true,"return_logprob":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			break
		}
	}
	want := "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null],[-0.3,3,null]]}}\n\n" +
		"data: {\"text\":\"ab\",\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null]]}}\n\n" +
		"data: [DONE]\n\n"
	if sb.String() != want {
		t.Fatalf("\n got %q\nwant %q", sb.String(), want)
	}
}
