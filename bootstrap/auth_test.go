package bootstrap

import (
	"testing"

	"pdlb/config"
)

func TestWriteAuth(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{AuthToken: "s3cret"})
	put := rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)
	for _, h := range [][]string{
		nil,
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Bearer s3cret-and-more"},
		{"Authorization", "s3cret"},
		{"Authorization", "Basic s3cret"},
		{"Authorization", "Bearer "},
	} {
		r := e.do(t, "PUT", "/route", put, h...)
		mustStatus(t, "PUT without token", r, 401)
		mustContain(t, "401 body", r.body, `"code":401`, "auth_token")
		mustStatus(t, "POST register_dp_rank", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":1,"dp_rank":0}`, h...), 401)
		mustStatus(t, "DELETE", e.do(t, "DELETE", "/route", "", h...), 401)
	}
	if reg, _ := e.reg.Status(e.addr); reg != 0 {
		t.Fatal("an unauthorised PUT was stored")
	}
	// GETs and the read-only POST stay open.
	mustStatus(t, "GET sentinel", e.do(t, "GET", sentinelPath, ""), 503)
	mustStatus(t, "GET health", e.do(t, "GET", "/health", ""), 200)
	mustStatus(t, "query_dp_ranks", e.do(t, "POST", "/query_dp_ranks", `{"bootstrap_rooms":[1]}`), 200)

	ok := []string{"Authorization", "Bearer s3cret"}
	mustStatus(t, "PUT with token", e.do(t, "PUT", "/route", put, ok...), 200)
	mustStatus(t, "GET ready", e.do(t, "GET", sentinelPath, ""), 200)
	mustStatus(t, "POST with token", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":1,"dp_rank":0}`, "Authorization", "bearer  s3cret "), 200)
	mustStatus(t, "DELETE with token", e.do(t, "DELETE", "/route", "", ok...), 200)
	mustStatus(t, "GET after delete", e.do(t, "GET", sentinelPath, ""), 503)
}

func TestNoTokenMeansOpenWrites(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "h", 1, nil), "Authorization", "Bearer whatever"), 200)
}
