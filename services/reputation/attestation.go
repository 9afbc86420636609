package reputation

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/mesh"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

// TokenType is the JOSE "typ" of an attestation: never a mesh token or a
// depth token, though the mesh key signs all three.
const TokenType = "toolmesh-reputation+jwt"

// Extension is the URI of the A2A card extension that carries an agent's
// attestation (the card_extension option of reputation_get_attestation).
const Extension = "https://github.com/toolmesh/toolmesh/a2a/ext/reputation/v1"

// Attestation lifetimes.
const (
	// DefaultTTL is how long an attestation is valid when the request
	// says nothing; MaxTTL is the most it may ask for.
	DefaultTTL = 24 * time.Hour
	MaxTTL     = 30 * 24 * time.Hour
	// DefaultMaxAge is the oldest attestation Verify accepts when the
	// request says nothing.
	DefaultMaxAge = 7 * 24 * time.Hour
	// leeway absorbs clock skew between meshes.
	leeway = time.Minute
	// maxJWSLen bounds an attestation read from elsewhere.
	maxJWSLen = 64 << 10
)

// statement is the signed payload of an attestation (docs/reputation.md).
type statement struct {
	Issuer     string `json:"iss"`
	Subject    string `json:"sub"`
	IssuedAt   int64  `json:"iat"`
	Expiry     int64  `json:"exp"`
	Reputation claim  `json:"reputation"`
}

type claim struct {
	Formula         string          `json:"formula"`
	Score           int32           `json:"score"`
	Components      componentsClaim `json:"components"`
	Window          windowClaim     `json:"window"`
	AuditHead       headClaim       `json:"audit_head"`
	AuditCheckpoint checkpointClaim `json:"audit_checkpoint"`
}

type componentsClaim struct {
	AdminCalls  int64 `json:"admin_calls"`
	Replays     int64 `json:"replays"`
	ActiveDays  int32 `json:"active_days"`
	Tools       int32 `json:"tools"`
	RecordsRead int64 `json:"records_read"`
	Truncated   bool  `json:"truncated"`
}

type windowClaim struct {
	Since string `json:"since"`
	Until string `json:"until"`
	Days  int32  `json:"days"`
}

type headClaim struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

type checkpointClaim struct {
	Origin string `json:"origin"`
	Seq    int64  `json:"seq"`
	Hash   string `json:"hash"`
	Time   string `json:"time"`
	Note   string `json:"note"`
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(ts *timestamppb.Timestamp) string { return ts.AsTime().UTC().Format(timeLayout) }

func parseTime(s string) *timestamppb.Timestamp {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return timestamppb.New(t)
}

func toStatement(a *reputationv1.Attestation) statement {
	sc, cp := a.GetScore(), a.GetCheckpoint()
	c := sc.GetComponents()
	return statement{
		Issuer:   a.GetIssuer(),
		Subject:  a.GetAgentId(),
		IssuedAt: a.GetIssuedAt().AsTime().Unix(),
		Expiry:   a.GetExpiresAt().AsTime().Unix(),
		Reputation: claim{
			Formula: sc.GetFormula(),
			Score:   sc.GetScore(),
			Components: componentsClaim{AdminCalls: c.GetAdminCalls(), Replays: c.GetReplays(), ActiveDays: c.GetActiveDays(),
				Tools: c.GetTools(), RecordsRead: c.GetRecordsRead(), Truncated: c.GetTruncated()},
			Window:          windowClaim{Since: formatTime(sc.GetWindow().GetSince()), Until: formatTime(sc.GetWindow().GetUntil()), Days: sc.GetWindow().GetDays()},
			AuditHead:       headClaim{Seq: sc.GetHead().GetSeq(), Hash: sc.GetHead().GetHash()},
			AuditCheckpoint: checkpointClaim{Origin: cp.GetOrigin(), Seq: cp.GetSeq(), Hash: cp.GetHash(), Time: formatTime(cp.GetTime()), Note: cp.GetNote()},
		},
	}
}

func (st statement) attestation() *reputationv1.Attestation {
	r := st.Reputation
	c := r.Components
	return &reputationv1.Attestation{
		AgentId: st.Subject,
		Issuer:  st.Issuer,
		Score: &reputationv1.Score{
			AgentId: st.Subject,
			Score:   r.Score,
			Formula: r.Formula,
			Components: &reputationv1.Components{AdminCalls: c.AdminCalls, Replays: c.Replays, ActiveDays: c.ActiveDays, Tools: c.Tools,
				RecordsRead: c.RecordsRead, Truncated: c.Truncated},
			Window: &reputationv1.Window{Since: parseTime(r.Window.Since), Until: parseTime(r.Window.Until), Days: r.Window.Days},
			Head:   &reputationv1.AuditHead{Seq: r.AuditHead.Seq, Hash: r.AuditHead.Hash},
		},
		Checkpoint: &reputationv1.AuditCheckpoint{Origin: r.AuditCheckpoint.Origin, Seq: r.AuditCheckpoint.Seq, Hash: r.AuditCheckpoint.Hash,
			Time: parseTime(r.AuditCheckpoint.Time), Note: r.AuditCheckpoint.Note},
		IssuedAt:  timestamppb.New(time.Unix(st.IssuedAt, 0)),
		ExpiresAt: timestamppb.New(time.Unix(st.Expiry, 0)),
	}
}

// Signer signs attestations with the mesh key, naming the mesh's A2A base
// URL as their issuer: the key's public half is what the mesh publishes
// there, at /.well-known/jwks.json.
type Signer struct {
	issuer string
	kid    string
	signer jose.Signer
}

// NewSigner returns a signer of attestations issued by issuer (the mesh's
// A2A base URL) with key (the mesh key).
func NewSigner(key ed25519.PrivateKey, issuer string) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("attestation signing key: not an Ed25519 private key")
	}
	issuer = strings.TrimRight(issuer, "/")
	if err := checkIssuer(issuer); err != nil {
		return nil, fmt.Errorf("attestation issuer %q: %w", issuer, err)
	}
	kid := mesh.KeyID(key.Public().(ed25519.PublicKey))
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{}).WithType(TokenType).WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return nil, fmt.Errorf("attestation signing key: %w", err)
	}
	return &Signer{issuer: issuer, kid: kid, signer: s}, nil
}

// Issuer is the issuer the signer's attestations name.
func (s *Signer) Issuer() string { return s.issuer }

// Sign fills in a's issuer and key id and signs it: a.jws is set to the
// statement as signed.
func (s *Signer) Sign(a *reputationv1.Attestation) error {
	a.Issuer, a.KeyId = s.issuer, s.kid
	payload, err := json.Marshal(toStatement(a))
	if err != nil {
		return fmt.Errorf("encode attestation: %w", err)
	}
	sig, err := s.signer.Sign(payload)
	if err != nil {
		return fmt.Errorf("sign attestation: %w", err)
	}
	if a.Jws, err = sig.CompactSerialize(); err != nil {
		return fmt.Errorf("sign attestation: %w", err)
	}
	return nil
}

// checkIssuer accepts an http(s) base URL without user info, query or
// fragment.
func checkIssuer(issuer string) error {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("not an http or https base URL")
	}
	return nil
}

// origin is scheme://host[:port] of an http(s) URL, lower-cased.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// parsed is an attestation read but not yet verified.
type parsed struct {
	sig *jose.JSONWebSignature
	kid string
	st  statement
}

// parse reads a compact JWS as an attestation, checking its form but not
// its signature.
func parse(jws string) (parsed, error) {
	if len(jws) > maxJWSLen {
		return parsed{}, fmt.Errorf("the attestation is longer than %d bytes", maxJWSLen)
	}
	sig, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil || len(sig.Signatures) != 1 {
		return parsed{}, errors.New("the attestation is not a compact JWS signed with EdDSA")
	}
	h := sig.Signatures[0].Protected
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != TokenType {
		return parsed{}, fmt.Errorf("the attestation has type %q, want %q", typ, TokenType)
	}
	var st statement
	if err := json.Unmarshal(sig.UnsafePayloadWithoutVerification(), &st); err != nil {
		return parsed{}, errors.New("the attestation's statement is not JSON of the attestation format")
	}
	st.Issuer = strings.TrimRight(st.Issuer, "/")
	if err := checkIssuer(st.Issuer); err != nil {
		return parsed{}, fmt.Errorf("the attestation's issuer is %s", err)
	}
	if st.Subject == "" || st.IssuedAt == 0 || st.Expiry == 0 {
		return parsed{}, errors.New("the attestation names no agent, issue time or expiry")
	}
	return parsed{sig: sig, kid: h.KeyID, st: st}, nil
}

// verifySignature checks p's signature with the key of its kid in set, the
// keys its issuer publishes.
func (p parsed) verifySignature(set jose.JSONWebKeySet) error {
	keys := set.Key(p.kid)
	if len(keys) == 0 {
		return fmt.Errorf("the attestation is signed with a key (kid %q) that its issuer %s does not publish: forged or re-signed", p.kid, p.st.Issuer)
	}
	pub, ok := keys[0].Key.(ed25519.PublicKey)
	if !ok {
		return fmt.Errorf("the issuer's key %q is not an Ed25519 public key", p.kid)
	}
	if _, err := p.sig.Verify(pub); err != nil {
		return fmt.Errorf("the attestation's signature does not verify with the issuer's key %q: it was altered or forged", p.kid)
	}
	return nil
}

// freshness says why p is not fresh at now, or "" when it is: not expired,
// not issued in the future, issued at most maxAge ago, and living no
// longer than MaxTTL.
func (p parsed) freshness(now time.Time, maxAge time.Duration) string {
	iat, exp := time.Unix(p.st.IssuedAt, 0), time.Unix(p.st.Expiry, 0)
	switch {
	case !now.Before(exp.Add(leeway)):
		return fmt.Sprintf("the attestation expired at %s", exp.UTC().Format(time.RFC3339))
	case iat.After(now.Add(leeway)):
		return fmt.Sprintf("the attestation claims to be issued in the future (%s)", iat.UTC().Format(time.RFC3339))
	case now.Sub(iat) > maxAge:
		return fmt.Sprintf("the attestation was issued at %s, more than %s ago", iat.UTC().Format(time.RFC3339), maxAge)
	case exp.Sub(iat) > MaxTTL:
		return fmt.Sprintf("the attestation claims to be valid for %s, longer than %s", exp.Sub(iat), MaxTTL)
	}
	return ""
}

// checkpointForm says why p's audit checkpoint is not, on its face, a
// signed checkpoint that matches it, or "" when it is: the note's text
// lines name the same origin, seq and hash, it carries the origin's
// signature line, and it lies at or before the audit head. The signature
// itself is checked by Service.checkpointProblem.
func (p parsed) checkpointForm() string {
	cp := p.st.Reputation.AuditCheckpoint
	if cp.Note == "" {
		return "the attestation names no signed audit checkpoint"
	}
	if !strings.HasPrefix(cp.Origin, auditcheckpoint.Name+"/") {
		return fmt.Sprintf("the attestation's audit checkpoint has origin %q, not a toolmesh audit key", cp.Origin)
	}
	text, sigs, ok := strings.Cut(cp.Note, "\n\n")
	lines := strings.Split(text, "\n")
	if !ok || len(lines) < 3 || lines[0] != cp.Origin || lines[1] != strconv.FormatInt(cp.Seq, 10) || lines[2] != cp.Hash {
		return "the attestation's audit checkpoint note does not name the checkpoint it claims (origin, seq, hash)"
	}
	if !strings.HasPrefix(sigs, "— "+cp.Origin+" ") {
		return "the attestation's audit checkpoint note carries no signature by its origin"
	}
	if cp.Seq > p.st.Reputation.AuditHead.Seq {
		return "the attestation's audit checkpoint lies beyond the audit head it was computed at"
	}
	return ""
}
