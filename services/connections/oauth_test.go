package connections_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/connections"
)

// TestGitHubRefresher refreshes against a fake GitHub token endpoint: the
// refresh_token grant with the app's client, the new pair and expiry read
// back; GitHub's bad_refresh_token (answered with 200, as GitHub does) is
// ErrRefreshRefused, anything else is not.
func TestGitHubRefresher(t *testing.T) {
	var got []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = append(got, r.URL.Path+" "+r.Form.Get("grant_type")+" "+r.Form.Get("refresh_token")+" "+r.Form.Get("client_id")+" "+r.Form.Get("client_secret"))
		w.Header().Set("Content-Type", "application/json")
		switch r.Form.Get("refresh_token") {
		case "ghr_good":
			_, _ = w.Write([]byte(`{"access_token":"ghu_new","refresh_token":"ghr_next","expires_in":28800,"refresh_token_expires_in":15897600,"token_type":"bearer","scope":""}`))
		case "ghr_used":
			_, _ = w.Write([]byte(`{"error":"bad_refresh_token","error_description":"The refresh token passed is incorrect or expired."}`))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(fake.Close)
	r := connections.GitHubRefresher(fake.URL+"/", "Iv1.client", "client-secret", fake.Client())
	before := time.Now()
	tok, err := r.Refresh(context.Background(), "ghr_good")
	if err != nil || tok.Access != "ghu_new" || tok.Refresh != "ghr_next" || tok.Expire.Before(before.Add(7*time.Hour)) {
		t.Fatalf("Refresh = %+v, %v", tok, err)
	}
	if got[0] != "/login/oauth/access_token refresh_token ghr_good Iv1.client client-secret" {
		t.Errorf("the token endpoint got %q", got[0])
	}
	if _, err := r.Refresh(context.Background(), "ghr_used"); !errors.Is(err, connections.ErrRefreshRefused) {
		t.Errorf("a used refresh token: %v, want ErrRefreshRefused", err)
	}
	_, err = r.Refresh(context.Background(), "ghr_unlucky")
	if err == nil || errors.Is(err, connections.ErrRefreshRefused) || strings.Contains(err.Error(), "ghr_unlucky") {
		t.Errorf("a token endpoint down: %v, want a transient error that does not repeat the token", err)
	}
}
