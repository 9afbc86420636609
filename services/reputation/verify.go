package reputation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/egress"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

// Paths below a mesh's A2A base URL (as internal/a2alink and
// internal/auditcheckpoint name them): its mesh keys, which sign
// attestations, and its audit checkpoint keys, which sign the checkpoints
// attestations name.
const (
	keysPath      = "/.well-known/jwks.json"
	auditKeysPath = auditcheckpoint.KeysPath
	cardPath      = "/.well-known/agent-card.json"
)

// Limits of what Verify reads from elsewhere.
const (
	maxFetchBytes = 256 << 10
	fetchTimeout  = 10 * time.Second
)

// fetcher reads cards, attestations and keys through the egress guard.
type fetcher struct {
	client *http.Client
}

func newFetcher(policy egress.Policy) *fetcher {
	return &fetcher{client: policy.Client(egress.ClientOptions{Timeout: fetchTimeout, MaxResponseBytes: maxFetchBytes})}
}

// get reads the JSON document at raw into v.
func (f *fetcher) get(ctx context.Context, raw string, v any) error {
	body, err := f.read(ctx, raw, "application/json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errors.New("it is not the JSON expected")
	}
	return nil
}

// read reads the document at raw, asking for the media type accept.
func (f *fetcher) read(ctx context.Context, raw, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	req.Header.Set("Accept", accept)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, errors.New(egress.DescribeError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("it answered %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, errors.New(egress.DescribeError(err))
	}
	return body, nil
}

// document is what Verify reads at a URL: an agent card, or an attestation
// as this service publishes it (PublicHandler).
type document struct {
	// An attestation's.
	JWS string `json:"jws"`
	// A card's.
	Capabilities *struct {
		Extensions []struct {
			URI    string          `json:"uri"`
			Params json.RawMessage `json:"params"`
		} `json:"extensions"`
	} `json:"capabilities"`
}

// extensionParams are the reputation extension's params on a card: the
// answer of reputation_get_attestation ({"attestation": {...}}), or the
// attestation itself.
type extensionParams struct {
	JWS         string `json:"jws"`
	URL         string `json:"url"`
	Attestation *struct {
		JWS string `json:"jws"`
		URL string `json:"url"`
	} `json:"attestation"`
}

// Verify implements reputation_verify.
func (s *Service) Verify(ctx context.Context, req *reputationv1.VerifyRequest) (*reputationv1.VerifyResponse, error) {
	maxAge := DefaultMaxAge
	if req.GetMaxAgeHours() > 0 {
		maxAge = time.Duration(req.GetMaxAgeHours()) * time.Hour
	}
	res := &reputationv1.VerifyResponse{}
	fail := func(format string, args ...any) (*reputationv1.VerifyResponse, error) {
		res.Reasons = append(res.Reasons, fmt.Sprintf(format, args...))
		return res, nil
	}
	jws, cardURL, err := s.locate(ctx, req.GetUrl(), res)
	if err != nil {
		return fail("%s", err)
	}
	p, err := parse(jws)
	if err != nil {
		return fail("%s", err)
	}
	res.Attestation = p.st.attestation()
	res.Attestation.KeyId, res.Attestation.Jws = p.kid, jws

	var set jose.JSONWebKeySet
	if err := s.fetch.get(ctx, p.st.Issuer+keysPath, &set); err != nil {
		res.Reasons = append(res.Reasons, fmt.Sprintf("the issuer's keys (%s%s) could not be read: %s", p.st.Issuer, keysPath, err))
	} else if err := p.verifySignature(set); err != nil {
		res.Reasons = append(res.Reasons, err.Error())
	} else {
		res.SignatureValid = true
	}
	if cardURL == "" {
		res.Reasons = append(res.Reasons, "no agent card was read (the URL is the attestation's): the attestation is bound to no card")
	} else if reason := cardBinding(p, cardURL); reason != "" {
		res.Reasons = append(res.Reasons, reason)
	} else {
		res.IssuerMatchesCard = true
	}
	if reason := p.freshness(s.now(), maxAge); reason != "" {
		res.Reasons = append(res.Reasons, reason)
	} else {
		res.Fresh = true
	}
	if reason := s.checkpointProblem(ctx, p); reason != "" {
		res.Reasons = append(res.Reasons, reason)
	} else {
		res.CheckpointSigned = true
	}
	res.Verified = res.SignatureValid && res.Fresh && res.CheckpointSigned &&
		(res.IssuerMatchesCard || res.Source == reputationv1.Source_SOURCE_ATTESTATION_URL)
	return res, nil
}

// locate finds the attestation raw names: an attestation document itself,
// or a card (at raw, or at raw's card path) whose reputation extension
// carries it or names its URL. It sets res.Source and returns the URL of
// the card read ("" when none).
func (s *Service) locate(ctx context.Context, raw string, res *reputationv1.VerifyResponse) (jws, cardURL string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", "", errors.New("the URL must be an http or https URL without user info")
	}
	var doc document
	firstErr := s.fetch.get(ctx, raw, &doc)
	if firstErr == nil && doc.JWS != "" {
		res.Source = reputationv1.Source_SOURCE_ATTESTATION_URL
		return doc.JWS, "", nil
	}
	cardURL = raw
	if firstErr != nil || doc.Capabilities == nil {
		if strings.HasSuffix(u.Path, ".json") {
			if firstErr != nil {
				return "", "", fmt.Errorf("%s could not be read: %s", egress.Redact(raw), firstErr)
			}
			return "", "", fmt.Errorf("%s is neither an agent card nor an attestation", egress.Redact(raw))
		}
		cardURL = strings.TrimRight(raw, "/") + cardPath
		doc = document{}
		if err := s.fetch.get(ctx, cardURL, &doc); err != nil {
			return "", "", fmt.Errorf("the agent card (%s) could not be read: %s", egress.Redact(cardURL), err)
		}
		if doc.Capabilities == nil {
			return "", "", fmt.Errorf("%s is not an agent card", egress.Redact(cardURL))
		}
	}
	for _, ext := range doc.Capabilities.Extensions {
		if ext.URI != Extension {
			continue
		}
		var params extensionParams
		if err := json.Unmarshal(ext.Params, &params); err != nil {
			return "", cardURL, errors.New("the card's reputation extension has params that are not an attestation")
		}
		if a := params.Attestation; a != nil {
			params.JWS, params.URL = a.JWS, a.URL
		}
		if params.JWS != "" {
			res.Source = reputationv1.Source_SOURCE_CARD
			return params.JWS, cardURL, nil
		}
		if params.URL == "" {
			return "", cardURL, errors.New("the card's reputation extension carries no attestation and names no URL")
		}
		res.Source = reputationv1.Source_SOURCE_CARD_URL
		var att document
		if err := s.fetch.get(ctx, params.URL, &att); err != nil {
			return "", cardURL, fmt.Errorf("the attestation the card names (%s) could not be read: %s", egress.Redact(params.URL), err)
		}
		if att.JWS == "" {
			return "", cardURL, fmt.Errorf("%s, which the card names, holds no attestation", egress.Redact(params.URL))
		}
		return att.JWS, cardURL, nil
	}
	return "", cardURL, fmt.Errorf("the agent card declares no reputation extension (%s): the agent has published no attestation there", Extension)
}

// checkpointProblem says why p's audit checkpoint is not a checkpoint its
// issuer's audit key signed, matching the attestation, or "" when it is:
// the note's form (checkpointForm), then its signature against the audit
// checkpoint keys the issuer publishes at auditKeysPath — never its mesh
// keys, which sign attestations, not checkpoints.
func (s *Service) checkpointProblem(ctx context.Context, p parsed) string {
	if reason := p.checkpointForm(); reason != "" {
		return reason
	}
	cp := p.st.Reputation.AuditCheckpoint
	keysURL := p.st.Issuer + auditKeysPath
	body, err := s.fetch.read(ctx, keysURL, "text/plain")
	if err != nil {
		return fmt.Sprintf("the issuer's audit checkpoint keys (%s) could not be read: %s", keysURL, err)
	}
	keys, err := auditcheckpoint.ParseKeys(string(body))
	if err != nil {
		return fmt.Sprintf("the issuer's audit checkpoint keys (%s) are not audit checkpoint verifier keys: %s", keysURL, err)
	}
	c, err := auditcheckpoint.NewVerifier(keys...).Open(cp.Note)
	var nerr *auditcheckpoint.Error
	switch {
	case errors.As(err, &nerr) && nerr.Problem == auditcheckpoint.UnknownKey:
		return fmt.Sprintf("the attestation's audit checkpoint is signed by %s, a key its issuer does not publish at %s: forged or re-signed", cp.Origin, keysURL)
	case errors.As(err, &nerr) && nerr.Problem == auditcheckpoint.BadSignature:
		return fmt.Sprintf("the attestation's audit checkpoint signature does not verify with the issuer's audit key: %s", nerr.Detail)
	case err != nil:
		return fmt.Sprintf("the attestation's audit checkpoint note is not a checkpoint: %s", err)
	}
	if c.Origin != cp.Origin || c.Seq != cp.Seq || c.Hash != cp.Hash || c.Time.UTC().Format(timeLayout) != cp.Time {
		return "the attestation's audit checkpoint differs from the signed note it carries (origin, seq, hash or time)"
	}
	return ""
}

// cardBinding says why p is not bound to the card read at cardURL, or ""
// when it is: the card is served by the issuer's origin (the mesh whose
// keys signed it) and is the card of the agent the attestation is about.
func cardBinding(p parsed, cardURL string) string {
	if origin(cardURL) != origin(p.st.Issuer) {
		return fmt.Sprintf("the attestation's issuer %s is not the mesh that serves the card (%s)", p.st.Issuer, origin(cardURL))
	}
	path, _ := url.Parse(cardURL)
	segments := strings.Split(strings.TrimSuffix(strings.TrimSuffix(path.Path, cardPath), "/"), "/")
	if segments[len(segments)-1] != p.st.Subject {
		return fmt.Sprintf("the attestation is about agent %s, but the card read is not %s's", p.st.Subject, p.st.Subject)
	}
	return ""
}

var agentPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// servePublic answers an agent's published attestation to anyone: it is
// signed, and made to be read by other meshes.
func (s *Service) servePublic(w http.ResponseWriter, r *http.Request) {
	agent := r.PathValue("agent")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	if !agentPattern.MatchString(agent) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"no such agent"}`))
		return
	}
	a, err := s.store.Get(r.Context(), agent)
	if errors.Is(err, ErrNotFound) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"the agent has published no attestation"}`))
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "reputation.public_read_failed", "agent", agent, "error", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"unavailable; try again"}`))
		return
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(a)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b)
}
