package jcs_test

import (
	"bufio"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/jcs"
)

func TestRFC8785Example(t *testing.T) {
	// The example of RFC 8785 §3.2.4.
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, err := jcs.Transform([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("Transform =\n%s\nwant\n%s", got, want)
	}
}

func TestMembersSortByUTF16CodeUnits(t *testing.T) {
	// RFC 8785 §3.2.3: U+1F600 is the surrogate pair D83D DE00, so it sorts
	// before U+FB33 although its code point is larger.
	in := `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One",` +
		`"\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`
	want := "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
		"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := jcs.Transform([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("Transform =\n%s\nwant\n%s", got, want)
	}
}

func TestTransform(t *testing.T) {
	cases := []struct{ in, want string }{
		{` { "b" : [ 1 , { } , [ ] ] , "a" : { "d" : true , "c" : null } } `, `{"a":{"c":null,"d":true},"b":[1,{},[]]}`},
		{`"tab\tnewline\nbell\u0007del\u007fslash\/quote\"back\\"`, `"tab\tnewline\nbell\u0007del` + "\x7f" + `slash/quote\"back\\"`},
		{`"\b\f\r\u001f\u2028<>&"`, "\"\\b\\f\\r\\u001f\u2028<>&\""},
		{`[-0, 0.0, -0.0e5, 1.0, 100, 1e2, 12e-1]`, `[0,0,0,1,100,100,1.2]`},
		{`[9007199254740992, -9007199254740992, 18014398509481984]`, `[9007199254740992,-9007199254740992,18014398509481984]`},
		{`[1e21, 1e20, 0.000001, 1e-7, 123456789012345680000]`, `[1e+21,100000000000000000000,0.000001,1e-7,123456789012345680000]`},
		// An integer literal that reads back unchanged is accepted, however large.
		{`[100000000000000000000000, -8221321797847089000]`, `[1e+23,-8221321797847089000]`},
		{`{"a":"é","A":"x","aa":1,"":0}`, `{"":0,"A":"x","a":"é","aa":1}`},
	}
	for _, tc := range cases {
		got, err := jcs.Transform([]byte(tc.in))
		if err != nil {
			t.Errorf("Transform(%s): %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Transform(%s) =\n%s\nwant\n%s", tc.in, got, tc.want)
		}
		again, err := jcs.Transform(got)
		if err != nil || string(again) != string(got) {
			t.Errorf("canonical form of %s is not a fixed point: %s (err %v)", got, again, err)
		}
	}
}

func TestTransformRefuses(t *testing.T) {
	cases := map[string]string{
		"duplicate member":                `{"a":1,"a":2}`,
		"duplicate member after escaping": `{"a":1,"\u0061":2}`,
		"lone high surrogate":             `"\ud800"`,
		"lone low surrogate":              `"\udc00x"`,
		"high surrogate then not low":     `"\ud83d\u0041"`,
		"invalid UTF-8":                   "\"\xff\"",
		"raw control character":           "\"a\x01b\"",
		"integer a double cannot hold":    `{"n":9007199254740993}`,
		"1e23's double written out":       `99999999999999991611392`,
		"2^53 + 1":                        `-9007199254740993`,
		"number out of range":             `1e400`,
		"leading zero":                    `012`,
		"trailing data":                   `{} {}`,
		"trailing comma":                  `[1,]`,
		"unquoted name":                   `{a:1}`,
		"bare word":                       `nul`,
		"empty input":                     ``,
		"unterminated string":             `"abc`,
		"bad escape":                      `"\x"`,
		"fraction without digits":         `1.`,
		"nesting too deep":                strings.Repeat("[", 600) + strings.Repeat("]", 600),
	}
	for name, in := range cases {
		got, err := jcs.Transform([]byte(in))
		var se *jcs.SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%s: Transform(%.40q) = %s, %v; want a *SyntaxError", name, in, got, err)
		}
	}
}

func TestMarshal(t *testing.T) {
	got, err := jcs.Marshal(map[string]any{"seq": "9007199254740993", "html": "<a&b>", "n": 2.5, "list": []int{3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"html":"<a&b>","list":[3,1],"n":2.5,"seq":"9007199254740993"}`; string(got) != want {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
	if _, err := jcs.Marshal(map[string]any{"seq": int64(9007199254740993)}); err == nil {
		t.Error("Marshal of an int64 beyond 2^53 succeeded; it must be refused so it is never rounded")
	}
}

// TestNumbersMatchJavaScript checks number formatting against JSON.stringify
// of the same doubles, computed by Node.js (testdata/es_numbers.txt).
func TestNumbersMatchJavaScript(t *testing.T) {
	f, err := os.Open("testdata/es_numbers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		h, want, _ := strings.Cut(line, " ")
		bits, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		x := math.Float64frombits(bits)
		got, err := jcs.AppendNumber(nil, x)
		if err != nil || string(got) != want {
			t.Errorf("AppendNumber(%v) [bits %s] = %s (err %v), want %s", x, h, got, err, want)
		}
		// Parsing JavaScript's output gives the same canonical text back.
		if back, err := jcs.Transform([]byte(want)); err != nil || string(back) != want {
			t.Errorf("Transform(%s) = %s (err %v), want it unchanged", want, back, err)
		}
		n++
	}
	if n < 1000 {
		t.Fatalf("only %d vectors read", n)
	}
}

func TestRFC8785NumberTable(t *testing.T) {
	// Appendix B of RFC 8785.
	cases := map[uint64]string{
		0x0000000000000000: "0",
		0x8000000000000000: "0",
		0x0000000000000001: "5e-324",
		0x8000000000000001: "-5e-324",
		0x7fefffffffffffff: "1.7976931348623157e+308",
		0xffefffffffffffff: "-1.7976931348623157e+308",
		0x4340000000000000: "9007199254740992",
		0xc340000000000000: "-9007199254740992",
		0x4430000000000000: "295147905179352830000",
		0x44b52d02c7e14af5: "9.999999999999997e+22",
		0x44b52d02c7e14af6: "1e+23",
		0x44b52d02c7e14af7: "1.0000000000000001e+23",
		0x444b1ae4d6e2ef4e: "999999999999999700000",
		0x444b1ae4d6e2ef4f: "999999999999999900000",
		0x444b1ae4d6e2ef50: "1e+21",
		0x3eb0c6f7a0b5ed8c: "9.999999999999997e-7",
		0x3eb0c6f7a0b5ed8d: "0.000001",
		0x41b3de4355555553: "333333333.3333332",
		0x41b3de4355555554: "333333333.33333325",
		0x41b3de4355555555: "333333333.3333333",
		0x41b3de4355555556: "333333333.3333334",
		0x41b3de4355555557: "333333333.33333343",
		0xbecbf647612f3696: "-0.0000033333333333333333",
		0x43143ff3c1cb0959: "1424953923781206.2",
	}
	for bits, want := range cases {
		got, err := jcs.AppendNumber(nil, math.Float64frombits(bits))
		if err != nil || string(got) != want {
			t.Errorf("AppendNumber(%016x) = %s (err %v), want %s", bits, got, err, want)
		}
	}
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := jcs.AppendNumber(nil, x); !errors.Is(err, jcs.ErrNotFinite) {
			t.Errorf("AppendNumber(%v) error = %v, want ErrNotFinite", x, err)
		}
	}
}
