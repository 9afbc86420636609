package toolcatalog

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Docs holds the leading comments of every descriptor in a descriptor set,
// by full name. Generated Go code drops comments, so they come from a
// FileDescriptorSet built with source info (proto/gen/descriptorset).
type Docs map[protoreflect.FullName]string

// Lookup returns the comment of name ("" if none). It has the signature of
// toolschema.Comments.
func (d Docs) Lookup(name protoreflect.FullName) string { return d[name] }

// LoadDocs reads the comments out of a serialized FileDescriptorSet.
// Imports are resolved against the global registry.
func LoadDocs(set []byte) (Docs, error) {
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(set, &fds); err != nil {
		return nil, fmt.Errorf("read descriptor set: %w", err)
	}
	docs := Docs{}
	for _, fdp := range fds.GetFile() {
		fd, err := protodesc.FileOptions{AllowUnresolvable: true}.New(fdp, protoregistry.GlobalFiles)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", fdp.GetName(), err)
		}
		locs := fd.SourceLocations()
		add := func(d protoreflect.Descriptor) {
			if c := clean(locs.ByDescriptor(d).LeadingComments); c != "" {
				docs[d.FullName()] = c
			}
		}
		var walkMsg func(protoreflect.MessageDescriptor)
		walkEnum := func(e protoreflect.EnumDescriptor) {
			add(e)
			for i := 0; i < e.Values().Len(); i++ {
				add(e.Values().Get(i))
			}
		}
		walkMsg = func(m protoreflect.MessageDescriptor) {
			add(m)
			for i := 0; i < m.Fields().Len(); i++ {
				add(m.Fields().Get(i))
			}
			for i := 0; i < m.Messages().Len(); i++ {
				walkMsg(m.Messages().Get(i))
			}
			for i := 0; i < m.Enums().Len(); i++ {
				walkEnum(m.Enums().Get(i))
			}
		}
		for i := 0; i < fd.Messages().Len(); i++ {
			walkMsg(fd.Messages().Get(i))
		}
		for i := 0; i < fd.Enums().Len(); i++ {
			walkEnum(fd.Enums().Get(i))
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			add(sd)
			for j := 0; j < sd.Methods().Len(); j++ {
				add(sd.Methods().Get(j))
			}
		}
	}
	return docs, nil
}

// clean joins a proto comment's lines into prose: leading spaces go, line
// breaks inside a paragraph become spaces, blank lines stay paragraph breaks.
func clean(c string) string {
	lines := strings.Split(strings.TrimSpace(c), "\n")
	var paras []string
	var cur []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			if len(cur) > 0 {
				paras = append(paras, strings.Join(cur, " "))
				cur = nil
			}
			continue
		}
		cur = append(cur, l)
	}
	if len(cur) > 0 {
		paras = append(paras, strings.Join(cur, " "))
	}
	return strings.Join(paras, "\n\n")
}
