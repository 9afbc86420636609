package toolcatalog

import (
	"encoding/json"
	"math"
	"sort"
	"strings"
	"unicode"
)

// Index finds tools by what a caller wants to do, in a few words: a BM25
// ranking over each tool's name, title, description, toolset and argument
// names, built once from the registry and searched in process. Words are
// compared lower-cased and stemmed ("credits", "credit"; "created",
// "create"), and the words that say nothing ("a", "to", "the") are left
// out; a word in a tool's name counts more than one in its title, and one
// in its title more than one in its description.
//
//	hits := toolcatalog.NewIndex(reg.Tools()).Search("give credits to an agent", nil, 3)
//	fmt.Println(hits[0].Tool.Name)
type Index struct {
	tools    []*Tool
	postings map[string][]posting
	lengths  []float64 // each tool's weighted length
	avgLen   float64
}

// posting is a term's weighted frequency in one tool.
type posting struct {
	doc int
	tf  float64
}

// Hit is a tool a search found and how well it matches.
type Hit struct {
	Tool  *Tool
	Score float64
}

// Field weights and the BM25 parameters.
const (
	weightName        = 3
	weightTitle       = 2
	weightToolset     = 1
	weightDescription = 1
	weightArgument    = 1
	bm25K1            = 1.2
	bm25B             = 0.75
)

// NewIndex indexes tools.
func NewIndex(tools []*Tool) *Index {
	x := &Index{tools: tools, postings: map[string][]posting{}, lengths: make([]float64, len(tools))}
	total := 0.0
	for i, t := range tools {
		tf := map[string]float64{}
		add := func(text string, weight float64) {
			for _, w := range Terms(text) {
				tf[w] += weight
				x.lengths[i] += weight
			}
		}
		add(t.Name, weightName)
		add(t.Title, weightTitle)
		add(t.Toolset, weightToolset)
		add(t.Description, weightDescription)
		for _, a := range argumentNames(t.InputSchema) {
			add(a, weightArgument)
		}
		for w, f := range tf {
			x.postings[w] = append(x.postings[w], posting{doc: i, tf: f})
		}
		total += x.lengths[i]
	}
	if len(tools) > 0 {
		x.avgLen = total / float64(len(tools))
	}
	return x
}

// argumentNames are the top-level properties of an input schema.
func argumentNames(schema json.RawMessage) []string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Search returns at most limit tools matching query, best first (ties by
// name), among those allow accepts (every tool when allow is nil). A tool
// matching none of the query's words is not a hit.
func (x *Index) Search(query string, allow func(*Tool) bool, limit int) []Hit {
	scores := map[int]float64{}
	n := float64(len(x.tools))
	seen := map[string]bool{}
	for _, w := range Terms(query) {
		if seen[w] {
			continue
		}
		seen[w] = true
		ps := x.postings[w]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + (n-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			norm := bm25K1 * (1 - bm25B + bm25B*x.lengths[p.doc]/x.avgLen)
			scores[p.doc] += idf * p.tf * (bm25K1 + 1) / (p.tf + norm)
		}
	}
	hits := make([]Hit, 0, len(scores))
	for doc, s := range scores {
		if t := x.tools[doc]; allow == nil || allow(t) {
			hits = append(hits, Hit{Tool: t, Score: s})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Tool.Name < hits[j].Tool.Name
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

// stopWords say nothing about what a tool does.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"can": true, "do": true, "does": true, "for": true, "from": true, "how": true, "i": true, "in": true,
	"into": true, "is": true, "not": true, "it": true, "its": true, "me": true, "my": true, "of": true, "on": true,
	"or": true, "so": true, "that": true, "the": true, "their": true, "them": true, "then": true,
	"this": true, "to": true, "was": true, "we": true, "what": true, "when": true, "which": true,
	"who": true, "will": true, "with": true, "you": true, "your": true,
}

// Terms are the words of text as the index compares them: lower-cased,
// split at anything but letters and digits (so tool and argument names
// split at "_"), without stop words and one-letter words, stemmed.
func Terms(text string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len(w) < 2 || stopWords[w] {
			continue
		}
		out = append(out, stem(w))
	}
	return out
}

// stem strips the commonest English endings so that the forms of a word
// meet: plurals, -ing and -ed, and a final e ("creates", "created",
// "creating" and "create" are all "creat").
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		w = w[:len(w)-3] + "y"
	case len(w) > 5 && strings.HasSuffix(w, "ing"):
		w = w[:len(w)-3]
	case len(w) > 4 && strings.HasSuffix(w, "ed"):
		w = w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}
