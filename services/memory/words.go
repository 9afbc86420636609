package memory

import (
	"sort"
	"strings"
	"unicode"
)

// maxQueryWords bounds how many distinct words of a query are searched for.
const maxQueryWords = 64

// words splits text into lowercase words: maximal runs of letters and
// digits. Indexing and searching both use it, with or without encryption,
// so matching is the same in both modes: whole words, ignoring case.
func words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
}

// indexTerms returns the index terms of content for agent. Every occurrence
// becomes one term, so term frequency and length still rank; hashed terms
// are sorted, so the index keeps no word order either.
func (s *Service) indexTerms(agent, content string) string {
	ws := words(content)
	if s.sealer == nil {
		return strings.Join(ws, " ")
	}
	for i, w := range ws {
		ws[i] = s.sealer.term(agent, w)
	}
	sort.Strings(ws)
	return strings.Join(ws, " ")
}

// queryTerms returns the distinct index terms to search for query.
func (s *Service) queryTerms(agent, query string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range words(query) {
		if seen[w] {
			continue
		}
		seen[w] = true
		if s.sealer != nil {
			w = s.sealer.term(agent, w)
		}
		out = append(out, w)
		if len(out) == maxQueryWords {
			break
		}
	}
	return out
}
