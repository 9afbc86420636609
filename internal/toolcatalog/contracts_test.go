package toolcatalog_test

import (
	"errors"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	rulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/rules/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// TestRequiredTextRefusesWhitespace walks the request of every RPC of every
// domain (tools and the RPCs services and workers call alike) and sets each
// required text field, alone, to whitespace of the field's minimum length:
// the request must be refused with a violation on that field. Most fields
// refuse it by carrying the non_blank rule (toolmesh.rules.v1); identifiers
// refuse it by their pattern. A required string added without either fails
// here, naming the field.
func TestRequiredTextRefusesWhitespace(t *testing.T) {
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	checked, nonBlank := 0, 0
	for _, sd := range toolcatalog.Contracts() {
		for i := range sd.Methods().Len() {
			in := sd.Methods().Get(i).Input()
			mt, err := protoregistry.GlobalTypes.FindMessageByName(in.FullName())
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range requiredText(in, func(m protoreflect.Message) protoreflect.Message { return m }, "", 0) {
				checked++
				if f.nonBlank {
					nonBlank++
				}
				req := mt.New()
				f.set(req, strings.Repeat(" ", f.minLen))
				err := v.Validate(req.Interface())
				var ve *protovalidate.ValidationError
				if !errors.As(err, &ve) || !hasViolation(ve, f.path) {
					t.Errorf("%s: %s = %q is not refused (%v); give it (toolmesh.rules.v1.non_blank) = true", in.FullName(), f.path, strings.Repeat(" ", f.minLen), err)
				}
				if f.nonBlank && !hasMessage(ve, f.path, "must not be empty or only whitespace") {
					t.Errorf("%s: %s = whitespace is refused without the non_blank message: %v", in.FullName(), f.path, err)
				}
			}
		}
	}
	// The walk must have found what it is meant to find: every domain has
	// required text, most of it free text under non_blank.
	t.Logf("%d required text fields, %d of them free text under non_blank", checked, nonBlank)
	if checked < 40 || nonBlank < 20 {
		t.Errorf("checked %d required text fields, %d with non_blank; the walk misses fields", checked, nonBlank)
	}
}

// textField is a required string field reached from a request along path.
type textField struct {
	path     string
	minLen   int
	nonBlank bool
	// set sets the field to value in a request, creating the messages on
	// its path (one element of each list).
	set func(req protoreflect.Message, value string)
}

// reach returns the message that holds a field, in req, creating it.
type reach func(req protoreflect.Message) protoreflect.Message

// requiredText lists the required string fields of md and of the toolmesh
// messages it holds (to depth 4), md being reached by r along prefix.
func requiredText(md protoreflect.MessageDescriptor, r reach, prefix string, depth int) []textField {
	var out []textField
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		rules, _ := proto.GetExtension(f.Options(), validate.E_Field).(*validate.FieldRules)
		path := prefix + string(f.Name())
		if f.IsList() {
			path += "[0]"
		}
		switch {
		case f.IsMap():
		case f.Kind() == protoreflect.MessageKind && depth < 4 && strings.HasPrefix(string(f.Message().FullName()), "toolmesh."):
			out = append(out, requiredText(f.Message(), func(req protoreflect.Message) protoreflect.Message {
				parent := r(req)
				if f.IsList() {
					l := parent.Mutable(f).List()
					e := l.NewElement()
					l.Append(e)
					return e.Message()
				}
				return parent.Mutable(f).Message()
			}, path+".", depth+1)...)
		case f.Kind() == protoreflect.StringKind:
			sr, required := rules.GetString(), rules.GetRequired()
			if f.IsList() {
				items := rules.GetRepeated().GetItems()
				sr, required = items.GetString(), items.GetRequired()
			}
			// Optional text (ignored when empty) may hold what it likes.
			if !required && (sr.GetMinLen() == 0 || rules.GetIgnore() == validate.Ignore_IGNORE_IF_ZERO_VALUE) {
				continue
			}
			on, _ := proto.GetExtension(sr, rulesv1.E_NonBlank).(bool)
			out = append(out, textField{path: path, minLen: max(int(sr.GetMinLen()), 1), nonBlank: on,
				set: func(req protoreflect.Message, value string) {
					if parent := r(req); f.IsList() {
						parent.Mutable(f).List().Append(protoreflect.ValueOfString(value))
					} else {
						parent.Set(f, protoreflect.ValueOfString(value))
					}
				}})
		}
	}
	return out
}

func hasViolation(ve *protovalidate.ValidationError, path string) bool {
	for _, v := range ve.Violations {
		if protovalidate.FieldPathString(v.Proto.GetField()) == path {
			return true
		}
	}
	return false
}

func hasMessage(ve *protovalidate.ValidationError, path, msg string) bool {
	for _, v := range ve.Violations {
		if protovalidate.FieldPathString(v.Proto.GetField()) == path && v.Proto.GetMessage() == msg {
			return true
		}
	}
	return false
}

// TestProductToolsAreNamedForTheirDomain: every tool of the product's
// contracts is named <domain>_<verb>, its domain the contract's package
// (toolmesh.<domain>.v1). The catalog itself admits any lower snake case
// name, for contracts that must bear names given elsewhere (the conformance
// suite's fixtures).
func TestProductToolsAreNamedForTheirDomain(t *testing.T) {
	n := 0
	for _, sd := range toolcatalog.Contracts() {
		domain := strings.Split(string(sd.ParentFile().Package()), ".")[1]
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			opt, _ := proto.GetExtension(md.Options(), toolv1.E_Tool).(*toolv1.Tool)
			if opt.GetName() == "" {
				continue
			}
			n++
			if verb, ok := strings.CutPrefix(opt.GetName(), domain+"_"); !ok || verb == "" {
				t.Errorf("%s: tool %q is not named %s_<verb>", md.FullName(), opt.GetName(), domain)
			}
		}
	}
	if n < 50 {
		t.Errorf("found %d product tools; the walk misses some", n)
	}
}
