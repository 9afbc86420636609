package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "toolmesh_console"

// session is what the session cookie carries, sealed (AES-GCM): the
// browser can neither read nor change it.
type session struct {
	// ID is random per sign-in; the CSRF token is derived from it, so a
	// token of another session does not fit this one.
	ID     string `json:"id"`
	Person person `json:"-"`
	// Expires is when the sign-in ends (Unix seconds).
	Expires int64 `json:"exp"`

	Subject string `json:"sub"`
	Owner   bool   `json:"own,omitempty"`
	Token   string `json:"tok,omitempty"`
	// TokenExpires is when Token expires (Unix seconds; 0: not said), and
	// Refresh the issuer's refresh token that renews it ("" when the
	// issuer gave none: the session then ends with its token). Both live
	// only in the sealed cookie.
	TokenExpires int64  `json:"texp,omitempty"`
	Refresh      string `json:"rt,omitempty"`
}

// sessions seals, opens and checks session cookies.
type sessions struct {
	aead    cipher.AEAD
	csrfKey []byte
	ttl     time.Duration
	now     func() time.Time
}

func newSessions(key []byte, ttl time.Duration) (*sessions, error) {
	if len(key) < 32 {
		return nil, errors.New("console: the session key must be at least 32 bytes")
	}
	sealKey := derive(key, "toolmesh console session cookie")
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sessions{aead: aead, csrfKey: derive(key, "toolmesh console csrf"), ttl: ttl, now: time.Now}, nil
}

// derive is a key for one purpose from the session key.
func derive(key []byte, purpose string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// start begins a session for p.
func (s *sessions) start(p person) *session {
	return &session{ID: rand.Text(), Person: p, Subject: p.Subject, Owner: p.Owner, Token: p.token,
		Expires: s.now().Add(s.ttl).Unix()}
}

// write sets the session cookie: HttpOnly, SameSite=Strict, Secure on TLS.
func (s *sessions) write(w http.ResponseWriter, r *http.Request, sess *session) {
	b, _ := json.Marshal(sess)
	maxAge := int(time.Until(time.Unix(sess.Expires, 0)) / time.Second)
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    s.seal(cookieName, b),
		Path:     "/",
		MaxAge:   max(maxAge, 1),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

// read opens the request's session: nil when there is none, it was not
// sealed with this key, or it expired.
func (s *sessions) read(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	b := s.open(cookieName, ck.Value)
	if b == nil {
		return nil
	}
	var sess session
	if json.Unmarshal(b, &sess) != nil || sess.ID == "" || s.now().Unix() >= sess.Expires {
		return nil
	}
	sess.Person = person{Subject: sess.Subject, Owner: sess.Owner, token: sess.Token}
	return &sess
}

// seal encrypts and signs b for the cookie name.
func (s *sessions) seal(name string, b []byte) string {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, b, []byte(name)))
}

// open is what seal sealed for the cookie name: nil when value was not
// sealed with this key for that name.
func (s *sessions) open(name, value string) []byte {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	n := s.aead.NonceSize()
	if err != nil || len(raw) < n {
		return nil
	}
	b, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(name))
	if err != nil {
		return nil
	}
	return b
}

// csrf is the CSRF token of sess's forms.
func (s *sessions) csrf(sess *session) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(sess.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfValid reports whether token is sess's CSRF token.
func (s *sessions) csrfValid(sess *session, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(s.csrf(sess)))
}
